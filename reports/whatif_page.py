"""whatif.html: the predictions of `evals.whatif` as a page in the report's style — the best
(drafter, D) per B, predicted speedup vs B for each D, and the throughput–interactivity Pareto
front with and without each mechanism (NVIDIA's co-design post, Figure 1, for your model). With
acceptance measured per length: the length each best took its AL from, and guidelines 2 and 3 at
each measured length with the share of the step attention takes there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from reports.charts import Chart, base_layout, coloured, hover_template, pareto_chart
from reports.page import Section, render_page
from reports.ranking import pareto_front
from speclens.gpu_model.whatif import best_label, operating_rows

WHATIF_PAGE = "whatif.html"


def speedup_chart(points: list[dict[str, Any]], drafter: str, context: int) -> Chart:
    traces = []
    mine = [p for p in points if p["drafter"] == drafter and p["context_len"] == context and p["fits"]]
    batch_sizes = sorted({p["batch_size"] for p in mine})
    for d in sorted({p["d"] for p in mine}):
        series = sorted((p for p in mine if p["d"] == d), key=lambda p: p["batch_size"])
        traces.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": f"d={d}",
                "x": [p["batch_size"] for p in series],
                "y": [p["speedup"] for p in series],
                "customdata": [
                    f"B={p['batch_size']} d={d}: x{p['speedup']:.2f} (AL {p['al']:.2f}, {p['bound']}-bound)"
                    for p in series
                ],
                "hovertemplate": hover_template(),
            }
        )
    layout = base_layout(
        f"{drafter}: predicted speedup vs B, context {context}",
        # labels at the batch sizes predicted only: a log axis's own minor ticks read as batch sizes
        xaxis={
            "title": {"text": "batch size B"},
            "type": "log",
            "tickvals": batch_sizes,
            "ticktext": [str(b) for b in batch_sizes],
        },
        yaxis={"title": {"text": "speedup over plain decoding"}},
        shapes=[{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": 1, "y1": 1, "line": {"dash": "dot"}}],
    )
    return Chart(
        f"speedup-{drafter}-{context}",
        f"{drafter} speedup vs B, context {context}",
        {"data": coloured(traces), "layout": layout},
    )


def length_section(lengths: list[dict[str, Any]]) -> Section:
    """Guidelines 2 and 3 at each measured length, with attention's share of the step and the best D."""
    rows = []
    for at in lengths:
        best = {b["batch_size"]: b for b in at["best"]}
        for b in at["by_batch_size"]:
            chosen = best.get(b["batch_size"])
            what = best_label(chosen)
            rows.append(
                [at["length"], str(b["batch_size"]), f"{b['attention_share_plain']:.0%}"]
                + [
                    "-" if b["attention_share_at_starting_d"] is None else f"{b['attention_share_at_starting_d']:.0%}",
                    ", ".join(map(str, b["knees"][:4])) or "-",
                    what,
                ]
            )
    g2 = lengths[0]["guideline_2_d"]
    rule = f"D = 128/G - 1 = {g2}" if g2 is not None else "does not apply (128/G - 1 < 1)"
    return Section(
        "By context length",
        text=[
            f"Guideline 2: {rule} (G = {lengths[0]['g']}); guideline 3: D in "
            f"{lengths[0]['guideline_3_ds'][:4]}. At each length the AL measured there; the attention "
            "share, the D after which verification steps up and the best D are predicted by the step-cost model."
        ],
        tables=[
            (
                ["length", "B", "attention share of T_verif(B)", f"at D={g2}" if g2 is not None else "-"]
                + ["T_verif steps up after D", "best"],
                rows,
            )
        ],
    )


def write_page(result: dict[str, Any], out: Path, slo_line: str | None = None) -> Path:
    points = result["points"]
    contexts = sorted({p["context_len"] for p in points})
    drafters = sorted({p["drafter"] for p in points})
    by_length = bool(result.get("by_length"))
    best_rows = [
        [
            str(b["batch_size"]),
            str(b["context_len"]),
            "plain" if b["drafter"] == "none" else f"{b['drafter']} d={b['d']}",
        ]
        + [f"x{b['speedup']:.2f}"]
        + [f"[{b['speedup_interval'][0]:.2f}, {b['speedup_interval'][1]:.2f}]" if "speedup_interval" in b else "-"]
        + ([b.get("al_measured_at", "-")] if by_length else [])
        for b in result["best"]
    ]
    gpu = result["gpu"]["name"]
    answer = Section(
        f"Best per batch size on {gpu}",
        answer=slo_line,
        text=[
            f"tp={result['tp']}, weights={result['weights']}, cost model: {result['cost_model']}. All figures "
            f"predicted; {result.get('speedup_interval', '')}."
        ]
        + list(result.get("notes", [])),
        tables=[
            (["B", "context", "best", "speedup", "80% range"] + (["AL measured at"] if by_length else []), best_rows)
        ],
    )
    operating = pd.DataFrame(operating_rows(points, result["tp"]))
    fronts = []
    for context in contexts:  # one chart per measured or asked context length, not the first alone
        rows = operating[operating.context_len == context]
        for drafter in drafters:
            shown = rows[rows.mechanism.isin([drafter, "plain"])]
            chart = pareto_chart(shown, pareto_front(shown))
            if isinstance(chart, Chart):
                chart.key = f"pareto-{drafter}-{context}"
                chart.title = f"Throughput vs interactivity with and without {drafter}, context {context}"
                layout = chart.figure["layout"]
                layout["title"]["text"] = f"{drafter} and plain decoding: predicted, context {context}"
                layout["xaxis"]["title"]["text"] = "interactivity: output tokens/s per user"
                layout["yaxis"]["title"]["text"] = "throughput: output tokens/s per GPU"
            fronts.append(chart)
    sections = [
        answer,
        *([length_section(result["by_length"])] if by_length else []),
        Section("Predicted speedup vs B", charts=[speedup_chart(points, d, c) for c in contexts for d in drafters]),
        Section("Throughput vs interactivity", charts=fronts),
    ]
    path = out / WHATIF_PAGE
    path.write_text(
        render_page("speclens whatif", f"{gpu}: predicted from measured acceptance", sections), encoding="utf-8"
    )
    return path
