"""`python -m reports.rank <runs or sweep dirs> [--out DIR]`: (mechanism, D) ranked per domain
and operating point by speedup over plain decoding (guideline 5).

Writes ranking.csv, ranking.md, serve.json (what to deploy: reports/serve.py) and pareto.png into
--out (default: the first dir given).
The speedup is the measured one (speculative output tokens/s over plain decoding at the same
batch size and prompts) where the run measured it, i.e. over all its prompts; per domain of a
mixed run it is predicted from the domain's tokens per step and the run's measured step costs
(evals/costs.py), and labelled so. Plain decoding (`none`, speedup 1 by definition) is ranked
beside the mechanisms: where it ranks first, speculation does not pay at that operating point.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Collection

import pandas as pd

from drafters.facts_table import facts_of
from reports import figures
from reports.runs import (
    CONSISTENT_ACROSS_TEMPERATURES,
    Run,
    check_consistent,
    check_one_each,
    find_runs,
)
from reports.serve import SERVE_FILE, serve_markdown, serve_plan
from reports.table import cell, markdown_table, median_ms, text_table
from speclens import costs
from speclens.errors import ArgumentParser, SpeclensError, guarded
from speclens.files import check_folder, write_json_atomic
from speclens.guidelines import Guidelines, low_latency_speedup
from speclens.summary import DomainPoint, OperatingPoint

RANK_COLUMNS = [
    "domain", "batch_size", "drafter", "d", "rank", "speedup", "speedup_source", "measured_speedup",
    "predicted_speedup", "predicted_lo", "predicted_hi", "speedup_gap", "gap_above_tolerance", "al",
    "tokens_per_step", "t_verif_ms", "t_verif_spec_ms", "t_draft_ms", "t_step_ms", "draft_overhead",
    "output_tokens_per_s", "tokens_per_s_per_request", "serve_memory", "training_cost", "run",
    # Latency at the operating point (all prompts; runs that measured it): p50 in ms, and plain
    # decoding's p50 TPOT over this entry's.
    "ttft_p50_ms", "tpot_p50_ms", "latency_speedup",
    # The prediction times the corrections its operating point measured (speclens/account.py), and range.
    "predicted_corrected", "predicted_corrected_lo", "predicted_corrected_hi",
    # With repeats: the measured speedup's range over them; entries whose ranges overlap share a rank.
    "speedup_lo", "speedup_hi", "tie",
    # The sampling temperature and the chat template's variables (reports/runs.py Measured.template):
    # entries are ranked only against others in the same mode.
    "temperature", "chat_template_kwargs",
]
# One table of the ranking: entries in the same mode, domain and batch size.
TABLE = ["temperature", "chat_template_kwargs", "domain", "batch_size"]


def mode_label(temperature: float, template: str, ranking: pd.DataFrame) -> str:
    """`T=.., kwargs` naming an entry's mode, each part only where the ranking holds several."""
    parts = [f"T={temperature:g}"] if ranking["temperature"].nunique() > 1 else []
    parts += [template or "template defaults"] if ranking["chat_template_kwargs"].nunique() > 1 else []
    return ", ".join(parts)


def tables(ranking: pd.DataFrame):
    """(heading, rows) of each table of the ranking, the mode named only when there are several."""
    for (t, template, domain, b), group in ranking.groupby(TABLE, sort=True):
        mode = mode_label(t, template, ranking)
        yield (f"{mode}, " if mode else "") + f"{domain}, batch size {b}", group


def _p50(stat: Any) -> float | None:
    return None if stat is None else stat.p50


NO_LATENCY = {"ttft_p50_ms": None, "tpot_p50_ms": None, "latency_speedup": None}


def _latency(point: OperatingPoint | None) -> dict[str, Any]:
    """A measured entry's p50 TTFT and TPOT and its TPOT speedup (none for a domain's predicted row)."""
    lat = point.latency if point is not None else None
    if lat is None:
        return NO_LATENCY
    return {"ttft_p50_ms": _p50(lat.ttft_ms), "tpot_p50_ms": _p50(lat.tpot_ms), "latency_speedup": point.latency_speedup}


