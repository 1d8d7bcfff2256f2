"""`python -m reports.build <run or sweep dir>`: report.html (self-contained, interactive) and report.md.

The report opens with the answer: what to serve (the winner per domain and batch size, its
speedup and range, ties said as ties, the exact --speculative-config and the schedule) where the
runs can be ranked; otherwise the headline AL per drafter and D with its CI and the one command
that would make them rankable. Then the evidence, in the order a reader checks it: AL per domain
(or against D), each changed setting (an FP8 KV cache, block verification, a quantized draft) paired with
the defaults, the ranking with the speedup model's check and account, throughput against
interactivity, acceptance detail (per position, histogram, by context position), AL by context
length where the prompts state their lengths (lengths past the target's own window marked with the
context extension they were measured under), thinking vs answer and agent turns where measured, the
runs, the drafters' facts and the run stamp. Each chart is chosen from its data (reports/plotly_charts.py);
the markdown twin has the same text and tables and static PNGs (reports/png_plots.py) beside it.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pandas as pd

from drafters.facts_table import HEADER as DRAFTER_HEADER
from drafters.facts_table import comparison_rows
from reports import plotly_charts, png_plots
from reports.curves import WHOLE_OUTPUT, collect, is_length_group, safe_name
from reports.gpu_prediction import gpu_section
from reports.load_report import ladder_sections
from reports.page import Section, render_page
from reports.ranking_tables import display_columns, display_rows, guideline_notes
from reports.runs import (
    CONSISTENT_ACROSS_TEMPERATURES,
    RunView,
    check_consistent,
    find_runs,
    measured_runs,
    template_label,
)
from reports.serve import mode_label, serve_markdown, serve_plan
from reports.settings import settings_section
from reports.speedup_ranking import pareto_front, rank_runs, tables
from reports.table import cell, markdown_table
from speclens.errors import ArgumentParser, SpeclensError, guarded
from speclens.figures.account import CORRECTIONS, MODEL
from speclens.figures.summary import WHOLE_RUN_GROUP
from speclens.file_formats.drafter_build import describe_build
from speclens.file_formats.load_file import LOAD_FILE
from speclens.file_formats.serve_file import headline_plans, mode_plans
from speclens.gpu_model.gpus import GPUS, gpu_named
from speclens.gpu_model.serving_engines import DEFAULT_ENGINE, ENGINES, engine_named
from speclens.gpu_model.step_cost import Hardware
from speclens.provenance import SYNTHETIC
from speclens.text import Shown, markdown_safe

# -- the answer -----------------------------------------------------------------------------------


def decision_section(root: Path, runs: list[RunView], ranking: pd.DataFrame | SpeclensError) -> Section:
    """What to serve, where the runs can be ranked; else the headline AL and how to rank them."""
    if isinstance(ranking, SpeclensError):
        return headline_section(root, runs, ranking)
    plan = serve_plan(ranking, runs)
    section = Section("What to serve", text=[line for line in serve_markdown(plan)[1:] if line])
    plans, left_out = headline_plans(plan)
    several = len(mode_plans(plan)) > 1
    answers = []
    for one in plans:
        # Several modes (temperatures, chat_template_kwargs, settings): each plan's rows and configs say theirs.
        mode = mode_label(one) if several else ""
        rows = []
        for w in one["winners"]:
            in_mode = (
                (ranking.temperature == one["temperature"])
                & (ranking.chat_template_kwargs == template_label(one.get("chat_template_kwargs") or {}))
                & (ranking.setting == (one.get("setting") or ""))
            )
            entry = _ranked_entry(ranking[in_mode], w)
            speedup = f"x{w['speedup']:.2f}" + (" (tie)" if entry is not None and bool(entry.tie) else "")
            spread = (
                "-"
                if entry is None or pd.isna(entry.speedup_lo)
                else f"[{entry.speedup_lo:.2f}, {entry.speedup_hi:.2f}]"
            )
            serve = "plain decoding" if w["drafter"] == "none" else f"{w['drafter']} d={w['d']}"
            config = (
                "-" if w["speculative_config"] is None else json.dumps(w["speculative_config"], separators=(", ", ": "))
            )
            rows.append([w["domain"], str(w["batch_size"]), serve, speedup, spread, w["speedup_source"], config])
            if w["domain"] == "all":
                answers.append(
                    f"{serve} at B={w['batch_size']}{' ' + mode if mode else ''} ({speedup}, {w['speedup_source']})"
                )
        header = ["domain", "B", "serve", "speedup", "range over repeats", "source", "--speculative-config"]
        if all(row[4] == "-" for row in rows):  # no repeats: no ranges to show
            header, rows = header[:4] + header[5:], [row[:4] + row[5:] for row in rows]
        if mode:
            header, rows = ["mode", *header], [[mode, *row] for row in rows]
        section.tables.append((header, rows))
        for drafter, config in one["schedule_configs"].items():
            if config is not None:
                section.code.append(
                    f"# {drafter}{' ' + mode if mode else ''}: its schedule over batch sizes\n"
                    f"--speculative-config '{json.dumps(config)}'"
                )
    section.answer = "Serve " + "; ".join(answers) + "." if answers else None
    # the plan's own explanation (and what it leaves out); its lines are the table and code above
    section.text = section.text[: 2 if left_out else 1]
    return section


def _ranked_entry(ranking: pd.DataFrame, winner: dict) -> pd.Series | None:
    """The ranking's row of a winner (for its tie mark and its range over repeats)."""
    drafter = winner["drafter"]
    mask = (
        (ranking.domain == winner["domain"])
        & (ranking.batch_size == winner["batch_size"])
        & (ranking.drafter == drafter)
    )
    if winner["d"] is not None:
        mask &= ranking.d == winner["d"]
    rows = ranking[mask]
    return None if rows.empty else rows.iloc[0]


