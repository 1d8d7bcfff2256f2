"""The ranking of finished runs: (mechanism, D) per mode, domain and operating point by speedup
over plain decoding (guideline 5), ties between overlapping repeat ranges, and the Pareto front of
throughput against interactivity. Its rendering is reports/ranking_tables.py, its command reports/rank.py.

The speedup is the measured one (speculative output tokens/s over plain decoding at the same
batch size and prompts) where the run measured it, i.e. over all its prompts; per domain of a
mixed run it is predicted from the domain's tokens per step and the run's measured step costs
(speclens/figures/costs.py), corrected by the run's speedup account where it has one, and labelled so.
Plain decoding (`none`, speedup 1 by definition) is ranked beside the mechanisms: where it ranks
first, speculation does not pay at that operating point.

Runs whose prompts state their lengths (summary.json `by_length`) are also ranked per length
bucket and batch size (`length_ranking_rows`), each entry from that length's own figures: its AL
and tokens per step, and its measured speedup (a pass runs one length at a time, so each length
has its own throughput and step costs), else its predicted one. An entry past the target's own
window names the context extension it was measured under.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Collection

import pandas as pd

from drafters.facts_table import facts_of
from reports.runs import (
    CONSISTENT_ACROSS_TEMPERATURES,
    RunView,
    check_consistent,
    check_one_each,
    find_runs,
    measured_runs,
    shown_identity,
)
from reports.table import median_ms
from speclens.errors import SpeclensError
from speclens.figures import costs
from speclens.figures.summary import DomainPoint, LengthPoint, OperatingPoint
from speclens.file_formats.ranking_file import (
    LENGTH_RANK_COLUMNS,
    LENGTH_RANKING_FILE,
    RANK_COLUMNS,
    RANKING_FILE,
    LengthRankingRow,
    RankingRow,
    checked_rows,
)
from speclens.provenance import MEASURED

# One table of the ranking: entries in the same mode, domain and batch size.
TABLE = ["temperature", "chat_template_kwargs", "setting", "domain", "batch_size"]


def mode_label(temperature: float, template: str, setting: str, ranking: pd.DataFrame) -> str:
    """`T=.., kwargs, setting` naming an entry's mode, each part only where the ranking holds several."""
    parts = [f"T={temperature:g}"] if ranking["temperature"].nunique() > 1 else []
    parts += [template or "template defaults"] if ranking["chat_template_kwargs"].nunique() > 1 else []
    parts += [setting or "engine defaults"] if ranking["setting"].nunique() > 1 else []
    return ", ".join(parts)


def tables(ranking: pd.DataFrame):
    """(heading, rows) of each table of the ranking, the mode named only when there are several."""
    for (t, template, setting, domain, b), group in ranking.groupby(TABLE, sort=True):
        mode = mode_label(t, template, setting, ranking)
        yield (f"{mode}, " if mode else "") + f"{domain}, batch size {b}", group


def _p50(stat: Any) -> float | None:
    return None if stat is None else stat.p50


NO_LATENCY = {"ttft_p50_ms": None, "tpot_p50_ms": None, "latency_speedup": None}


def _latency(point: OperatingPoint | None) -> dict[str, Any]:
    """A measured entry's p50 TTFT and TPOT and its TPOT speedup (none for a domain's predicted row)."""
    lat = point.latency if point is not None else None
    if lat is None:
        return NO_LATENCY
    return {
        "ttft_p50_ms": _p50(lat.ttft_ms),
        "tpot_p50_ms": _p50(lat.tpot_ms),
        "latency_speedup": point.latency_speedup,
    }


def _plain_latency(point: OperatingPoint | None, speculative_run: bool) -> dict[str, Any]:
    """Plain decoding's p50 TPOT: its own run's, or a speculative run's TPOT times its TPOT ratio
    (all such a run keeps of its baseline's latency)."""
    lat = point.latency if point is not None else None
    tpot = _p50(lat.tpot_ms) if lat is not None else None
    if not speculative_run:
        return (
            NO_LATENCY
            if lat is None
            else {"ttft_p50_ms": _p50(lat.ttft_ms), "tpot_p50_ms": tpot, "latency_speedup": 1.0}
        )
    if tpot is None or point.latency_speedup is None:
        return NO_LATENCY
    return {"ttft_p50_ms": None, "tpot_p50_ms": tpot * point.latency_speedup, "latency_speedup": 1.0}


