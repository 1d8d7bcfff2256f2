"""The report's answer for another machine (`reports.build DIR --gpu=<name>`): for each measured
run and batch size, the speedup the step-cost model predicts on that GPU from the acceptance
measured here (speclens/gpu_model/whatif.py), beside the speedup measured here. A run measured at several
prompt lengths gets one row per length at each batch size, from that length's own AL and mean
context, rather than one from a context pooled over lengths. The prediction follows tokens per
step: the AL times the share of passes that drafted there (metrics.draft_share), a pass without a
draft costed as the run's model runner ran it (speclens/gpu_model/whatif.py)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from reports.page import Section
from reports.runs import RunView
from speclens.checkpoints import read_config
from speclens.errors import SpeclensError
from speclens.figures import metrics
from speclens.figures.summary import OperatingPoint
from speclens.file_formats.records import read_parquet
from speclens.file_formats.run_files import REQUESTS_FILE
from speclens.gpu_model.draft_cost import MECHANISMS, drafter_shape
from speclens.gpu_model.model_error import HELD_OUT, UNSCORED_WIDENING, interval_for, unscored_because
from speclens.gpu_model.model_shape import shape_of
from speclens.gpu_model.step_cost import Hardware, check_tp
from speclens.gpu_model.whatif import Drafting, mean_context, point, undrafted_step
from speclens.provenance import mark

HEADER = [
    "drafter",
    "D",
    "B",
    "context",
    "AL (here; [source] where not measured)",
    "tokens/step",
    "speedup here",
    "predicted speedup",
    "80% range",
    "bound",
]


def _config(ref: str | None, key: str) -> dict | None:
    return None if not ref else read_config(Path(ref), key)


def prediction_rows(runs: list[RunView], hw: Hardware) -> tuple[list[list[str]], list[str]]:
    """One row per drafted run and batch size, and a note per run that could not be predicted."""
    rows, notes = [], []
    for run in runs:
        summary = run.summary
        if summary.d is None or summary.al is None:
            continue
        if summary.drafter not in MECHANISMS:
            notes.append(f"{run.path.name}: no draft-cost model for {summary.drafter}.")
            continue
        try:
            if run.stamp.get("target_dir") is None:
                raise SpeclensError("its stamp names no target folder")
            target = shape_of(read_config(Path(run.stamp["target_dir"]), "target.model"), "target.model")
            check_tp(target, hw.tp)
            draft_ref = (run.stamp.get("config", {}).get("drafter") or {}).get("model")
            draft = drafter_shape(summary.drafter, target, _config(draft_ref, "drafter.model"))
        except SpeclensError as exc:  # the target or draft is not on this machine any more
            notes.append(f"{run.path.name}: not predicted ({exc}).")
            continue
        requests = read_parquet(run.path / REQUESTS_FILE)
        runner = summary.numerics.model_runner if summary.numerics else None
        if not run.provenance.measured:  # a prediction is of the acceptance it is given: say whose
            notes.append(f"{run.path.name}: predicted from {run.provenance.label()} acceptance, not measured.")
        for op in summary.operating_points:
            mine = requests[requests.batch_size == op.batch_size]
            for al, speedup, group in _groups(summary.al, op, mine):
                context = mean_context(group.prompt_tokens, group.output_tokens)
                share = metrics.draft_share(group)
                if share is None:
                    notes.append(
                        f"{run.path.name}: its records do not count the passes that drafted: predicted as if every "
                        "step drafts (tokens per step = AL), an upper bound for a lookup drafter."
                    )
                drafting = Drafting(
                    summary.drafter,
                    {summary.d: al},
                    draft,
                    draft_share=1.0 if share is None else share,
                    undrafted=undrafted_step(runner),
                )
                # at the requests the pass held in flight (a length pass may hold fewer than B)
                p = point(drafting, summary.d, op.held, context, target, hw)
                here = "-" if speedup is None else f"x{speedup:.2f}"
                rows.append(
                    [summary.mechanism + run.qualifier, str(summary.d), str(op.held), str(context)]
                    + [f"{al:.2f}{mark(run.provenance.source)}"]
                    + [
                        f"{p['tokens_per_step']:.2f}",
                        here,
                        f"x{p['speedup']:.2f}",
                        _range(p, hw),
                        p["bound"],
                    ]
                )
    return rows, notes


def _range(p: dict, hw: Hardware) -> str:
    """The held-out interval, its top held at the tokens per step no speedup exceeds; `*` where it
    was widened for a path no published case was scored on (model_error.interval_for)."""
    (low, high), derived_on = interval_for(p["speedup"], p["tokens_per_step"], hw, p["drafter"])
    return f"[{low:.2f}, {high:.2f}]" + ("*" if derived_on != HELD_OUT.derived_on else "")


def _widened(runs: list[RunView], hw: Hardware) -> list[str]:
    """Why each widened (`*`) range was not scored, once per reason."""
    drafters = sorted({r.summary.drafter for r in runs if r.summary.d is not None and r.summary.drafter in MECHANISMS})
    reasons = dict.fromkeys(why for drafter in drafters if (why := unscored_because(hw, drafter)) is not None)
    return [
        f"Ranges marked * were not scored on this path ({why}): half-width ×{UNSCORED_WIDENING:g} in log, "
        "no coverage claimed."
        for why in reasons
    ]


def _groups(al: float, op: OperatingPoint, requests: pd.DataFrame) -> list[tuple[float, float | None, pd.DataFrame]]:
    """(AL, speedup measured here, requests) of the operating point: each length bucket's where it
    has them (with AL), else all its requests with the run's AL."""
    if not op.by_length or "input_tokens" not in requests.columns:
        return [(al, op.speedup, requests)]
    return [
        (length.al, length.speedup, requests[requests.input_tokens == length.input_tokens])
        for length in op.by_length.values()
        if length.al is not None and (requests.input_tokens == length.input_tokens).any()
    ]


def gpu_section(runs: list[RunView], hw: Hardware) -> Section:
    rows, notes = prediction_rows(runs, hw)
    name = hw.gpu.name
    return Section(
        f"Predicted on {name}",
        text=[
            f"The speedup the step-cost model predicts on {name} (tp={hw.tp}, weights={hw.weights}"
            + ("" if hw.engine is None else f"; engine {hw.engine.label()}")
            + ") for the "
            "acceptance measured here, at each run's batch sizes and mean context (prompt plus half the "
            "output): acceptance under greedy decoding does not depend on the hardware, step costs do "
            "(docs/whatif.md; `python -m evals.whatif` for other batch sizes and D). A speedup follows "
            "tokens per step (1 + the share of passes that drafted × (AL − 1)), not AL. The "
            f"{HELD_OUT.describe()}; docs/whatif.md.",
            *_widened(runs, hw),
            *dict.fromkeys(notes),  # each once
        ],
        tables=[(HEADER, rows)] if rows else [],
    )