# Overrides a rank command sets itself (the drafters and Ds it lists, the baseline it adds).
SET_BY_RANK_COMMAND = ("drafter=", "d=", "baseline=")


def rank_commands(root: Path, runs: list[RunView]) -> list[str]:
    """The commands that measure these runs again with what ranking needs: one per set of other
    overrides the runs were measured with (stamp.json `overrides`), each repeating them. One run is
    measured again in place (its own dir, force=true); a sweep into a new sweep dir beside it
    (rank_dir), since baseline=true names other job dirs than the sweep's own: mixed into the old
    dir, each run would be there twice."""
    spec = [r for r in runs if r.summary.d is not None]
    groups: dict[tuple[str, ...], list[RunView]] = {}
    for run in spec or runs:
        kept = tuple(o for o in run.stamp.get("overrides") or [] if not o.startswith(SET_BY_RANK_COMMAND))
        groups.setdefault(kept, []).append(run)
    sweep = len(runs) > 1
    commands = []
    for kept, members in sorted(groups.items()):
        drafters = sorted({r.summary.drafter for r in members if r.summary.d is not None}) or ["ngram"]
        ds = sorted({r.summary.d for r in members if r.summary.d is not None}) or [3]
        given = {o.split("=", 1)[0] for o in kept}
        datasets = [] if "dataset" in given else [f"dataset={','.join(sorted({r.summary.dataset for r in members}))}"]
        commands.append(
            " ".join(
                [
                    "python -m evals.run",
                    *(["-m"] if sweep else []),
                    f"drafter={','.join(drafters)}",
                    f"d={','.join(map(str, ds))}",
                    *datasets,
                    *kept,
                    "baseline=true force=true",
                    f"hydra.sweep.dir={rank_dir(root)}" if sweep else f"hydra.run.dir={members[0].path}",
                ]
            )
        )
    return commands


def rank_dir(root: Path) -> Path:
    """Where a sweep's rank command measures: a new sweep dir beside it."""
    return root.with_name(root.name + "-ranked")


def headline_runs(runs: list[RunView]) -> tuple[list[RunView], str]:
    """The runs a headline AL may name, and what their figures are: the measured ones; where there
    are none, the fake (scripted) ones, said so. Synthetic acceptance (set, not measured) never."""
    spec = [r for r in runs if r.summary.d is not None and r.provenance.source != SYNTHETIC]
    measured = [r for r in spec if r.provenance.measured]
    if measured or not spec:
        return measured, ""
    sources = sorted({r.provenance.source for r in spec})
    return spec, f" ({', '.join(sources)}, not measured)"


