"""The ranking rendered and written (reports/speedup_ranking.py computes it): ranking.md and the
terminal's tables, the guidelines set against the measured best D, pareto.png, and write_rankings,
which `python -m reports.rank` (reports/rank.py) and the report and sweep commands call: ranking.csv,
ranking.md, serve.json (reports/serve.py), pareto.png, and for length buckets ranking_by_length.csv
and the (B, context) -> D table in the speculation_profile.json written beside them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Collection

import pandas as pd

from reports import png_plots
from reports.runs import RunView
from reports.serve import serve_markdown, serve_plan
from reports.speedup_ranking import (
    LENGTH_TABLE,
    find_all_runs,
    has_lengths,
    length_ranking_rows,
    mode_label,
    pareto_front,
    rank_runs,
    tables,
)
from reports.table import cell, markdown_table, text_table
from speclens import checkpoints
from speclens.config_guidelines import Guidelines, low_latency_speedup
from speclens.errors import ConfigError, CorruptRecord
from speclens.figures import costs
from speclens.file_formats.profile_file import read_profiles, write_profile_file
from speclens.file_formats.ranking_file import LENGTH_RANKING_FILE, RANKING_FILE
from speclens.file_formats.serve_file import context_table, write_serve_file
from speclens.text import markdown_safe


def guideline_notes(runs: list[RunView], ranking: pd.DataFrame) -> list[str]:
    """Guidelines 2-4 for the runs' target (and drafts), set against the measured best D."""
    target_dir = next((r.stamp.get("target_dir") for r in runs if r.stamp.get("target_dir")), None)
    config_file = Path(target_dir) / "config.json" if target_dir else None
    if config_file is None or not config_file.is_file():
        return [f"guidelines: the target's config.json ({config_file}) is not on this machine; not computed."]
    try:  # a damaged config.json costs the report its guidelines, not the report
        target_config = checkpoints.read_config(config_file.parent, "target.model")
        base = Guidelines.for_configs(target_config)
    except ConfigError as error:
        return [f"guidelines: not computed: {error}"]
    notes = base.lines()[:3]
    overall = ranking[(ranking.domain == "all") & ranking.d.notna() & ranking.speedup.notna()]
    if base.starting_d is None:  # G >= 128 (MLA): guidelines 2 and 3 name no D to set the best beside
        overall = overall.iloc[0:0]
    # the best D of one mode (temperature, template, setting): D is never pooled across settings
    by = ["drafter", "batch_size", "temperature", "chat_template_kwargs", "setting"]
    for (drafter, b, t, template, setting), group in overall.groupby(by, sort=True):
        best = group.loc[group.speedup.idxmax()]
        measured_ds = sorted(int(d) for d in group.d)
        best_d = int(best.d)
        advice = {base.starting_d} | set(base.tile_aligned)
        verdict = "agrees" if best_d in advice else "disagrees"
        untried = base.starting_d not in measured_ds
        mode = mode_label(t, template, setting, overall)
        notes.append(
            f"{drafter} at B={b}{f' ({mode})' if mode else ''}: measured best D={best_d} "
            f"(x{best.speedup:.2f} {best.speedup_source}, of D in {measured_ds}); "
            f"guideline 2 suggests D={base.starting_d}, guideline 3 D in {base.tile_aligned[:4]} — {verdict}"
            + (f" (D={base.starting_d} was not measured)" if untried and verdict == "disagrees" else "")
        )
    for run in runs:
        draft = (run.stamp.get("config", {}).get("drafter") or {}).get("model")
        draft_file = Path(draft) / "config.json" if draft else None
        if draft_file is None or not draft_file.is_file() or run.summary.d is None:
            continue
        try:
            g4 = Guidelines.for_configs(target_config, checkpoints.read_config(draft_file.parent, "drafter.model"))
        except ConfigError as error:
            notes.append(f"guideline 4, {run.summary.drafter}: not computed: {error}")
            continue
        s = run.summary
        for point in s.operating_points:
            if point.al is None:
                continue
            predicted = low_latency_speedup(point.al, g4.rho, s.d)
            measured = point.speedup
            notes.append(
                f"guideline 4, {s.drafter} d={s.d} B={point.batch_size}: rho={g4.rho:.3f}, AL={point.al:.2f} "
                f"gives AL/(1+rho*D) = x{predicted:.2f}; measured "
                + (f"x{measured:.2f}" if measured else "-")
                + (
                    f" — they disagree by more than {costs.GAP_TOLERANCE:.0%} (the rule assumes verification costs "
                    "one plain step)"
                    if costs.gap_above_tolerance(predicted, measured)
                    else ""
                )
            )
    return notes