def identity_columns(run: RunView) -> dict[str, Any]:
    """The provenance columns of a run's rows (speclens/file_formats/ranking_file.py), as every
    table carries them: never null, `unknown` where the record does not say (the setting is the
    row's own column)."""
    return {name: value for name, value in run.provenance.columns().items() if name != "setting"}


def _facts(drafter: str) -> tuple[str, str]:
    facts = facts_of(drafter)
    return (facts.serve_memory, facts.training_cost) if facts else ("?", "?")


def _row(run: RunView, point: OperatingPoint, domain: str, figures: DomainPoint, measured: bool) -> dict[str, Any]:
    s = run.summary
    lo, hi = figures.predicted_speedup_range or (None, None)
    measured_speedup = point.speedup if measured else None
    predicted = figures.predicted_speedup
    origin = run.provenance.source
    # a prediction from figures that were not measured says from what
    of = "" if origin == MEASURED else f" from {origin}"
    if measured_speedup is not None:
        speedup, source = measured_speedup, origin
    elif figures.predicted_corrected is not None:
        speedup, source = figures.predicted_corrected, f"predicted (corrected){of}"
    else:
        speedup, source = predicted, f"predicted{of}"
    t_step, t_draft = median_ms(point.t_step), point.t_draft_ms
    serve_memory, training_cost = _facts(s.drafter)
    tokens_per_s = point.output_tokens_per_s if measured else None
    return identity_columns(run) | {
        "domain": domain,
        "batch_size": point.held,
        "drafter": s.mechanism,
        "d": s.d,
        "speedup": speedup,
        "speedup_source": source,
        "measured_speedup": measured_speedup,
        "predicted_speedup": predicted,
        "predicted_lo": lo,
        "predicted_hi": hi,
        "speedup_gap": costs.speedup_gap(predicted, measured_speedup),
        "gap_above_tolerance": costs.gap_above_tolerance(predicted, measured_speedup),
        "al": figures.al,
        "tokens_per_step": figures.tokens_per_step,
        "t_verif_ms": median_ms(point.t_verif),
        "t_verif_spec_ms": median_ms(point.t_verif_spec),
        "t_draft_ms": t_draft,
        "t_step_ms": t_step,
        "draft_overhead": t_draft / t_step if t_draft is not None and t_step else None,
        "output_tokens_per_s": tokens_per_s,
        "tokens_per_s_per_request": tokens_per_s / point.held if tokens_per_s is not None else None,
        "serve_memory": serve_memory,
        "training_cost": training_cost,
        "run": str(run.path),
        "temperature": run.temperature,
        "chat_template_kwargs": run.template,
        "setting": run.setting,
        **_latency(point if measured else None),
        "speedup_lo": (point.speedup_range or [None, None])[0] if measured else None,
        "speedup_hi": (point.speedup_range or [None, None])[1] if measured else None,
        "predicted_corrected": figures.predicted_corrected,
        "predicted_corrected_lo": (figures.predicted_corrected_range or [None, None])[0],
        "predicted_corrected_hi": (figures.predicted_corrected_range or [None, None])[1],
    }


def _plain_row(run: RunView, point: OperatingPoint, domain: str) -> dict[str, Any]:
    """Plain decoding at this operating point: speedup 1 by definition."""
    tokens_per_s = point.baseline_output_tokens_per_s if run.summary.d is not None else point.output_tokens_per_s
    memory, training = _facts("none")
    return identity_columns(run) | {
        "domain": domain,
        "batch_size": point.held,
        "drafter": "none",
        "d": None,
        "speedup": 1.0,
        "speedup_source": run.provenance.source,
        "measured_speedup": 1.0,
        "predicted_speedup": None,
        "predicted_lo": None,
        "predicted_hi": None,
        "speedup_gap": None,
        "gap_above_tolerance": False,
        "al": None,
        "tokens_per_step": 1.0,
        "t_verif_ms": median_ms(point.t_verif),
        "t_verif_spec_ms": None,
        "t_draft_ms": None,
        "t_step_ms": median_ms(point.t_verif),
        "draft_overhead": None,
        "output_tokens_per_s": tokens_per_s,
        "tokens_per_s_per_request": tokens_per_s / point.held if tokens_per_s else None,
        "serve_memory": memory,
        "training_cost": training,
        "run": str(run.path),
        **_plain_latency(point if domain == "all" or len(point.by_domain) == 1 else None, run.summary.d is not None),
        "speedup_lo": 1.0,
        "speedup_hi": 1.0,
        "temperature": run.temperature,
        "chat_template_kwargs": run.template,
        "setting": run.setting,
    }