def headline_section(root: Path, runs: list[RunView], reason: SpeclensError) -> Section:
    spec = [r for r in runs if r.summary.d is not None]
    rows = [
        [
            r.summary.mechanism + (f" ({r.setting})" if r.setting else ""),
            str(r.summary.d),
            cell(r.summary.al, al_digits(r.summary.al_ci95)),
            _ci_cell(r.summary.al_ci95),
            cell(r.summary.tokens_per_step, 3),
            str(r.summary.n_requests),
            r.provenance.source,
        ]
        for r in sorted(spec, key=lambda r: (r.summary.drafter, r.summary.d, r.setting))
    ]
    candidates, what = headline_runs(runs)
    best = max(candidates, key=lambda r: r.summary.al or 0, default=None)
    if best is not None:
        answer = (
            f"Highest AL{what}: {best.label}, "
            f"{cell(best.summary.al, al_digits(best.summary.al_ci95))} {_ci_cell(best.summary.al_ci95)}."
        )
    elif spec:
        answer = "No measured AL: these runs' acceptance is synthetic (acceptance.synthetic: set, not measured)."
    else:
        answer = None
    section = Section(
        "Headline AL",
        answer=answer,
        text=[
            "Not ranked: speedups need plain decoding's timings at every operating point (baseline=true). "
            "Measure them with the same other keys as these runs"
            + (
                f" (into a new sweep dir, {rank_dir(root)}: these runs stay as they are; build its report there):"
                if len(runs) > 1
                else " (in the run's own dir, replacing it):"
            )
        ],
        code=rank_commands(root, runs),
        tables=[(["drafter", "D", "AL", "95% CI", "tokens/step", "requests", "source"], rows)],
    )
    if "missing:" not in str(reason):  # refused for another reason than missing baselines: say which
        section.text.append(f"Not ranked: {reason}")
    return section


def al_digits(ci: list[float] | None) -> int:
    """The decimals an AL's CI justifies: the last one of the order of the CI's half-width (1 to 4;
    3 without an interval)."""
    if not ci or ci[1] <= ci[0]:
        return 3
    return min(4, max(1, -math.floor(math.log10((ci[1] - ci[0]) / 2))))


# -- the evidence ---------------------------------------------------------------------------------

# report.md's AL-vs-D images, one per domain: the whole run and the domains with the most requests,
# up to this many in all (200 categories drew 200 PNGs); report.html's chart holds every domain.
MAX_DOMAIN_IMAGES = 12


def md_domains(whole: pd.DataFrame, runs: list[RunView]) -> list[str]:
    """The domains report.md draws an image for: `all` first, then by requests (most first), then by name."""
    requests: dict[str, int] = {}
    for run in runs:
        for domain, group in run.summary.by_domain.items():
            requests[domain] = max(requests.get(domain, 0), group.n_requests)
    domains = sorted(set(whole.domain), key=lambda d: (d != WHOLE_RUN_GROUP, -requests.get(d, 0), d))
    return domains[:MAX_DOMAIN_IMAGES]