# -- outputs -----------------------------------------------------------------------------------


DISPLAY = [
    ("rank", "rank", 0),
    ("drafter", "drafter", 0),
    ("d", "D", 0),
    ("speedup", "speedup", 2),
    ("speedup_source", "source", 0),
    ("predicted_speedup", "predicted", 2),
    ("al", "AL", 2),
    ("tokens_per_step", "tokens/step", 2),
    ("t_verif_ms", "T_verif(B) ms", 1),
    ("t_verif_spec_ms", "T_verif(B(1+D)) ms", 1),
    ("t_draft_ms", "T_draft ms", 1),
    ("draft_overhead", "draft share", 2),
    ("serve_memory", "serve memory", 0),
    ("training_cost", "training", 0),
]
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
        names = ", ".join(
            "plain decoding" if r.drafter == "none" else f"{r.drafter} d={int(r.d)}" for r in tied.itertuples()
        )
        return f"a tie between {names}: their speedups' ranges over the repeats overlap"
    if top.drafter == "none":
        return "plain decoding is fastest here: no mechanism measured pays at this operating point"
    return f"fastest: {top.drafter} d={int(top.d)} at x{top.speedup:.2f} ({top.speedup_source})"


def _markdown_section(level: str, heading: str, group: pd.DataFrame, columns: list[tuple[str, str, int]]) -> list[str]:
    """One (domain or length, B) table: its heading, its verdict, its rows."""
    return [
        f"{level} {markdown_safe(heading)}",
        "",
        f"{_verdict(group)}.",
        "",
        markdown_table([label for _, label, _ in columns], display_rows(group, columns)),
        "",
    ]


def ranking_markdown(ranking: pd.DataFrame, notes: list[str]) -> str:
    out = [
        "# Ranking: speedup over plain decoding",
        "",
        "Measured where the run measured it (all of its prompts); predicted per domain from the domain's "
        "tokens per step and the run's measured step costs: speedup = T_verif(B)·tokens/step / "
        "(T_verif(B(1+D)) + T_draft(B,D)).",
        "",
    ]
    if (ranking.speedup_source == "predicted (corrected)").any():
        out += [
            "Predicted (corrected): the domain's prediction times the corrections its operating point measured "
            "in the speedup account (prefill, ramp-up and tail, slow outliers, token yield; summary.json "
            "`speedup_account`), which do not depend on the domain.",
            "",
        ]
    columns = display_columns(ranking)
    for heading, group in tables(ranking):
        out += _markdown_section("##", heading, group, columns)
        flagged = group[group.gap_above_tolerance.astype(bool)]
        for _, r in flagged.iterrows():
            out.append(
                f"- {r.drafter} d={int(r.d)}: predicted x{r.predicted_speedup:.2f} vs measured "
                f"x{r.measured_speedup:.2f}, a gap of {r.speedup_gap:+.0%} (above {costs.GAP_TOLERANCE:.0%}: the step-cost model "
                "misses part of this run's time, e.g. prefill or a partly filled batch)."
            )
        if len(flagged):
            out.append("")
    out += ["## Guidelines", ""] + [f"- {n}" for n in notes]
    return "\n".join(out) + "\n"


def terminal_table(ranking: pd.DataFrame) -> str:
    out = []
    columns = DISPLAY[:11] + display_columns(ranking)[len(DISPLAY) :]
    for heading, group in tables(ranking):
        out += _terminal_section(heading, group, columns)
    return "\n".join(out)


def _terminal_section(heading: str, group: pd.DataFrame, columns: list[tuple[str, str, int]]) -> list[str]:
    return [
        f"{heading.replace('batch size ', 'B=')}: {_verdict(group)}",
        text_table([label for _, label, _ in columns], display_rows(group, columns), left_columns=0),
        "",
    ]


# -- per length bucket ---------------------------------------------------------------------------