def missing_baselines(runs: list[RunView]) -> list[str]:
    """Each speculative operating point without the baseline timings a ranking needs."""
    missing = []
    for run in runs:
        s = run.summary
        if s.d is None:
            continue
        for point in s.operating_points:
            lacks = [
                name
                for name, value in (
                    ("plain-decoding throughput", point.baseline_output_tokens_per_s),
                    ("T_verif(B)", point.t_verif),
                )
                if value is None
            ]
            if lacks:
                missing.append(
                    f"{run.path} (drafter={s.drafter} d={s.d}) at batch size "
                    f"{point.batch_size}: no {' and no '.join(lacks)}"
                )
        if not s.operating_points:
            missing.append(
                f"{run.path} (drafter={s.drafter} d={s.d}): no operating points (measured "
                "by a speclens before batch sizes were recorded)"
            )
    return missing


def held_points(points: list[OperatingPoint]) -> list[OperatingPoint]:
    """One operating point per number of requests held in flight: where two batch sizes asked held
    the same (a length pass of fewer prompts than either), they measured one operating point twice;
    the first (the smaller B asked) stands for it."""
    seen: dict[int, OperatingPoint] = {}
    for point in points:
        seen.setdefault(point.held, point)
    return list(seen.values())


def one_length(point: OperatingPoint, domain: str, group: DomainPoint) -> LengthPoint | None:
    """The length bucket that holds exactly this domain's prompts (a `<tier>@<length>` domain): the
    pass ran that length on its own, so its own steps measured the domain's speedup, at the
    requests that length held (serve.json's domain and per-length winners then agree)."""
    if "@" not in domain:
        return None
    found = (point.by_length or {}).get(domain.rpartition("@")[2])
    return found if found is not None and found.n_requests == group.n_requests else None


def _length_figures(run: RunView, point: OperatingPoint, length: LengthPoint) -> dict[str, Any]:
    """A one-length domain's speedup, step costs and throughput: its length's own (one_length)."""
    speedup, source = _length_speedup(run, length)
    t_step, t_draft, rate = median_ms(length.t_step), length.t_draft_ms, length.output_tokens_per_s
    held = length.batch_size_held or point.held
    return {
        "batch_size": held,
        "speedup": speedup,
        "speedup_source": source,
        "measured_speedup": length.speedup,
        "speedup_gap": costs.speedup_gap(length.predicted_speedup, length.speedup),
        "gap_above_tolerance": costs.gap_above_tolerance(length.predicted_speedup, length.speedup),
        "t_verif_ms": median_ms(length.t_verif),
        "t_verif_spec_ms": median_ms(length.t_verif_spec),
        "t_draft_ms": t_draft,
        "t_step_ms": t_step,
        "draft_overhead": t_draft / t_step if t_draft is not None and t_step else None,
        "output_tokens_per_s": rate,
        "tokens_per_s_per_request": rate / held if rate is not None else None,
        "speedup_lo": None,
        "speedup_hi": None,
    }


def _plain_length_figures(run: RunView, point: OperatingPoint, length: LengthPoint) -> dict[str, Any]:
    """Plain decoding over a one-length domain: its length's own step time and throughput."""
    held = length.batch_size_held or point.held
    rate = length.baseline_output_tokens_per_s if run.summary.d is not None else length.output_tokens_per_s
    return {
        "batch_size": held,
        "t_verif_ms": median_ms(length.t_verif),
        "t_step_ms": median_ms(length.t_verif),
        "output_tokens_per_s": rate,
        "tokens_per_s_per_request": rate / held if rate else None,
    }


def ranking_rows(runs: list[RunView]) -> pd.DataFrame:
    rows: list[dict[str, Any]] = []
    plain: dict[tuple[str, int], dict] = {}
    for run in runs:
        s = run.summary
        for point in held_points(s.operating_points):
            domains = sorted(point.by_domain)
            # A single-domain run measured that domain's speedup itself.
            groups = [("all", point, True)] + [(dom, point.by_domain[dom], len(domains) == 1) for dom in domains]
            for domain, group, measured in groups:
                length = one_length(point, domain, group)
                if s.d is not None:
                    row = _row(run, point, domain, group, measured)
                    rows.append(row if length is None else row | _length_figures(run, point, length))
                # Plain decoding's row: from a drafter=none run first, else from any baseline pass.
                own = _plain_row(run, point, domain)
                if length is not None:
                    own |= _plain_length_figures(run, point, length)
                key = (run.temperature, run.template, run.setting, domain, own["batch_size"])
                if own["t_verif_ms"] is not None and (key not in plain or s.d is None):
                    plain[key] = own
    frame = pd.DataFrame(checked_rows(RankingRow, rows + list(plain.values()), RANKING_FILE), columns=RANK_COLUMNS)
    frame = frame.sort_values([*TABLE, "speedup"], ascending=[True] * len(TABLE) + [False], na_position="last")
    frame = frame.reset_index(drop=True)
    frame["rank"] = frame.groupby(TABLE)["speedup"].rank(method="min", ascending=False)
    frame["rank"] = frame["rank"].astype("Int64")
    frame["tie"] = False
    for _, group in frame.groupby(TABLE, sort=False):
        _mark_ties(frame, list(group.index))
    return frame