def _plain_latency(point: OperatingPoint | None, speculative_run: bool) -> dict[str, Any]:
    """Plain decoding's p50 TPOT: its own run's, or a speculative run's TPOT times its TPOT ratio
    (all such a run keeps of its baseline's latency)."""
    lat = point.latency if point is not None else None
    tpot = _p50(lat.tpot_ms) if lat is not None else None
    if not speculative_run:
        return NO_LATENCY if lat is None else {"ttft_p50_ms": _p50(lat.ttft_ms), "tpot_p50_ms": tpot, "latency_speedup": 1.0}
    if tpot is None or point.latency_speedup is None:
        return NO_LATENCY
    return {"ttft_p50_ms": None, "tpot_p50_ms": tpot * point.latency_speedup, "latency_speedup": 1.0}


def _facts(drafter: str) -> tuple[str, str]:
    facts = facts_of(drafter)
    return (facts.serve_memory, facts.training_cost) if facts else ("?", "?")


def _row(run: Run, point: OperatingPoint, domain: str, figures: DomainPoint, measured: bool) -> dict[str, Any]:
    s = run.summary
    lo, hi = figures.predicted_speedup_range or (None, None)
    measured_speedup = point.speedup if measured else None
    predicted = figures.predicted_speedup
    if measured_speedup is not None:
        speedup, source = measured_speedup, "measured"
    elif figures.predicted_corrected is not None:
        speedup, source = figures.predicted_corrected, "predicted (corrected)"
    else:
        speedup, source = predicted, "predicted"
    t_step, t_draft = median_ms(point.t_step), point.t_draft_ms
    serve_memory, training_cost = _facts(s.drafter)
    tokens_per_s = point.output_tokens_per_s if measured else None
    return {
        "domain": domain, "batch_size": point.batch_size, "drafter": s.mechanism, "d": s.d,
        "speedup": speedup, "speedup_source": source,
        "measured_speedup": measured_speedup, "predicted_speedup": predicted, "predicted_lo": lo,
        "predicted_hi": hi, "speedup_gap": costs.speedup_gap(predicted, measured_speedup),
        "gap_above_tolerance": costs.gap_above_tolerance(predicted, measured_speedup),
        "al": figures.al, "tokens_per_step": figures.tokens_per_step,
        "t_verif_ms": median_ms(point.t_verif), "t_verif_spec_ms": median_ms(point.t_verif_spec),
        "t_draft_ms": t_draft, "t_step_ms": t_step,
        "draft_overhead": t_draft / t_step if t_draft is not None and t_step else None,
        "output_tokens_per_s": tokens_per_s,
        "tokens_per_s_per_request": tokens_per_s / point.batch_size if tokens_per_s is not None else None,
        "serve_memory": serve_memory, "training_cost": training_cost, "run": str(run.path),
        "temperature": run.temperature, "chat_template_kwargs": run.template,
        **_latency(point if measured else None),
        "speedup_lo": (point.speedup_range or [None, None])[0] if measured else None,
        "speedup_hi": (point.speedup_range or [None, None])[1] if measured else None,
        "predicted_corrected": figures.predicted_corrected,
        "predicted_corrected_lo": (figures.predicted_corrected_range or [None, None])[0],
        "predicted_corrected_hi": (figures.predicted_corrected_range or [None, None])[1],
    }


def _plain_row(run: Run, point: OperatingPoint, domain: str) -> dict[str, Any]:
    """Plain decoding at this operating point: speedup 1 by definition."""
    tokens_per_s = point.baseline_output_tokens_per_s if run.summary.d is not None else point.output_tokens_per_s
    memory, training = _facts("none")
    return {
        "domain": domain, "batch_size": point.batch_size, "drafter": "none", "d": None, "speedup": 1.0,
        "speedup_source": "measured", "measured_speedup": 1.0, "predicted_speedup": None, "predicted_lo": None,
        "predicted_hi": None, "speedup_gap": None, "gap_above_tolerance": False, "al": None,
        "tokens_per_step": 1.0, "t_verif_ms": median_ms(point.t_verif), "t_verif_spec_ms": None, "t_draft_ms": None,
        "t_step_ms": median_ms(point.t_verif), "draft_overhead": None, "output_tokens_per_s": tokens_per_s,
        "tokens_per_s_per_request": tokens_per_s / point.batch_size if tokens_per_s else None,
        "serve_memory": memory, "training_cost": training, "run": str(run.path),
        **_plain_latency(point if domain == "all" or len(point.by_domain) == 1 else None, run.summary.d is not None),
        "speedup_lo": 1.0, "speedup_hi": 1.0, "temperature": run.temperature, "chat_template_kwargs": run.template,
    }


