"""`python -m reports.build <run or sweep dir>`: report.html (self-contained) and report.md.

Sections: AL vs D per domain, per-position acceptance, acceptance histogram, AL by context
position, predicted vs measured speedup, the ranking, the drafters' comparison table and the
run stamp. The markdown twin has the same text and tables; its images are PNG files beside it.
"""

from __future__ import annotations

import base64
import html
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from drafters.facts_table import HEADER as DRAFTER_HEADER
from drafters.facts_table import comparison_rows
from reports import figures
from reports.curves import WHOLE_OUTPUT, collect, safe_name
from reports.rank import display_columns, display_rows, guideline_notes
from reports.ranking import pareto_front, rank_runs, tables
from reports.runs import (
    CONSISTENT_ACROSS_TEMPERATURES,
    Run,
    check_consistent,
    find_runs,
)
from reports.serve import serve_markdown, serve_plan
from reports.table import cell, markdown_table
from speclens.account import CORRECTIONS, MODEL
from speclens.drafter_build import describe_build
from speclens.errors import ArgumentParser, SpeclensError, guarded

# Tells a browser test whether every image decoded and no script error happened.
LOAD_CHECK = """<script>
window.addEventListener("error", e => {
  document.body.dataset.errors = (document.body.dataset.errors || "") + e.message + ";";
});
window.addEventListener("load", () => {
  const images = Array.from(document.images);
  document.body.dataset.images = images.length;
  document.body.dataset.imagesLoaded = images.filter(i => i.complete && i.naturalWidth > 0).length;
});
</script>"""

STYLE = """<style>
body { font-family: sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
img { width: 49%; display: inline-block; margin: 0.5em 0 1em; vertical-align: top; }
.note { color: #a33; }
</style>"""


@dataclass
class Section:
    title: str
    text: list[str] = field(default_factory=list)
    tables: list[tuple[list[str], list[list[str]]]] = field(default_factory=list)
    images: list[tuple[str, bytes]] = field(default_factory=list)


