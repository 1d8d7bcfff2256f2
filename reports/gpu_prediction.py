"""The report's answer for another machine (`reports.build DIR --gpu=<name>`): for each measured
run and batch size, the speedup the step-cost model predicts on that GPU from the acceptance
measured here (speclens/whatif.py), beside the speedup measured here."""

from __future__ import annotations

from pathlib import Path

from reports.page import Section
from reports.runs import Run
from speclens.checkpoints import read_config
from speclens.draft_cost import MECHANISMS, drafter_shape
from speclens.errors import SpeclensError
from speclens.model_shape import shape_of
from speclens.records import read_parquet
from speclens.run_files import REQUESTS_FILE
from speclens.step_cost import Hardware, check_tp
from speclens.whatif import Drafting, mean_context, point

HEADER = ["drafter", "D", "B", "context", "AL (measured)", "speedup here", "predicted speedup", "bound"]


def _config(ref: str | None, key: str) -> dict | None:
    return None if not ref else read_config(Path(ref), key)


def prediction_rows(runs: list[Run], hw: Hardware) -> tuple[list[list[str]], list[str]]:
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
            target = shape_of(read_config(Path(run.stamp["target_dir"]), "target.model"), "target.model")
            check_tp(target, hw.tp)
            draft_ref = (run.stamp.get("config", {}).get("drafter") or {}).get("model")
            draft = drafter_shape(summary.drafter, target, _config(draft_ref, "drafter.model"))
        except SpeclensError as exc:  # the target or draft is not on this machine any more
            notes.append(f"{run.path.name}: not predicted ({exc}).")
            continue
        requests = read_parquet(run.path / REQUESTS_FILE)
        drafting = Drafting(summary.drafter, {summary.d: summary.al}, draft)
        for op in summary.operating_points:
            mine = requests[requests.batch_size == op.batch_size]
            context = mean_context(mine.prompt_tokens, mine.output_tokens)
            p = point(drafting, summary.d, op.batch_size, context, target, hw)
            here = "-" if op.speedup is None else f"x{op.speedup:.2f}"
            rows.append(
                [summary.mechanism, str(summary.d), str(op.batch_size), str(context), f"{summary.al:.2f}", here]
                + [f"x{p['speedup']:.2f}", p["bound"]]
            )
    return rows, notes


def gpu_section(runs: list[Run], hw: Hardware) -> Section:
    rows, notes = prediction_rows(runs, hw)
    name = hw.gpu.name
    return Section(
        f"Predicted on {name}",
        text=[
            f"The speedup the step-cost model predicts on {name} (tp={hw.tp}, weights={hw.weights}) for the "
            "acceptance measured here, at each run's batch sizes and mean context (prompt plus half the "
            "output): acceptance under greedy decoding does not depend on the hardware, step costs do "
            "(docs/whatif.md; `python -m evals.whatif` for other batch sizes and D).",
            *notes,
        ],
        tables=[(HEADER, rows)] if rows else [],
    )