def al_section(root: Path, runs: list[RunView]) -> Section:
    try:
        curves = collect(root)
    except SpeclensError as exc:
        return Section("AL per domain", text=[f"No curves: {exc}"])
    # each length's own group is drawn against length (length_section), not as one more domain
    curves = curves[~curves.domain.map(is_length_group)]
    whole = curves[curves.segment == WHOLE_OUTPUT]
    chart = plotly_charts.al_chart(curves, runs)
    several_d = isinstance(chart, plotly_charts.Chart) and chart.title == "AL vs D per domain"
    section = Section(
        "AL vs D per domain" if several_d else "AL per domain",
        text=["One line per drafter, 95% CI over requests; open markers: replayed or estimated."]
        if several_d
        else ["AL of each drafter and D per domain; whiskers: 95% CI over requests."],
        charts=[chart],
    )
    if several_d:
        drawn = md_domains(whole, runs)
        for domain in drawn:
            section.images.append((f"al_vs_d_{safe_name(domain)}", png_plots.al_vs_d(whole, domain)))
        left = whole.domain.nunique() - len(drawn)
        if left:
            section.text.append(
                f"report.md draws the whole run and the {len(drawn) - 1} domains with the most requests; the other "
                f"{left} are in report.html and curves.csv."
            )
    elif isinstance(chart, plotly_charts.Chart):
        section.images.append(("al_by_domain", png_plots.al_by_domain(whole)))
    rows = [
        [
            r.drafter + (f" ({r.setting})" if r.setting else ""),
            str(r.d),
            r.domain,
            cell(r.al, 3),
            cell(r.al_ci95_lo, 3),
            cell(r.al_ci95_hi, 3),
            cell(r.tokens_per_step, 3),
            r.source,
        ]
        for r in whole[whole.domain == "all"].itertuples()
    ]
    section.tables.append((["drafter", "D", "domain", "AL", "CI low", "CI high", "tokens/step", "source"], rows))
    return section


def ranking_section(runs: list[RunView], ranking: pd.DataFrame | SpeclensError) -> Section | None:
    """The ranking's tables beside the model's check (measured vs predicted); None when not ranked
    (the headline says why)."""
    if isinstance(ranking, SpeclensError):
        return None
    section = Section("Ranking")
    columns = display_columns(ranking)
    for heading, group in tables(ranking):
        section.text.append(Shown(heading))
        section.tables.append(([label for _, label, _ in columns], display_rows(group, columns)))
    section.text += guideline_notes(runs, ranking)
    return section


def speedup_section(runs: list[RunView]) -> Section:
    chart = plotly_charts.speedup_chart(runs)
    png = png_plots.speedups(runs)
    return Section(
        "Measured vs predicted speedup",
        text=["Predicted = T_verif(B)·tokens/step / (T_verif(B(1+D)) + T_draft(B,D)); needs baseline=true."],
        charts=[chart],
        images=[("speedup", png)] if png else [],
    )


def pareto_points(runs: list[RunView], ranking: pd.DataFrame | SpeclensError) -> pd.DataFrame:
    """Every measured operating point over all prompts: its mechanism, D, B, throughput and
    interactivity (tokens/s per request; from p50 TPOT where latency was measured)."""
    rows = []
    for run in runs:
        for point in run.summary.operating_points:
            lat = point.latency
            if lat is not None and lat.tpot_ms is not None and lat.tpot_ms.p50 > 0:
                per_request, total = 1000.0 / lat.tpot_ms.p50, lat.output_tokens_per_s
            elif point.output_tokens_per_s:
                per_request, total = point.output_tokens_per_s / point.batch_size, point.output_tokens_per_s
            else:
                continue
            rows.append(
                {
                    "mechanism": run.summary.mechanism if run.summary.d is not None else "none",
                    "d": run.summary.d,
                    "batch_size": point.batch_size,
                    "tokens_per_s_per_request": per_request,
                    "output_tokens_per_s": total,
                    "label": run.label,
                }
            )
    return pd.DataFrame(
        rows, columns=["mechanism", "d", "batch_size", "tokens_per_s_per_request", "output_tokens_per_s", "label"]
    )


def throughput_section(runs: list[RunView], ranking: pd.DataFrame | SpeclensError) -> Section:
    points = pareto_points(runs, ranking)
    front = pareto_front(points) if len(points) else points
    section = Section(
        "Throughput vs interactivity",
        text=[
            "Total output tokens/s against tokens/s per request (1000 / p50 TPOT where latency was measured), "
            "one series per mechanism, each point labelled by its batch size and D; dashed: the Pareto front."
        ],
        charts=[plotly_charts.pareto_chart(points, front)],
    )
    if len(points) >= 2:
        section.images.append(("throughput_vs_interactivity", png_plots.pareto(points, front)))
    return section