LENGTH_DISPLAY = [
    ("rank", "rank", 0),
    ("drafter", "drafter", 0),
    ("d", "D", 0),
    ("speedup", "speedup", 2),
    ("speedup_source", "source", 0),
    ("al", "AL", 2),
    ("tokens_per_step", "tokens/step", 2),
    ("t_verif_ms", "T_verif(B) ms", 1),
    ("t_verif_spec_ms", "T_verif(B(1+D)) ms", 1),
    ("t_draft_ms", "T_draft ms", 1),
    ("output_tokens_per_s", "output tok/s", 1),
]


def length_tables(lengths: pd.DataFrame):
    """(heading, rows) of each table of the per-length ranking, the mode named only where there
    are several, a length past the target's own window marked with its extension."""
    for (t, template, setting, _, b), group in lengths.groupby(LENGTH_TABLE, sort=True):
        mode = mode_label(t, template, setting, lengths)
        extension = next((e for e in group.context_extension if isinstance(e, str)), None)
        label = group.length.iloc[0] + (f" (measured under the context extension {extension})" if extension else "")
        yield (f"{mode}, " if mode else "") + f"length {label}, batch size {b}", group


def length_markdown(lengths: pd.DataFrame) -> str:
    out = [
        "## By context length",
        "",
        "Each length bucket ranked from its own figures: a pass runs one length at a time, so its AL, "
        "tokens per step, throughput and step costs are that length's; the speedup is measured where the "
        "run had a baseline, else predicted from the length's tokens per step and step costs.",
        "",
    ]
    for heading, group in length_tables(lengths):
        out += _markdown_section("###", heading, group, LENGTH_DISPLAY)
    return "\n".join(out) + "\n"


def length_terminal_table(lengths: pd.DataFrame) -> str:
    out = []
    for heading, group in length_tables(lengths):
        out += _terminal_section(heading, group, LENGTH_DISPLAY)
    return "\n".join(out)


def profiles_with_table(runs: list[RunView], out_dir: Path, plan: dict) -> None:
    """speculation_profile.json in `out_dir` from the runs' own profiles, with the (B, context) -> D
    table of `plan`, the serve.json just written there (a job whose file is unreadable is left out,
    as a sweep's gathering leaves it out and names it)."""
    profiles = []
    for run in runs:
        try:
            profiles += read_profiles(run.path)
        except CorruptRecord:
            continue
    write_profile_file(profiles, out_dir, context_table(plan))


def plot_pareto(ranking: pd.DataFrame) -> bytes:
    """The measured operating points (all prompts) with their Pareto front."""
    points = ranking[(ranking.domain == "all") & ranking.output_tokens_per_s.notna()].copy()
    points["label"] = [
        f"{r.drafter}"
        + ("" if pd.isna(r.d) else f" d={int(r.d)}")
        + (f" {mode}" if (mode := mode_label(r.temperature, r.chat_template_kwargs, r.setting, ranking)) else "")
        for r in points.itertuples()
    ]
    return png_plots.pareto(points, pareto_front(points))


def write_ranking(
    dirs: list[Path], out_dir: Path | None = None, exclude: Collection[Path] = ()
) -> tuple[pd.DataFrame, list[str]]:
    ranking, _, notes = write_rankings(dirs, out_dir, exclude)
    return ranking, notes


def write_rankings(
    dirs: list[Path], out_dir: Path | None = None, exclude: Collection[Path] = ()
) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """The ranking's files; the ranking, the per-length ranking (empty without lengths) and notes."""
    runs = find_all_runs(dirs, exclude)
    out_dir = out_dir or dirs[0]
    out_dir.mkdir(parents=True, exist_ok=True)
    ranking = rank_runs(runs)
    notes = guideline_notes(runs, ranking)
    ranking.to_csv(out_dir / RANKING_FILE, index=False)
    lengths = length_ranking_rows(runs) if has_lengths(runs) else pd.DataFrame()
    plan = serve_plan(ranking, runs, lengths)
    write_serve_file(plan, out_dir)
    markdown = ranking_markdown(ranking, notes)
    if lengths.empty:
        (out_dir / LENGTH_RANKING_FILE).unlink(missing_ok=True)
    else:
        lengths.to_csv(out_dir / LENGTH_RANKING_FILE, index=False)
        markdown += "\n" + length_markdown(lengths)
        profiles_with_table(runs, out_dir, plan)
    (out_dir / "ranking.md").write_text(markdown + "\n" + "\n".join(serve_markdown(plan)))
    (out_dir / "pareto.png").write_bytes(plot_pareto(ranking))
    return ranking, lengths, notes