def _mark_ties(frame: pd.DataFrame, order: list[int]) -> None:
    """Within one (domain, B), in speedup order: an entry whose measured range overlaps the one
    ranked just above it shares that entry's rank, both marked as a tie."""
    for above, below in zip(order, order[1:]):
        lo_a, hi_a, lo_b, hi_b = (frame.at[i, k] for i in (above, below) for k in ("speedup_lo", "speedup_hi"))
        if any(pd.isna(v) for v in (lo_a, hi_a, lo_b, hi_b)) or pd.isna(frame.at[below, "speedup"]):
            continue
        if lo_b <= hi_a and lo_a <= hi_b:
            frame.at[below, "rank"] = frame.at[above, "rank"]
            frame.loc[[above, below], "tie"] = True


def check_unique(runs: list[RunView]) -> None:
    """One run per ranking entry (mechanism, D, mode, batch size)."""
    check_one_each(
        runs,
        lambda run: [
            (run.summary.mechanism, run.summary.d, run.temperature, point.held, run.template, run.setting)
            for point in held_points(run.summary.operating_points)
        ],
        lambda key: (
            f"drafter={key[0]} d={key[1]} at batch size {key[3]}"
            + (f" (temperature {key[2]:g})" if key[2] else "")
            + "".join(f" ({part})" for part in key[4:] if part)
        ),
        "rank each setting from its own dir.",
    )


def find_all_runs(dirs: list[Path], exclude: Collection[Path] = ()) -> list[RunView]:
    """Every finished run under `dirs` (but for `exclude`), each once (a sweep and one of its runs
    name it twice)."""
    unique: dict[Path, RunView] = {}
    for root in dirs:
        for run in find_runs(root, exclude):
            unique.setdefault(run.path.resolve(), run)
    found = shown_identity(list(unique.values()))
    runs = measured_runs(found)  # a synthetic acceptance ranks no mechanism
    if not runs:
        synthetic = " (only runs at synthetic acceptance, which rank no mechanism)" if found else ""
        raise SpeclensError(f"no finished runs (summary.json) under {', '.join(map(str, dirs))}{synthetic}.")
    return runs


def rank(dirs: list[Path]) -> pd.DataFrame:
    return rank_runs(find_all_runs(dirs))


def rank_runs(runs: list[RunView]) -> pd.DataFrame:
    """The ranking of these runs; refused when they disagree on settings or lack baseline timings."""
    if not runs:
        raise SpeclensError("no runs with measured acceptance to rank (a synthetic acceptance ranks no mechanism)")
    check_consistent(runs, CONSISTENT_ACROSS_TEMPERATURES)
    check_unique(runs)
    missing = missing_baselines(runs)
    if missing:
        raise SpeclensError(
            "cannot rank without plain-decoding timings at every operating point; missing: "
            + "; ".join(missing)
            + ". Re-run those with baseline=true (and the same batch_sizes)."
        )
    return ranking_rows(runs)


# -- per length bucket ---------------------------------------------------------------------------

# One table of the per-length ranking: entries in the same mode, length bucket and batch size.
LENGTH_TABLE = ["temperature", "chat_template_kwargs", "setting", "input_tokens", "batch_size"]


def extension_at(run: RunView, input_tokens: int | None) -> str | None:
    """The context extension a length's figures were measured under: the run's, at every length
    (the extension rescales every position's rotary embedding, within the native window too);
    None without one."""
    window = run.summary.context_window
    if window is None or not window.extended or input_tokens is None:
        return None
    return window.extension


def _length_speedup(run: RunView, figures: LengthPoint) -> tuple[float | None, str]:
    """The length's measured speedup where its passes measured one, else its prediction."""
    origin = run.provenance.source
    of = "" if origin == MEASURED else f" from {origin}"
    if figures.speedup is not None:
        return figures.speedup, origin
    if figures.predicted_corrected is not None:
        return figures.predicted_corrected, f"predicted (corrected){of}"
    return figures.predicted_speedup, f"predicted{of}"