def acceptance_sections(spec_runs: list[RunView]) -> list[Section]:
    sections = []
    for title, chart, png in (
        ("Per-position acceptance", plotly_charts.per_position_chart(spec_runs), png_plots.per_position),
        ("Acceptance histogram", plotly_charts.histogram_chart(spec_runs), png_plots.histogram),
        ("AL by context position", plotly_charts.al_by_position_chart(spec_runs), png_plots.al_by_position),
        (
            "AL by output position",
            plotly_charts.al_by_output_position_chart(spec_runs),
            png_plots.al_by_output_position,
        ),
        ("AL per request", plotly_charts.al_per_request_chart(spec_runs), png_plots.al_per_request),
    ):
        section = Section(title, charts=[chart])
        if isinstance(chart, plotly_charts.Chart):
            section.images.append((chart.key, png(spec_runs)))
        sections.append(section)
    return sections


def segment_section(runs: list[RunView]) -> Section | None:
    """AL per segment (thinking, answer) per drafter and D, with each segment's share of the output
    tokens; None where no run has a reasoning boundary."""
    rows = []
    for run in runs:
        s = run.summary
        for segment, f in (s.by_segment or {}).items():
            rows.append(
                [
                    run.label,
                    segment,
                    cell(f.al, 3),
                    _ci_cell(f.al_ci95),
                    str(f.n_steps),
                    str(f.output_tokens),
                    cell(f.share_of_output_tokens, 2),
                    cell(f.tokens_per_step, 3),
                ]
            )
    if not rows:
        return None
    splits = sorted({run.summary.reasoning.boundary for run in runs if run.summary.reasoning})
    text = [
        f"Thinking ends by {', '.join(splits)}. A verification step counts where its first token is; token "
        "shares count each token where it is."
    ]
    unclosed = [
        f"{run.label}: {run.summary.reasoning.n_unclosed} of {run.summary.reasoning.n_outputs}"
        for run in runs
        if run.summary.reasoning and run.summary.reasoning.n_unclosed
    ]
    if unclosed:
        text.append("Outputs that think to their end (all thinking): " + "; ".join(unclosed) + ".")
    return Section(
        "Thinking vs answer",
        text,
        charts=[plotly_charts.segment_chart(runs)],
        tables=[(["run", "segment", "AL", "95% CI", "steps", "tokens", "share", "tokens/step"], rows)],
    )


def turn_section(runs: list[RunView]) -> Section | None:
    """AL per assistant turn of agent trajectories, per run; None where no run measured trajectories."""
    measured = [run for run in runs if run.summary.by_turn]
    if not measured:
        return None
    rows = [
        [run.label, turn, str(g.n_requests), str(g.n_steps), cell(g.al, 3), _ci_cell(g.al_ci95)]
        for run in measured
        for turn, g in sorted(run.summary.by_turn.items(), key=lambda kv: int(kv[0]))
    ]
    return Section(
        "AL by agent turn",
        ["One request per assistant turn, its prompt the trajectory's recorded history before it."],
        images=[("al_by_turn", png_plots.al_vs_turn(measured))],
        charts=[plotly_charts.turn_chart(measured)],
        tables=[(["run", "turn", "requests", "steps", "AL", "95% CI"], rows)],
    )


def length_section(runs: list[RunView]) -> Section | None:
    """AL and tokens per step against the prompts' input length, per drafter and D, with each
    length's table; lengths past the target's own window are marked with the extension they were
    measured under. None where no run's prompts state their lengths."""
    measured = [run for run in runs if plotly_charts.length_figures(run)]
    if not measured:
        return None
    al_chart = plotly_charts.length_chart(measured, "al")
    section = Section(
        "AL by context length",
        text=[
            "Each length bucket's requests on their own (a pass runs one length at a time); 95% CI over requests. "
            "Where AL falls with length, speculation buys less on long prompts: choose D per length "
            "(`python -m reports.rank` ranks each length)."
        ],
        charts=[al_chart, plotly_charts.length_chart(measured, "tokens_per_step")],
        tables=[length_table(measured)],
    )
    section.text += window_notes(measured)
    if isinstance(al_chart, plotly_charts.Chart):
        section.images.append(("al_by_length", png_plots.al_vs_length(measured)))
    points = length_point_table(measured)
    if points is not None:
        section.tables.append(points)
    return section