def curve_sections(root: Path) -> list[Section]:
    try:
        curves = collect(root)
    except SpeclensError as exc:
        return [Section("AL vs D", [f"No curves: {exc}"])]
    section = Section("AL vs D per domain", ["One line per drafter, 95% CI band; dots are measured D values."])
    whole = curves[curves.segment == WHOLE_OUTPUT]
    for domain in sorted(curves.domain.unique()):
        section.images.append((f"al_vs_d_{safe_name(domain)}", figures.al_vs_d(whole, domain)))
    rows = [
        [
            r.drafter,
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
    return [section]


def segment_section(runs: list[Run]) -> Section | None:
    """AL per segment (thinking, answer) per drafter and D, with each segment's share of the output
    tokens; None where no run has a reasoning boundary."""
    rows = []
    for run in runs:
        s = run.summary
        for segment, f in (s.by_segment or {}).items():
            rows.append(
                [
                    s.label,
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
        f"{run.summary.label}: {run.summary.reasoning.n_unclosed} of {run.summary.reasoning.n_outputs}"
        for run in runs
        if run.summary.reasoning and run.summary.reasoning.n_unclosed
    ]
    if unclosed:
        text.append("Outputs that think to their end (all thinking): " + "; ".join(unclosed) + ".")
    return Section(
        "Thinking vs answer",
        text,
        tables=[(["run", "segment", "AL", "95% CI", "steps", "tokens", "share", "tokens/step"], rows)],
    )


def turn_section(runs: list[Run]) -> Section | None:
    """AL per assistant turn of agent trajectories, per run; None where no run measured trajectories."""
    measured = [run for run in runs if run.summary.by_turn]
    if not measured:
        return None
    rows = [
        [run.summary.label, turn, str(g.n_requests), str(g.n_steps), cell(g.al, 3), _ci_cell(g.al_ci95)]
        for run in measured
        for turn, g in sorted(run.summary.by_turn.items(), key=lambda kv: int(kv[0]))
    ]
    return Section(
        "AL by agent turn",
        ["One request per assistant turn, its prompt the trajectory's recorded history before it."],
        images=[("al_by_turn", figures.al_vs_turn(measured))],
        tables=[(["run", "turn", "requests", "steps", "AL", "95% CI"], rows)],
    )


def _ci_cell(ci: list[float] | None) -> str:
    return "-" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def ranking_section(runs: list[Run], ranking: pd.DataFrame | SpeclensError) -> Section:
    """The ranking's tables, or why the runs cannot be ranked."""
    section = Section("Ranking")
    if isinstance(ranking, SpeclensError):
        section.text.append(f"Not ranked: {ranking}")
        return section
    columns = display_columns(ranking)
    for heading, group in tables(ranking):
        section.text.append(heading)
        section.tables.append(([label for _, label, _ in columns], display_rows(group, columns)))
    section.text += guideline_notes(runs, ranking)
    return section


def serve_section(runs: list[Run], ranking: pd.DataFrame) -> Section:
    """What to serve (reports/serve.py)."""
    return Section("What to serve", [line for line in serve_markdown(serve_plan(ranking, runs))[1:] if line])


def latency_section(runs: list[Run]) -> Section | None:
    """Latency percentiles per run and operating point (runs measured before latency was recorded
    have none: no section then)."""
    rows, points = [], []
    for run in runs:
        for point in run.summary.operating_points:
            lat = point.latency
            if lat is None:
                continue
            pct = lambda p: "-" if p is None else f"{p.p50:.1f} / {p.p90:.1f} / {p.p99:.1f}"  # noqa: E731
            load = f"{point.request_rate:g} req/s" if point.request_rate else f"B={point.batch_size}"
            rows.append(
                [
                    run.summary.label,
                    load,
                    pct(lat.ttft_ms),
                    pct(lat.tpot_ms),
                    pct(lat.itl_ms),
                    pct(lat.e2e_ms),
                    cell(lat.output_tokens_per_s, 1),
                    cell(point.latency_speedup, 2),
                ]
            )
            if lat.tpot_ms is not None and lat.tpot_ms.p50 > 0:
                points.append(
                    {
                        "label": run.summary.label,
                        "batch_size": point.batch_size,
                        "tokens_per_s_per_request": 1000.0 / lat.tpot_ms.p50,
                        "output_tokens_per_s": lat.output_tokens_per_s,
                    }
                )
    if not rows:
        return None
    text = [
        "p50 / p90 / p99 in ms. TPOT = (end − first token) / (output tokens − 1); ITL is between streamed "
        "chunks, which carry several tokens with speculation. TPOT speedup = plain decoding's p50 TPOT / the "
        "drafter's, same load."
    ]
    images = []
    if points:
        frame = pd.DataFrame(points)
        text.append(
            "Throughput vs interactivity: tokens/s per user (1000 / p50 TPOT) against total output tokens/s, "
            "one point per load."
        )
        images.append(("throughput_vs_interactivity", figures.pareto(frame, pareto_front(frame))))
    return Section(
        "Latency",
        text,
        images=images,
        tables=[(["run", "load", "TTFT", "TPOT", "ITL", "end to end", "tokens/s", "TPOT speedup"], rows)],
    )


# Waterfalls drawn at most (the table lists every operating point).
MAX_WATERFALLS = 12


def account_section(runs: list[Run]) -> Section | None:
    """Each operating point's speedup account: the model's prediction times the corrections measured
    from its engine steps, multiplying out to the measured speedup (speclens/account.py)."""
    header = [
        "run",
        "B",
        *(name.replace("_", " ") for name in (MODEL, *CORRECTIONS)),
        "product",
        "measured",
        "outside steps (spec / plain)",
    ]
    rows, images = [], []
    for run in runs:
        for point in run.summary.operating_points:
            account = point.speedup_account
            if account is None:
                continue
            outside = account.outside_steps or {}
            rows.append(
                [
                    run.summary.label,
                    str(point.batch_size),
                    *(cell(account.factors[n], 3) for n in (MODEL, *CORRECTIONS)),
                    cell(account.product, 3),
                    cell(account.measured, 3),
                    " / ".join(f"{outside.get(m, 0) or 0:.1%}" for m in ("speculative", "plain")),
                ]
            )
            if len(images) < MAX_WATERFALLS:
                images.append(
                    (
                        f"account_{safe_name(run.summary.label)}_B{point.batch_size}",
                        figures.waterfall(
                            f"{run.summary.label}, B={point.batch_size}", account.factors, account.measured
                        ),
                    )
                )
    if not rows:
        return None
    text = [
        "The measured speedup = the steady-state model T_verif(B)·tokens/step / T_step(B,D) × corrections, each the "
        "speculative pass's over plain decoding's, measured from the engine steps: prefill (steps that also prefill "
        "are slower), ramp-up and tail (fewer than B in flight), slow outliers (median over mean steady step), "
        "token yield (tokens per request-step over tokens/step). Each correction is the model's error from that "
        "cause. Time outside engine steps is not in the speedup (it is over engine-step time); its share is shown."
    ]
    return Section("Speedup account", text, tables=[(header, rows)], images=images)


def stamp_section(runs: list[Run]) -> Section:
    section = Section("Run stamp")
    first = runs[0]
    section.text.append("Versions: " + ", ".join(f"{k} {v}" for k, v in first.summary.versions.items()))
    section.text.append(f"git: {first.summary.git_sha}")
    rows = [
        [
            run.summary.label,
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


def build_sections(root: Path) -> list[Section]:
    runs = find_runs(root)
    if not runs:
        raise SpeclensError(f"{root}: no finished runs (summary.json) in it.")
    check_consistent(runs, CONSISTENT_ACROSS_TEMPERATURES)
    spec_runs = [r for r in runs if r.summary.d is not None]
    sections = curve_sections(root)
    summary_rows = [
        [
            r.summary.label,
            str(r.summary.n_requests),
            cell(r.summary.al, 3),
            cell(r.summary.tokens_per_step, 3),
            cell(r.summary.speedup, 3),
        ]
        for r in runs
    ]
    sections.insert(0, Section("Runs", tables=[(["run", "requests", "AL", "tokens/step", "speedup"], summary_rows)]))
    sections.append(Section("Per-position acceptance", images=[("per_position", figures.per_position(spec_runs))]))
    sections.append(Section("Acceptance histogram", images=[("histogram", figures.histogram(spec_runs))]))
    sections.append(Section("AL by context position", images=[("al_by_position", figures.al_by_position(spec_runs))]))
    speed = figures.speedups(runs)
    sections.append(
        Section(
            "Measured vs predicted speedup",
            ["Predicted = T_verif(B)·tokens/step / (T_verif(B(1+D)) + T_draft(B,D)); needs baseline=true."]
            if speed is None
            else [],
            images=[("speedup", speed)] if speed else [],
        )
    )
    for optional in (segment_section(spec_runs), turn_section(spec_runs), account_section(runs), latency_section(runs)):
        if optional is not None:
            sections.append(optional)
    try:
        ranking: pd.DataFrame | SpeclensError = rank_runs(runs)
    except SpeclensError as exc:
        ranking = exc
    sections.append(ranking_section(runs, ranking))
    if not isinstance(ranking, SpeclensError):
        sections.append(serve_section(runs, ranking))
    sections.append(Section("Drafters", tables=[(DRAFTER_HEADER, comparison_rows())]))
    sections.append(stamp_section(runs))
    return sections


def render_html(root: Path, sections: list[Section]) -> str:
    out = [
        "<!DOCTYPE html>",
        "<html><head><meta charset='utf-8'>",
        f"<title>speclens report: {html.escape(str(root))}</title>",
        STYLE,
        "</head><body>",
        f"<h1>speclens report</h1><p>{html.escape(str(root))}</p>",
    ]
    for s in sections:
        out.append(f"<h2>{html.escape(s.title)}</h2>")
        out += [f"<p>{html.escape(t)}</p>" for t in s.text]
        for name, png in s.images:
            data = base64.b64encode(png).decode()
            out.append(f"<img alt='{html.escape(name)}' src='data:image/png;base64,{data}'>")
        for header, rows in s.tables:
            out.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>")
            out += ["<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows]
            out.append("</table>")
    out += [LOAD_CHECK, "</body></html>"]
    return "\n".join(out)


def render_markdown(root: Path, sections: list[Section], out_dir: Path) -> str:
    out = ["# speclens report", "", str(root), ""]
    for s in sections:
        out += [f"## {s.title}", ""]
        for t in s.text:
            out += [t, ""]
        for name, png in s.images:
            file = f"report_{name}.png"
            (out_dir / file).write_bytes(png)
            out += [f"![{name}]({file})", ""]
        for header, rows in s.tables:
            out += [markdown_table(header, rows), ""]
    return "\n".join(out)


def build(root: Path) -> tuple[Path, Path]:
    sections = build_sections(root)
    html_file, md_file = root / "report.html", root / "report.md"
    html_file.write_text(render_html(root, sections), encoding="utf-8")
    md_file.write_text(render_markdown(root, sections, root), encoding="utf-8")
    return html_file, md_file


@guarded
def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="python -m reports.build", description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, help="a run dir or a sweep dir")
    args = parser.parse_args(argv)
    html_file, md_file = build(args.dir)
    print(f"report: {html_file}\nmarkdown: {md_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
