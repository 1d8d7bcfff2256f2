"""whatif.html: the predictions of `evals.whatif` as a page in the report's style — the best
(drafter, D) per B, predicted speedup vs B for each D, and the throughput–interactivity Pareto
front with and without each mechanism (NVIDIA's co-design post, Figure 1, for your model). With
acceptance measured per length: the length each best took its AL from, and guidelines 2 and 3 at
each measured length with the share of the step attention takes there. Every AL that is not a
measurement (derived from rates at a larger D, given, fake, synthetic) is marked beside it
(speclens/provenance.py mark), and the page opens with what each drafter's acceptance is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from reports.page import Section, render_page
from reports.plotly_charts import Chart, base_layout, coloured, hover_template, pareto_chart
from reports.speedup_ranking import pareto_front
from speclens import provenance as prov
from speclens.gpu_model.model_error import HELD_OUT, TOKENS_PER_S_BOUND, TOKENS_PER_S_DERIVED_ON, tokens_per_s_interval
from speclens.gpu_model.whatif import best_label, operating_rows
from speclens.provenance import mark

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
                    f"B={p['batch_size']} d={d}: x{p['speedup']:.2f} (AL {p['al']:.2f}"
                    f"{mark(p.get('al_source', prov.MEASURED))}, {p['bound']}-bound)"
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


def ds_text(ds: list[int]) -> str:
    """D values with runs of three or more shortened: `1-4, 6, 7`."""
    runs: list[list[int]] = []
    for d in sorted(ds):
        if runs and d == runs[-1][-1] + 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    return ", ".join(", ".join(map(str, r)) if len(r) < 3 else f"{r[0]}-{r[-1]}" for r in runs)


def acceptance_lines(result: dict[str, Any]) -> list[str]:
    """What each drafter's acceptance is, one line each: its source and conditions, the D whose AL
    it states, and the D derived from its rates (marked)."""
    out = []
    for drafter, what in ((result.get("provenance") or {}).get("acceptance") or {}).items():
        line = f"{drafter} acceptance: {what['label']}{mark(what['source'])}; AL at D={ds_text(what['own_d'])}"
        if what.get("measured_per_k"):
            line += " (measured_per_k: each D measured on its own, none derived)"
        if what.get("derived_d"):
            line += (
                f"; at D={ds_text(what['derived_d'])} derived from its rates{mark(prov.derived_from(what['source']))}"
            )
        out.append(line)
    return out


def interval_cell(b: dict[str, Any]) -> str:
    """A best row's range, `*` where it was widened for a path no published case scored."""
    if "speedup_interval" not in b:
        return "-"
    low, high = b["speedup_interval"]
    unscored = b.get("speedup_interval_derived_on", HELD_OUT.derived_on) != HELD_OUT.derived_on
    return f"[{low:.2f}, {high:.2f}]" + ("*" if unscored else "")


def al_text(b: dict[str, Any]) -> str:
    return "-" if "al" not in b else f"{b['al']:.2f}{mark(b.get('al_source', prov.MEASURED))}"


def acceptance_sources(result: dict[str, Any]) -> str:
    """`measured`, `fake [fake]`, `measured and derived [derived]`: what the page's AL are."""
    acceptance = (result.get("provenance") or {}).get("acceptance") or {}
    sources = sorted({what["source"] for what in acceptance.values()})
    sources += sorted({prov.derived_from(what["source"]) for what in acceptance.values() if what.get("derived_d")})
    return " and ".join(f"{s}{mark(s)}" for s in sources) or prov.MEASURED


def dynamo_lines(result: dict[str, Any]) -> list[str]:
    notes = result.get("dynamo_flags_notes") or {}
    return [
        f"{drafter} for Dynamo's planner and mocker: {flags}" + (f" ({notes[drafter]})" if drafter in notes else "")
        for drafter, flags in (result.get("dynamo_flags") or {}).items()
    ]