def window_notes(runs: list[RunView]) -> list[str]:
    """The window each run ran with, and what was measured past the target's own window."""
    notes = []
    for label in sorted({run.summary.context_window.label() for run in runs if run.summary.context_window}):
        notes.append(f"Context: {label}.")
    extended = sorted(
        {(w.native, w.extension) for run in runs if (w := run.summary.context_window) is not None and w.extended}
    )
    for native, extension in extended:
        notes.append(
            f"Lengths past the target's own window ({native:,} tokens) were measured with a context extension "
            f"({extension}): marked `extended` in the table and as open diamonds in the charts; they measure the "
            "extended target, not the checkpoint as shipped."
        )
    return notes


def window_cell(run: RunView, input_tokens: int | None) -> str:
    extension = plotly_charts.extension_at(run.summary.context_window, input_tokens)
    return "native" if extension is None else f"extended: {extension}"


def length_table(runs: list[RunView]) -> tuple[list[str], list[list[str]]]:
    header = ["run", "length", "input tokens", "requests", "steps", "AL", "95% CI", "tokens/step", "95% CI", "window"]
    rows = [
        [
            run.label,
            label,
            f"{g.input_tokens:,}" if g.input_tokens is not None else "-",
            str(g.n_requests),
            str(g.n_steps),
            cell(g.al, 3),
            _ci_cell(g.al_ci95),
            cell(g.tokens_per_step, 3),
            _ci_cell(g.tokens_per_step_ci95),
            window_cell(run, g.input_tokens),
        ]
        for run in runs
        for label, g in plotly_charts.length_figures(run)
    ]
    return header, rows


def length_point_table(runs: list[RunView]) -> tuple[list[str], list[list[str]]] | None:
    """Each length's throughput and measured speedup at each batch size (a pass runs one length at a
    time, so its own steps time it); None where no operating point measured either."""
    rows = []
    for run in runs:
        for point in run.summary.operating_points:
            for label, p in sorted((point.by_length or {}).items(), key=lambda kv: kv[1].input_tokens or 0):
                if p.output_tokens_per_s is None and p.speedup is None:
                    continue
                rows.append(
                    [
                        run.label,
                        str(point.batch_size),
                        label,
                        cell(p.al, 3),
                        cell(p.output_tokens_per_s, 1),
                        cell(p.speedup, 3),
                        window_cell(run, p.input_tokens),
                    ]
                )
    if not rows:
        return None
    return ["run", "B", "length", "AL", "output tok/s", "speedup", "window"], rows


def _ci_cell(ci: list[float] | None) -> str:
    return "-" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def latency_section(runs: list[RunView]) -> Section | None:
    """Latency percentiles per run and operating point (runs measured before latency was recorded
    have none: no section then)."""
    rows = []
    for run in runs:
        for point in run.summary.operating_points:
            lat = point.latency
            if lat is None:
                continue
            pct = lambda p: "-" if p is None else f"{p.p50:.1f} / {p.p90:.1f} / {p.p99:.1f}"  # noqa: E731
            load = f"{point.request_rate:g} req/s" if point.request_rate else f"B={point.batch_size}"
            rows.append(
                [
                    run.label,
                    load,
                    pct(lat.ttft_ms),
                    pct(lat.tpot_ms),
                    pct(lat.itl_ms),
                    pct(lat.e2e_ms),
                    cell(lat.output_tokens_per_s, 1),
                    cell(point.latency_speedup, 2),
                ]
            )
    if not rows:
        return None
    text = [
        "p50 / p90 / p99 in ms. TPOT = (end − first token) / (output tokens − 1); ITL is between streamed "
        "chunks, which carry several tokens with speculation. TPOT speedup = plain decoding's p50 TPOT / the "
        "drafter's, same load."
    ]
    return Section(
        "Latency",
        text,
        tables=[(["run", "load", "TTFT", "TPOT", "ITL", "end to end", "tokens/s", "TPOT speedup"], rows)],
    )


# Waterfalls drawn at most (the table lists every operating point).
MAX_WATERFALLS = 12