def missing_baselines(runs: list[Run]) -> list[str]:
    """Each speculative operating point without the baseline timings a ranking needs."""
    missing = []
    for run in runs:
        s = run.summary
        if s.d is None:
            continue
        for point in s.operating_points:
            lacks = [name for name, value in (("plain-decoding throughput", point.baseline_output_tokens_per_s),
                                              ("T_verif(B)", point.t_verif)) if value is None]
            if lacks:
                missing.append(f"{run.path} (drafter={s.drafter} d={s.d}) at batch size "
                               f"{point.batch_size}: no {' and no '.join(lacks)}")
        if not s.operating_points:
            missing.append(f"{run.path} (drafter={s.drafter} d={s.d}): no operating points (measured "
                           "by a speclens before batch sizes were recorded)")
    return missing


def ranking_rows(runs: list[Run]) -> pd.DataFrame:
    rows: list[dict[str, Any]] = []
    plain: dict[tuple[str, int], dict] = {}
    for run in runs:
        s = run.summary
        for point in s.operating_points:
            domains = sorted(point.by_domain)
            # A single-domain run measured that domain's speedup itself.
            groups = [("all", point, True)] + [(dom, point.by_domain[dom], len(domains) == 1) for dom in domains]
            for domain, group, measured in groups:
                if s.d is not None:
                    rows.append(_row(run, point, domain, group, measured))
                # Plain decoding's row: from a drafter=none run first, else from any baseline pass.
                key = (run.temperature, run.template, domain, point.batch_size)
                if point.t_verif is not None and (key not in plain or s.d is None):
                    plain[key] = _plain_row(run, point, domain)
    frame = pd.DataFrame(rows + list(plain.values()), columns=RANK_COLUMNS)
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


def check_unique(runs: list[Run]) -> None:
    """One run per ranking entry (mechanism, D, mode, batch size)."""
    check_one_each(runs, lambda run: [(run.summary.mechanism, run.summary.d, run.temperature, point.batch_size,
                                       run.template) for point in run.summary.operating_points],
                   lambda key: f"drafter={key[0]} d={key[1]} at batch size {key[3]}" + (f" (temperature {key[2]:g})" if key[2] else "")
                   + (f" ({key[4]})" if key[4] else ""),
                   "rank each setting from its own dir.")


def find_all_runs(dirs: list[Path], exclude: Collection[Path] = ()) -> list[Run]:
    """Every finished run under `dirs` (but for `exclude`), each once (a sweep and one of its runs
    name it twice)."""
    unique: dict[Path, Run] = {}
    for root in dirs:
        for run in find_runs(root, exclude):
            unique.setdefault(run.path.resolve(), run)
    runs = list(unique.values())
    if not runs:
        raise SpeclensError(f"no finished runs (summary.json) under {', '.join(map(str, dirs))}.")
    return runs


def rank(dirs: list[Path]) -> pd.DataFrame:
    return rank_runs(find_all_runs(dirs))


def rank_runs(runs: list[Run]) -> pd.DataFrame:
    """The ranking of these runs; refused when they disagree on settings or lack baseline timings."""
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


# -- guidelines beside the measured best D ---------------------------------------------------