def _length_common(run: RunView, label: str, batch_size: int, figures: LengthPoint) -> dict[str, Any]:
    return identity_columns(run) | {
        "length": label,
        "input_tokens": figures.input_tokens,
        # the requests this length's pass held in flight
        "batch_size": figures.batch_size_held or batch_size,
        "t_verif_ms": median_ms(figures.t_verif),
        "context_extension": extension_at(run, figures.input_tokens),
        "run": str(run.path),
        "temperature": run.temperature,
        "chat_template_kwargs": run.template,
        "setting": run.setting,
    }


def _length_row(run: RunView, batch_size: int, label: str, figures: LengthPoint) -> dict[str, Any]:
    speedup, source = _length_speedup(run, figures)
    lo, hi = figures.al_ci95 or (None, None)
    return _length_common(run, label, batch_size, figures) | {
        "drafter": run.summary.mechanism,
        "d": run.summary.d,
        "speedup": speedup,
        "speedup_source": source,
        "measured_speedup": figures.speedup,
        "predicted_speedup": figures.predicted_speedup,
        "al": figures.al,
        "al_ci95_lo": lo,
        "al_ci95_hi": hi,
        "tokens_per_step": figures.tokens_per_step,
        "t_verif_spec_ms": median_ms(figures.t_verif_spec),
        "t_draft_ms": figures.t_draft_ms,
        "t_step_ms": median_ms(figures.t_step),
        "output_tokens_per_s": figures.output_tokens_per_s,
    }


def _plain_length_row(run: RunView, batch_size: int, label: str, figures: LengthPoint) -> dict[str, Any]:
    """Plain decoding at this length and batch size: speedup 1 by definition."""
    speculative = run.summary.d is not None
    return _length_common(run, label, batch_size, figures) | {
        "drafter": "none",
        "d": None,
        "speedup": 1.0,
        "speedup_source": run.provenance.source,
        "measured_speedup": 1.0,
        "tokens_per_step": 1.0,
        "t_step_ms": median_ms(figures.t_verif),
        "output_tokens_per_s": figures.baseline_output_tokens_per_s if speculative else figures.output_tokens_per_s,
    }


def has_lengths(runs: list[RunView]) -> bool:
    """Whether any run measured length buckets at its operating points."""
    return any(point.by_length for run in runs for point in run.summary.operating_points)


def length_ranking_rows(runs: list[RunView]) -> pd.DataFrame:
    """Per (mode, length bucket, B): the mechanisms ranked by that length's own speedup, plain
    decoding beside them (from a drafter=none run first, else from any baseline pass); empty
    where no run has length buckets."""
    rows: list[dict[str, Any]] = []
    plain: dict[tuple, dict[str, Any]] = {}
    for run in runs:
        s = run.summary
        for point in held_points(s.operating_points):
            for label, figures in (point.by_length or {}).items():
                if s.d is not None:
                    rows.append(_length_row(run, point.batch_size, label, figures))
                key = (
                    run.temperature,
                    run.template,
                    run.setting,
                    figures.input_tokens,
                    figures.batch_size_held or point.batch_size,
                )
                if figures.t_verif is not None and (key not in plain or s.d is None):
                    plain[key] = _plain_length_row(run, point.batch_size, label, figures)
    rows = checked_rows(LengthRankingRow, rows + list(plain.values()), LENGTH_RANKING_FILE)
    frame = pd.DataFrame(rows, columns=LENGTH_RANK_COLUMNS)
    if frame.empty:
        return frame
    order = [*LENGTH_TABLE, "speedup"]
    frame = frame.sort_values(order, ascending=[True] * len(LENGTH_TABLE) + [False], na_position="last")
    frame = frame.reset_index(drop=True)
    frame["rank"] = frame.groupby(LENGTH_TABLE)["speedup"].rank(method="min", ascending=False).astype("Int64")
    frame["tie"] = (frame.groupby([*LENGTH_TABLE, "speedup"])["speedup"].transform("size") > 1).fillna(False)
    return frame


def pareto_front(points: pd.DataFrame) -> pd.DataFrame:
    """Points no other point beats on both throughput and interactivity, by interactivity."""
    x, y = points.tokens_per_s_per_request.to_numpy(), points.output_tokens_per_s.to_numpy()
    keep = [not ((x >= x[i]) & (y >= y[i]) & ((x > x[i]) | (y > y[i]))).any() for i in range(len(points))]
    return points[keep].sort_values("tokens_per_s_per_request")