def account_section(runs: list[RunView]) -> Section | None:
    """Each operating point's speedup account: the model's prediction times the corrections measured
    from its engine steps, multiplying out to the measured speedup (speclens/figures/account.py)."""
    header = [
        "run",
        "B",
        *(name.replace("_", " ") for name in (MODEL, *CORRECTIONS)),
        "product",
        "measured",
        "outside steps (spec / plain)",
    ]
    rows, images, waterfalls = [], [], []
    for run in runs:
        for point in run.summary.operating_points:
            account = point.speedup_account
            if account is None:
                continue
            outside = account.outside_steps or {}
            rows.append(
                [
                    run.label,
                    str(point.batch_size),
                    *(cell(account.factors[n], 3) for n in (MODEL, *CORRECTIONS)),
                    cell(account.product, 3),
                    cell(account.measured, 3),
                    " / ".join(f"{outside.get(m, 0) or 0:.1%}" for m in ("speculative", "plain")),
                ]
            )
            if len(images) < MAX_WATERFALLS:
                name, title = (
                    f"account_{safe_name(run.label)}_B{point.batch_size}",
                    f"{run.label}, B={point.batch_size}",
                )
                images.append((name, png_plots.waterfall(title, account.factors, account.measured)))
                waterfalls.append(plotly_charts.waterfall_chart(name, title, account.factors, account.measured))
    if not rows:
        return None
    text = [
        "The measured speedup = the steady-state model T_verif(B)·tokens/step / T_step(B,D) × corrections, each the "
        "speculative pass's over plain decoding's, measured from the engine steps: prefill (steps that also prefill "
        "are slower), ramp-up and tail (fewer than B in flight), slow outliers (median over mean steady step), "
        "token yield (tokens per request-step over tokens/step). Each correction is the model's error from that "
        "cause. Time outside engine steps is not in the speedup (it is over engine-step time); its share is shown."
    ]
    return Section("Speedup account", text, tables=[(header, rows)], images=images, charts=waterfalls)


def diagnostics_section(runs: list[RunView]) -> Section | None:
    """What is odd about each run (speclens/figures/diagnostics.py), warnings first, under the answer."""
    rows = [[run.label, d.severity, d.code, d.message] for run in runs for d in run.summary.diagnostics or []]
    if not rows:
        return None
    rows.sort(key=lambda row: (row[1] != "warning", row[0], row[2]))
    return Section(
        "Diagnostics",
        text=[
            "What is odd about the runs, with the check that explains it most often (docs/definitions.md#diagnostics)."
        ],
        tables=[(["run", "severity", "code", "what"], rows)],
    )


def runs_section(runs: list[RunView]) -> Section:
    # vLLM's model runner (runners/model_runner.py; n-gram drafts differently on V1 and V2), where
    # a run recorded one
    model_runners = [(r.summary.numerics.model_runner if r.summary.numerics else None) for r in runs]
    shown = any(model_runners)
    rows = [
        [
            r.label,
            str(r.summary.n_requests),
            cell(r.summary.al, 3),
            cell(r.summary.tokens_per_step, 3),
            cell(r.summary.speedup, 3),
            *([model_runner or "-"] if shown else []),
        ]
        for r, model_runner in zip(runs, model_runners)
    ]
    header = ["run", "requests", "AL", "tokens/step", "speedup", *(["model runner"] if shown else [])]
    return Section("Runs", tables=[(header, rows)])


def stamp_section(runs: list[RunView]) -> Section:
    section = Section("Run stamp")
    first = runs[0]
    section.text.append("Versions: " + ", ".join(f"{k} {v}" for k, v in first.summary.versions.items()))
    section.text.append(f"git: {first.summary.git_sha}")
    rows = [
        [
            run.label,
            str(run.path.name),
            run.fingerprints.target or "-",
            run.fingerprints.draft or "-",
            run.fingerprints.dataset or "-",
        ]
        for run in runs
    ]
    section.tables.append((["run", "dir", "target", "draft", "prompts"], rows))
    builds = {run.fingerprints.draft: run.stamp["draft_build"] for run in runs if run.stamp.get("draft_build")}
    section.text.extend(f"Draft {fingerprint}: {describe_build(facts)}." for fingerprint, facts in builds.items())
    return section