def guideline_notes(runs: list[Run], ranking: pd.DataFrame) -> list[str]:
    """Guidelines 2-4 for the runs' target (and drafts), set against the measured best D."""
    target_dir = next((r.stamp.get("target_dir") for r in runs if r.stamp.get("target_dir")), None)
    config_file = Path(target_dir) / "config.json" if target_dir else None
    if config_file is None or not config_file.is_file():
        return [f"guidelines: the target's config.json ({config_file}) is not on this machine; not computed."]
    target_config = json.loads(config_file.read_text())
    base = Guidelines.for_configs(target_config)
    notes = base.lines()[:3]
    overall = ranking[(ranking.domain == "all") & ranking.d.notna() & ranking.speedup.notna()]
    for (drafter, b), group in overall.groupby(["drafter", "batch_size"], sort=True):
        best = group.loc[group.speedup.idxmax()]
        measured_ds = sorted(int(d) for d in group.d)
        best_d = int(best.d)
        advice = {base.starting_d} | set(base.tile_aligned)
        verdict = "agrees" if best_d in advice else "disagrees"
        untried = base.starting_d not in measured_ds
        notes.append(
            f"{drafter} at B={b}: measured best D={best_d} (x{best.speedup:.2f}, of D in {measured_ds}); "
            f"guideline 2 suggests D={base.starting_d}, guideline 3 D in {base.tile_aligned[:4]} — {verdict}"
            + (f" (D={base.starting_d} was not measured)" if untried and verdict == "disagrees" else "")
        )
    for run in runs:
        draft = (run.stamp.get("config", {}).get("drafter") or {}).get("model")
        draft_file = Path(draft) / "config.json" if draft else None
        if draft_file is None or not draft_file.is_file() or run.summary.d is None:
            continue
        g4 = Guidelines.for_configs(target_config, json.loads(draft_file.read_text()))
        s = run.summary
        for point in s.operating_points:
            if point.al is None:
                continue
            predicted = low_latency_speedup(point.al, g4.rho, s.d)
            measured = point.speedup
            notes.append(
                f"guideline 4, {s.drafter} d={s.d} B={point.batch_size}: rho={g4.rho:.3f}, AL={point.al:.2f} "
                f"gives AL/(1+rho*D) = x{predicted:.2f}; measured " + (f"x{measured:.2f}" if measured else "-")
                + (f" — they disagree by more than {costs.GAP_TOLERANCE:.0%} (the rule assumes verification costs "
                   "one plain step)" if costs.gap_above_tolerance(predicted, measured) else "")
            )
    return notes


# -- outputs -----------------------------------------------------------------------------------


DISPLAY = [("rank", "rank", 0), ("drafter", "drafter", 0), ("d", "D", 0), ("speedup", "speedup", 2),
           ("speedup_source", "source", 0), ("predicted_speedup", "predicted", 2), ("al", "AL", 2),
           ("tokens_per_step", "tokens/step", 2), ("t_verif_ms", "T_verif(B) ms", 1),
           ("t_verif_spec_ms", "T_verif(B(1+D)) ms", 1), ("t_draft_ms", "T_draft ms", 1),
           ("draft_overhead", "draft share", 2), ("serve_memory", "serve memory", 0),
           ("training_cost", "training", 0)]
# Shown where any entry measured latency (runs through a server, or any run since summary v4).
LATENCY_DISPLAY = [("tpot_p50_ms", "TPOT p50 ms", 1), ("latency_speedup", "TPOT speedup", 2)]


def display_columns(ranking: pd.DataFrame) -> list[tuple[str, str, int]]:
    return DISPLAY + (LATENCY_DISPLAY if ranking["tpot_p50_ms"].notna().any() else [])


def display_rows(group: pd.DataFrame, columns: list[tuple[str, str, int]] = DISPLAY) -> list[list[str]]:
    rows = []
    for _, r in group.iterrows():
        cells = []
        for key, _, digits in columns:
            value = r[key]
            if key == "rank" and r["tie"] is True:
                cells.append(f"{value}=")  # tied: its repeat range overlaps a neighbour's
                continue
            if key == "d":
                value = None if pd.isna(value) else int(value)
            cells.append(cell(value, digits))
        rows.append(cells)
    return rows


def _verdict(group: pd.DataFrame) -> str:
    ranked = group[group.speedup.notna()]
    if ranked.empty:
        return "nothing ranked"
    top = ranked.iloc[0]
    tied = ranked[(ranked["rank"] == top["rank"]) & ranked["tie"].astype(bool)]
    if len(tied) > 1:
        names = ", ".join("plain decoding" if r.drafter == "none" else f"{r.drafter} d={int(r.d)}" for r in tied.itertuples())
        return f"a tie between {names}: their speedups' ranges over the repeats overlap"
    if top.drafter == "none":
        return "plain decoding is fastest here: no mechanism measured pays at this operating point"
    return f"fastest: {top.drafter} d={int(top.d)} at x{top.speedup:.2f} ({top.speedup_source})"