def held_text(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def calibration_section(calibration: dict[str, Any]) -> Section:
    """What `calibrate=` fitted on this machine's runs: the step fit, the K=0 tax and T_draft, each
    point's error fitted and held out (whatif.json's `calibration`)."""
    fitted = calibration["fit"]
    fake = mark(prov.FAKE) if (calibration.get("provenance") or {}).get("fake") else ""
    steps = [
        [str(p["batch_size"]), str(p["d"]), str(p["context"]), f"{p['t_ms']:.2f}", f"{p['error']:+.1%}"]
        + [held_text(p["held_out_error"])]
        for p in calibration["points"]
    ]
    tables = [(["B", "D", "context", "measured step (ms)", "fit error", "held out"], steps)]
    tax = calibration.get("k0_tax") or {}
    if tax.get("points"):
        rows = [
            [str(p["batch_size"]), str(p["context"]), f"{p['t_plain_ms']:.2f}", f"{p['t_idle_ms']:.2f}"]
            + [f"{p['tax_ms']:+.2f}", f"{p['error']:+.1%}", held_text(p["held_out_error"])]
            for p in tax["points"]
        ]
        tables.append((["B", "context", "plain (ms)", "idle (ms)", "K=0 tax (ms)", "T_idle fit", "held out"], rows))
    drafted = [
        [kind, p["drafter"], str(p["batch_size"]), str(p["d"]), str(p["context"]), f"{p['t_draft_ms']:.2f}"]
        + [f"{p['t_step_ms']:.2f}", f"{p['error']:+.1%}", held_text(p["held_out_error"])]
        for kind, fit in calibration["t_draft"].items()
        for p in fit.get("points", [])
    ]
    if drafted:
        header = ["T_draft", "drafter", "B", "D", "context", "measured T_draft (ms)", "step (ms)", "fit error"]
        tables.append((header + ["held out"], drafted))
    return Section(
        f"Calibrated on {calibration['source']}{fake}",
        text=[
            f"Step fit: {fitted['hbm_tb_s'] * 1e3:.1f} GB/s, {fitted['tflops']:.3f} TFLOPS, "
            f"{fitted['overhead_ms']:.2f} ms a pass. Fitted beside: {calibration['fitted_beside']}. Errors are "
            "of the step time (T_draft's: of the speculative step it is a share of); held out: that point's "
            "own fit left it out."
        ],
        tables=tables,
    )


def operating_frame(points: list[dict[str, Any]], tp: int) -> pd.DataFrame:
    """The predicted operating points with the 80 % range published absolute rates put on each
    (speclens/gpu_model/model_error.py TOKENS_PER_S_BOUND): a measured rate within
    [predicted / (1 + bound), predicted / (1 - bound)]."""
    frame = pd.DataFrame(operating_rows(points, tp))
    for column in ("tokens_per_s_per_request", "output_tokens_per_s"):
        ranges = [tokens_per_s_interval(value) for value in frame[column]]
        frame[f"{column}_low"] = [low for low, _ in ranges]
        frame[f"{column}_high"] = [high for _, high in ranges]
    return frame


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
            al_text(b),
        ]
        + [f"x{b['speedup']:.2f}"]
        + [interval_cell(b)]
        + ([b.get("al_measured_at", "-")] if by_length else [])
        for b in result["best"]
    ]
    gpu = result["gpu"]["name"]
    answer = Section(
        f"Best per batch size on {gpu}",
        answer=slo_line,
        text=[
            f"tp={result['tp']}, weights={result['weights']}, cost model: {result['cost_model']}. All speedups "
            f"predicted; {result.get('speedup_interval', '')}."
        ]
        + acceptance_lines(result)
        + list(result.get("notes", []))
        + dynamo_lines(result),
        tables=[
            (
                ["B", "context", "best", "AL", "speedup", "80% range"] + (["AL measured at"] if by_length else []),
                best_rows,
            )
        ],
    )
    operating = operating_frame(points, result["tp"])
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
        *([calibration_section(result["calibration"])] if result.get("calibration") else []),
        *([length_section(result["by_length"])] if by_length else []),
        Section("Predicted speedup vs B", charts=[speedup_chart(points, d, c) for c in contexts for d in drafters]),
        Section(
            "Throughput vs interactivity",
            text=[
                "Every point predicted; its bars are the 80% range of a predicted absolute rate, "
                f"where a measured rate lies if the prediction is within ±{TOKENS_PER_S_BOUND:.1%} of it, as scored held out on "
                f"{TOKENS_PER_S_DERIVED_ON} "
                "(benchmarks/published_step_times.py)."
            ],
            charts=fronts,
        ),
    ]
    path = out / WHATIF_PAGE
    path.write_text(
        render_page("speclens whatif", f"{gpu}: predicted from {acceptance_sources(result)} acceptance", sections),
        encoding="utf-8",
    )
    return path