def build_sections(root: Path, gpu: Hardware | None = None) -> list[Section]:
    runs = find_runs(root)
    ladder = ladder_sections(root) if (root / LOAD_FILE).is_file() else []
    if ladder and not runs:
        return ladder
    if not runs:
        raise SpeclensError(f"{root}: no finished runs (summary.json) or load ladder (load.json) in it.")
    check_consistent(runs, CONSISTENT_ACROSS_TEMPERATURES)
    spec_runs = [r for r in runs if r.summary.d is not None]
    try:
        # a synthetic acceptance ranks no mechanism: its AL is set, not measured
        ranking: pd.DataFrame | SpeclensError = rank_runs(measured_runs(runs))
    except SpeclensError as exc:
        ranking = exc
    sections = [decision_section(root, runs, ranking), *ladder]
    sections += [s for s in (diagnostics_section(runs),) if s] + [al_section(root, runs)]
    sections += [s for s in (settings_section(runs),) if s]
    sections += [s for s in (ranking_section(runs, ranking), speedup_section(runs), account_section(runs)) if s]
    if gpu is not None:
        sections.append(gpu_section(runs, gpu))
    sections += [throughput_section(runs, ranking)] + [s for s in (latency_section(runs),) if s]
    sections += acceptance_sections(spec_runs)
    sections += [s for s in (length_section(spec_runs), segment_section(spec_runs), turn_section(spec_runs)) if s]
    sections.append(runs_section(runs))
    sections.append(
        Section(
            "Drafters",
            tables=[(DRAFTER_HEADER, comparison_rows())],
            collapsed="The mechanisms' facts (memory, training, best for)",
        )
    )
    sections.append(stamp_section(runs))
    return sections


def render_html(root: Path, sections: list[Section]) -> str:
    filtered = [c for s in sections for c in s.charts if isinstance(c, plotly_charts.Chart) and c.domain_filter]
    domains = sorted(
        {d for chart in filtered for d in plotly_charts.chart_domains(chart)}, key=lambda d: (d != "all", d)
    )
    return render_page("speclens report", str(root), sections, domains)


def render_markdown(root: Path, sections: list[Section], out_dir: Path) -> str:
    out = ["# speclens report", "", str(root), ""]
    for s in sections:
        out += [f"## {s.title}", ""]
        if s.answer:
            out += [f"**{s.answer}**", ""]
        for t in s.text:
            out += [markdown_safe(t) if isinstance(t, Shown) else t, ""]
        for chart in s.charts:
            if isinstance(chart, plotly_charts.Missing):
                out += [f"{chart.title}: not drawn ({chart.reason}).", ""]
        for block in s.code:
            out += ["```", block, "```", ""]
        for name, png in s.images:
            file = f"report_{name}.png"
            (out_dir / file).write_bytes(png)
            out += [f"![{name}]({file})", ""]
        for header, rows in s.tables:
            out += [markdown_table(header, rows), ""]
    return "\n".join(out)


def build(root: Path, gpu: Hardware | None = None) -> tuple[Path, Path]:
    """report.html and report.md in `root`; with `gpu`, a section predicting the speedups there."""
    sections = build_sections(root, gpu)
    html_file, md_file = root / "report.html", root / "report.md"
    html_file.write_text(render_html(root, sections), encoding="utf-8")
    md_file.write_text(render_markdown(root, sections, root), encoding="utf-8")
    return html_file, md_file


@guarded
def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="python -m reports.build", description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, help="a run dir or a sweep dir")
    parser.add_argument("--gpu", help=f"also predict the speedups on this GPU ({', '.join(GPUS)})")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel GPUs for --gpu (default 1)")
    parser.add_argument(
        "--engine",
        default=DEFAULT_ENGINE,
        help=f"the serving engine for --gpu ({', '.join(ENGINES)}; default {DEFAULT_ENGINE})",
    )
    args = parser.parse_args(argv)
    gpu = Hardware(gpu_named(args.gpu), tp=args.tp, engine=engine_named(args.engine)) if args.gpu else None
    html_file, md_file = build(args.dir, gpu)
    print(f"report: {html_file}\nmarkdown: {md_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