def ranking_markdown(ranking: pd.DataFrame, notes: list[str]) -> str:
    out = ["# Ranking: speedup over plain decoding", "",
           "Measured where the run measured it (all of its prompts); predicted per domain from the domain's "
           "tokens per step and the run's measured step costs: speedup = T_verif(B)·tokens/step / "
           "(T_verif(B(1+D)) + T_draft(B,D)).", ""]
    if (ranking.speedup_source == "predicted (corrected)").any():
        out += ["Predicted (corrected): the domain's prediction times the corrections its operating point measured "
                "in the speedup account (prefill, ramp-up and tail, slow outliers, token yield; summary.json "
                "`speedup_account`), which do not depend on the domain.", ""]
    columns = display_columns(ranking)
    for heading, group in tables(ranking):
        out += [f"## {heading}", "", f"{_verdict(group)}.", "",
                markdown_table([label for _, label, _ in columns], display_rows(group, columns)), ""]
        flagged = group[group.gap_above_tolerance.astype(bool)]
        for _, r in flagged.iterrows():
            out.append(f"- {r.drafter} d={int(r.d)}: predicted x{r.predicted_speedup:.2f} vs measured "
                       f"x{r.measured_speedup:.2f}, a gap of {r.speedup_gap:+.0%} (above {costs.GAP_TOLERANCE:.0%}: the step-cost model "
                       "misses part of this run's time, e.g. prefill or a partly filled batch).")
        if len(flagged):
            out.append("")
    out += ["## Guidelines", ""] + [f"- {n}" for n in notes]
    return "\n".join(out) + "\n"


def terminal_table(ranking: pd.DataFrame) -> str:
    out = []
    columns = DISPLAY[:11] + display_columns(ranking)[len(DISPLAY):]
    for heading, group in tables(ranking):
        header = [label for _, label, _ in columns]
        rows = display_rows(group, columns)
        out += [f"{heading.replace('batch size ', 'B=')}: {_verdict(group)}", text_table(header, rows, left_columns=0), ""]
    return "\n".join(out)


def plot_pareto(ranking: pd.DataFrame) -> bytes:
    """The measured operating points (all prompts) with their Pareto front."""
    points = ranking[(ranking.domain == "all") & ranking.output_tokens_per_s.notna()].copy()
    points["label"] = [f"{r.drafter}" + ("" if pd.isna(r.d) else f" d={int(r.d)}")
                       + (f" {mode}" if (mode := mode_label(r.temperature, r.chat_template_kwargs, ranking)) else "")
                       for r in points.itertuples()]
    return figures.pareto(points, pareto_front(points))


def pareto_front(points: pd.DataFrame) -> pd.DataFrame:
    """Points no other point beats on both throughput and interactivity, by interactivity."""
    x, y = points.tokens_per_s_per_request.to_numpy(), points.output_tokens_per_s.to_numpy()
    keep = [not ((x >= x[i]) & (y >= y[i]) & ((x > x[i]) | (y > y[i]))).any() for i in range(len(points))]
    return points[keep].sort_values("tokens_per_s_per_request")


def write_ranking(dirs: list[Path], out_dir: Path | None = None, exclude: Collection[Path] = ()
                  ) -> tuple[pd.DataFrame, list[str]]:
    runs = find_all_runs(dirs, exclude)
    out_dir = out_dir or dirs[0]
    out_dir.mkdir(parents=True, exist_ok=True)
    ranking = rank_runs(runs)
    notes = guideline_notes(runs, ranking)
    ranking.to_csv(out_dir / "ranking.csv", index=False)
    plan = serve_plan(ranking, runs)
    write_json_atomic(plan, out_dir / SERVE_FILE)
    (out_dir / "ranking.md").write_text(ranking_markdown(ranking, notes) + "\n" + "\n".join(serve_markdown(plan)))
    (out_dir / "pareto.png").write_bytes(plot_pareto(ranking))
    return ranking, notes


@guarded
def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="python -m reports.rank", description=__doc__.splitlines()[0])
    parser.add_argument("dirs", type=Path, nargs="+", help="run dirs or sweep dirs")
    parser.add_argument("--out", type=Path, default=None, help="where to write (default: the first dir)")
    args = parser.parse_args(argv)
    if args.out is not None:
        check_folder(args.out, "--out")
    ranking, notes = write_ranking(args.dirs, args.out)
    print(terminal_table(ranking))
    print("\n".join(notes))
    print(f"ranking: {(args.out or args.dirs[0]) / 'ranking.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
