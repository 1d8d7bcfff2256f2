"""The report's interactive charts as Plotly figure specifications (plain `{"data", "layout"}`
dicts, drawn in the page by plotly.js), each chosen from the shape of its data:

- AL: one D per drafter → bars per domain with CI whiskers, drafters side by side; several D →
  AL-vs-D lines with integer D, small multiples per domain sharing the y-axis;
- acceptance histogram → bars over the integer counts; per-position acceptance → integer
  positions; AL by context position → bars labelled by their token ranges;
- predicted vs measured speedup, each operating point's speedup account as a waterfall, and the
  throughput-interactivity Pareto front across runs;
- AL per segment (thinking, answer) and AL by agent turn;
- AL and tokens per step against the prompts' input length (log scale), one line per drafter and
  D; lengths measured past the target's own window, under a context extension, are marked and named.

A chart with fewer than two points is never drawn: a `Missing` says in one line what would fill it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import pandas as pd

from reports.runs import RunView
from speclens.figures.account import CORRECTIONS, MODEL
from speclens.figures.costs import GAP_TOLERANCE
from speclens.figures.metrics import GroupFigures, PositionBin, length_label
from speclens.figures.summary import ContextWindow

AL_AXIS = "AL (accepted + 1 per drafted step)"
PANEL_COLUMNS = 3
PANEL_HEIGHT = 260


@dataclass
class Chart:
    key: str
    title: str
    figure: dict[str, Any]
    # Domains the page's filter may hide: the traces carry them in `meta`.
    domain_filter: bool = False


@dataclass
class Missing:
    key: str
    title: str
    reason: str


@dataclass
class Points:
    """One series' points and their hover lines, built up before they become a trace."""

    name: str
    x: list[Any] = field(default_factory=list)
    y: list[float] = field(default_factory=list)
    lo: list[float | None] = field(default_factory=list)
    hi: list[float | None] = field(default_factory=list)
    hover: list[str] = field(default_factory=list)

    def add(self, x: Any, y: float, ci: list[float] | None, hover: str) -> None:
        self.x.append(x)
        self.y.append(y)
        self.lo.append(ci[0] if ci else None)
        self.hi.append(ci[1] if ci else None)
        self.hover.append(hover)

    def trace(self, kind: str, **more: Any) -> dict[str, Any]:
        """The Plotly trace of these points with their CI whiskers and hover lines."""
        return {
            "type": kind,
            "name": self.name,
            "x": self.x,
            "y": self.y,
            "error_y": self.error_y(),
            "customdata": self.hover,
            "hovertemplate": hover_template(),
            **more,
        }

    def error_y(self) -> dict[str, Any]:
        plus = [0.0 if h is None else h - y for y, h in zip(self.y, self.hi)]
        minus = [0.0 if lo is None else y - lo for y, lo in zip(self.y, self.lo)]
        return {"type": "data", "symmetric": False, "array": plus, "arrayminus": minus, "thickness": 1.2}


# al_ci95 is None for both (speclens/figures/metrics.py)
NO_CI = "fewer than two requests, or the engine reported counters only"
NO_PAIRED_CI = "fewer than two prompts"  # reports/compare.py


def ci_text(ci: list[float] | None, signed: bool = False, missing: str = NO_CI) -> str:
    """A 95% CI for hover text; `missing` says why there is none."""
    if ci is None or pd.isna(ci[0]):
        return f"no CI ({missing})"
    digits = "+.3f" if signed else ".3f"
    return f"95% CI [{ci[0]:{digits}}, {ci[1]:{digits}}]"


def hover_template() -> str:
    return "%{fullData.name}<br>%{customdata}<extra></extra>"


# CI whiskers on bars, whatever the bar's colour.
WHISKER_COLOUR = "#333333"
# One colour per series name within a chart, whichever panel or trace it is drawn in.
# Plain decoding is one colour on every chart, whichever series come before it.
PLAIN_COLOUR = "#444444"
PLAIN_NAMES = ("plain", "plain decoding", "none")
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


def coloured(traces: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each series (traces of one name, e.g. a drafter's line in every domain's panel) in one colour;
    traces that set their own line colour (reference lines) keep it."""
    names: dict[str, str] = {name: PLAIN_COLOUR for name in PLAIN_NAMES}
    for trace in traces:
        if trace.get("type") == "waterfall" or "color" in (trace.get("line") or {}):
            continue
        colour = names.setdefault(trace["name"], PALETTE[(len(names) - len(PLAIN_NAMES)) % len(PALETTE)])
        trace["marker"] = {**(trace.get("marker") or {}), "color": colour}
        if trace.get("type") == "scatter":
            trace["line"] = {**(trace.get("line") or {}), "color": colour}
        if "error_y" in trace:
            # a bar's whisker in the bar's own colour vanishes where it runs inside the bar
            whisker = colour if trace.get("type") == "scatter" else WHISKER_COLOUR
            trace["error_y"] = {**trace["error_y"], "color": whisker}
    return traces


def chart_domains(chart: Chart) -> set[str]:
    """The domains a filtered chart's traces carry: per point (bars) or per panel (small multiples)."""
    metas = [trace.get("meta") or {} for trace in chart.figure["data"]]
    return {d for meta in metas for d in meta.get("domains") or [meta.get("domain")] if d}


def count_points(chart: Chart) -> int:
    return sum(len(trace.get("y") or trace.get("x") or []) for trace in chart.figure["data"])


def drawn(chart: Chart, reason: str) -> Chart | Missing:
    """The chart, or why it is not drawn where it would show fewer than two points."""
    return chart if count_points(chart) >= 2 else Missing(chart.key, chart.title, reason)


def base_layout(title: str, **more: Any) -> dict[str, Any]:
    return {
        "title": {"text": title, "x": 0, "xanchor": "left"},
        "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
        "legend": {"orientation": "h", "y": -0.2},
        "hovermode": "closest",
        "height": 380,
        **more,
    }


# -- AL per domain / AL vs D --------------------------------------------------------------------


def series_columns(curves: pd.DataFrame) -> list[str]:
    """What one series is drawn per: the drafter, then each mode axis that varies."""
    return ["drafter"] + [c for c in ("temperature", "chat_template_kwargs", "setting") if curves[c].nunique() > 1]


def series_name(key: tuple, columns: list[str], d: int | None = None) -> str:
    parts = []
    for column, value in zip(columns, key):
        if column == "temperature":
            parts.append(f"T={value:g}")
        elif column == "chat_template_kwargs":
            parts.append(value or "template defaults")
        elif column == "setting":
            parts.append(value or "engine defaults")
        else:
            parts.append(str(value))
    return " ".join(parts) + (f" d={d}" if d is not None else "")


def group_counts(runs: list[RunView]) -> dict[tuple, tuple[int, int]]:
    """(drafter, d, domain, temperature, template, setting) -> (requests, drafted steps), for hover text."""
    return {
        (run.summary.drafter, run.summary.d, domain, run.temperature, run.template, run.setting): (
            g.n_requests,
            g.n_steps,
        )
        for run in runs
        for domain, g in run.summary.groups().items()
    }


def ordered_domains(curves: pd.DataFrame) -> list[str]:
    return sorted(curves.domain.unique(), key=lambda d: (d != "all", d))


def al_chart(curves: pd.DataFrame, runs: list[RunView]) -> Chart | Missing:
    """AL per domain as bars (one D per drafter) or AL vs D lines in small multiples (several D)."""
    key, title = "al", "AL per domain"
    whole = curves[curves.segment == "all"]
    if whole.empty:
        return Missing(key, title, "no speculative run: measure a drafter (drafter=ngram d=3) to draw AL")
    whole = whole[whole.al.notna()]  # a drafter that never drafted has no AL (its tokens per step say so)
    if whole.empty:
        return Missing(key, title, "no drafted step: the drafters measured proposed nothing, so no AL to draw")
    columns = series_columns(whole)
    several_d = whole.groupby(columns).d.nunique().max() > 1
    counts = group_counts(runs)
    if several_d:
        return drawn(
            al_vs_d_panels(whole, columns, counts),
            "one point per panel: measure more draft lengths (d=1,2,3,5) to draw AL against D",
        )
    return drawn(
        al_bars(whole, columns, counts),
        "one drafter at one D over one domain: measure more drafters, D or domains to compare",
    )


def _point_hover(row: Any, counts: dict[tuple, tuple[int, int]]) -> str:
    n = counts.get((row.drafter, row.d, row.domain, row.temperature, row.chat_template_kwargs, row.setting))
    ci = None if pd.isna(row.al_ci95_lo) else [row.al_ci95_lo, row.al_ci95_hi]
    amount = f"n = {n[0]} requests, {n[1]} drafted steps" if n else row.source
    return f"{row.domain}, D={row.d}: AL {row.al:.3f}<br>{ci_text(ci)}<br>{amount}"


def al_bars(whole: pd.DataFrame, columns: list[str], counts: dict) -> Chart:
    domains = ordered_domains(whole)
    traces = []
    for series_key, group in whole.groupby(columns, sort=True):
        series_key = series_key if isinstance(series_key, tuple) else (series_key,)
        for d, at_d in group.groupby("d", sort=True):
            points = Points(series_name(series_key, columns, int(d)))
            order = {domain: i for i, domain in enumerate(domains)}
            for row in at_d.assign(_order=at_d.domain.map(order)).sort_values("_order").itertuples():
                ci = None if pd.isna(row.al_ci95_lo) else [float(row.al_ci95_lo), float(row.al_ci95_hi)]
                points.add(row.domain, float(row.al), ci, _point_hover(row, counts))
            traces.append(points.trace("bar", meta={"domains": points.x}))
    layout = base_layout(
        "AL per domain (bars: AL, whiskers: 95% CI over requests)",
        barmode="group",
        xaxis={"type": "category", "categoryorder": "array", "categoryarray": domains, "title": {"text": "domain"}},
        yaxis={"title": {"text": AL_AXIS}, "rangemode": "tozero"},
    )
    return Chart("al", "AL per domain", {"data": coloured(traces), "layout": layout}, domain_filter=True)


def panel_axes(index: int, count: int) -> tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The axis suffix of small multiple `index` of `count`, its x and y axes and its title."""
    columns = min(PANEL_COLUMNS, count)
    rows = math.ceil(count / columns)
    row, column = divmod(index, columns)
    gap_x, gap_y = 0.06, 0.12 / rows
    x0, x1 = column / columns + gap_x / 2, (column + 1) / columns - gap_x / 2
    y1 = 1 - row / rows - gap_y
    y0 = 1 - (row + 1) / rows + gap_y / 2
    suffix = "" if index == 0 else str(index + 1)
    # "D" under the bottom panel of each column only: between rows it ran into the next panel's title
    bottom = index + columns >= count
    xaxis = {"domain": [x0, x1], "anchor": f"y{suffix}", "dtick": 1, "title": {"text": "D" if bottom else ""}}
    yaxis = {"domain": [y0, y1], "anchor": f"x{suffix}", "title": {"text": "AL" if column == 0 else ""}}
    if index:
        yaxis["matches"] = "y"
    return suffix, xaxis, yaxis, {"x": (x0 + x1) / 2, "y": y1}


def al_vs_d_panels(whole: pd.DataFrame, columns: list[str], counts: dict) -> Chart:
    domains = ordered_domains(whole)
    height = PANEL_HEIGHT * math.ceil(len(domains) / min(PANEL_COLUMNS, len(domains))) + 120
    layout = base_layout(
        "AL vs D per domain (95% CI over requests; open markers: replayed or estimated)",
        height=height,
        annotations=[],
        # just under the bottom row's "D" (the default's -0.2 of a tall grid is far below it)
        legend={"orientation": "h", "y": -70 / (height - 100)},
    )
    traces = []
    for index, domain in enumerate(domains):
        suffix, xaxis, yaxis, top = panel_axes(index, len(domains))
        layout[f"xaxis{suffix}"], layout[f"yaxis{suffix}"] = xaxis, yaxis
        layout["annotations"].append(
            {
                "text": domain,
                "x": top["x"],
                "y": top["y"],
                "xref": "paper",
                "yref": "paper",
                "showarrow": False,
                "yanchor": "bottom",
                "font": {"size": 13},
            }
        )
        for series_key, group in whole[whole.domain == domain].groupby(columns, sort=True):
            series_key = series_key if isinstance(series_key, tuple) else (series_key,)
            group = group.sort_values("d")
            points = Points(series_name(series_key, columns))
            for row in group.itertuples():
                ci = None if pd.isna(row.al_ci95_lo) else [row.al_ci95_lo, row.al_ci95_hi]
                points.add(int(row.d), float(row.al), ci, _point_hover(row, counts))
            traces.append(
                points.trace(
                    "scatter",
                    mode="lines+markers",
                    legendgroup=points.name,
                    showlegend=index == 0,
                    marker={"symbol": ["circle" if s == "measured" else "circle-open" for s in group.source]},
                    xaxis=f"x{suffix}",
                    yaxis=f"y{suffix}",
                    meta={"domain": domain},
                )
            )
    return Chart("al", "AL vs D per domain", {"data": coloured(traces), "layout": layout}, domain_filter=True)


# -- acceptance detail ----------------------------------------------------------------------------


def histogram_chart(runs: list[RunView]) -> Chart | Missing:
    """The share of drafted steps accepting 0, 1, …, D tokens, as bars per run."""
    traces = []
    for run in runs:
        counts = run.summary.acceptance_histogram
        if not counts or not sum(counts):
            continue
        total = sum(counts)
        traces.append(
            {
                "type": "bar",
                "name": run.label,
                "x": list(range(len(counts))),
                "y": [c / total for c in counts],
                "customdata": [
                    f"{k} accepted: {c} of {total} drafted steps ({c / total:.1%})" for k, c in enumerate(counts)
                ],
                "hovertemplate": hover_template(),
            }
        )
    layout = base_layout(
        "Acceptance histogram",
        barmode="group",
        xaxis={"dtick": 1, "title": {"text": "draft tokens accepted in a drafted step"}},
        yaxis={"title": {"text": "share of drafted steps"}, "tickformat": ".0%"},
    )
    chart = Chart("histogram", "Acceptance histogram", {"data": coloured(traces), "layout": layout})
    return drawn(chart, "no per-step records (a server that reports request totals only): nothing to count")


def per_position_chart(runs: list[RunView]) -> Chart | Missing:
    """P(the first k drafts all accepted) at each draft position k = 1 … D, per run."""
    traces = []
    for run in runs:
        rates = run.summary.per_position_acceptance
        if not rates:
            continue
        traces.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": run.label,
                "x": list(range(1, len(rates) + 1)),
                "y": rates,
                "customdata": [
                    f"position {k}: {r:.3f} of {run.summary.n_steps} drafted steps" for k, r in enumerate(rates, 1)
                ],
                "hovertemplate": hover_template(),
            }
        )
    layout = base_layout(
        "Per-position acceptance",
        xaxis={"dtick": 1, "title": {"text": "draft position k"}},
        yaxis={"title": {"text": "P(drafts 1..k all accepted)"}, "range": [0, 1.02]},
    )
    chart = Chart("per_position", "Per-position acceptance", {"data": coloured(traces), "layout": layout})
    return drawn(chart, "one draft position only: measure d=2 or more to see acceptance fall along the draft")


def position_label(start: int, end: int | None) -> str:
    return f"{start:,}+" if end is None else f"{start:,}–{end - 1:,}"


def al_by_position_chart(runs: list[RunView]) -> Chart | Missing:
    """AL of the steps starting in each context-length bin, bins labelled by their token ranges."""
    return binned_al_chart(
        runs,
        "al_by_position",
        "AL by context position",
        lambda run: run.summary.al_by_position,
        ("context", "context length at the step (tokens)"),
        "tokens of context: longer prompts (dataset=long_context) would spread it",
    )


def al_by_output_position_chart(runs: list[RunView]) -> Chart | Missing:
    """AL of the steps by how many tokens the answer had at the step's start."""
    return binned_al_chart(
        runs,
        "al_by_output_position",
        "AL by output position",
        lambda run: run.summary.al_by_output_position,
        ("output", "generated tokens at the step"),
        "generated tokens: a larger sampling.max_tokens would spread it",
    )


def binned_al_chart(
    runs: list[RunView],
    key: str,
    title: str,
    bins_of: Callable[[RunView], list[PositionBin] | None],
    axis: tuple[str, str],
    hint: str,
) -> Chart | Missing:
    traces, labels = [], {}
    for run in runs:
        bins = bins_of(run)
        if not bins or run.summary.d is None:
            continue
        x = [position_label(b.from_, b.to) for b in bins]
        labels.update({label: b.from_ for label, b in zip(x, bins)})
        traces.append(
            {
                "type": "bar",
                "name": run.label,
                "x": x,
                "y": [b.al for b in bins],
                "customdata": [
                    f"{axis[0]} {label} tokens: AL {b.al:.3f} over {b.n_steps} steps" for label, b in zip(x, bins)
                ],
                "hovertemplate": hover_template(),
            }
        )
    order = sorted(labels, key=labels.get)
    layout = base_layout(
        title,
        barmode="group",
        xaxis={"type": "category", "categoryorder": "array", "categoryarray": order, "title": {"text": axis[1]}},
        yaxis={"title": {"text": "AL"}, "rangemode": "tozero"},
    )
    chart = Chart(key, title, {"data": coloured(traces), "layout": layout})
    if len(order) < 2:
        return Missing(chart.key, chart.title, f"every drafted step started at {order[0] if order else 'no'} {hint}")
    return chart


def al_per_request_chart(runs: list[RunView]) -> Chart | Missing:
    """The spread of the requests' own ALs per run: box p10-p90 around the median, whiskers min-max."""
    traces = []
    for run in runs:
        spread = run.summary.al_per_request
        if not spread or run.summary.d is None:
            continue
        traces.append(
            {
                "type": "box",
                "name": run.label,
                "x": [run.label],
                "q1": [spread["p10"]],
                "median": [spread["p50"]],
                "q3": [spread["p90"]],
                "lowerfence": [spread["min"]],
                "upperfence": [spread["max"]],
                "hoverinfo": "skip",
            }
        )
    layout = base_layout(
        "AL per request",
        showlegend=False,
        xaxis={"type": "category", "title": {"text": "box: p10 to p90 around the median; whiskers: min to max"}},
        yaxis={"title": {"text": "a request's own AL"}},
    )
    chart = Chart("al_per_request", "AL per request", {"data": coloured(traces), "layout": layout})
    if not traces:
        return Missing(chart.key, chart.title, "no run has drafted requests with a per-request AL")
    return chart


# -- speedups ------------------------------------------------------------------------------------


def speedup_points(runs: list[RunView]) -> list[tuple[str, int, float, float]]:
    """(run, B, measured, predicted) of every operating point that has both speedups."""
    return [
        (run.label, p.batch_size, p.speedup, p.predicted_speedup)
        for run in runs
        for p in run.summary.operating_points
        if p.speedup is not None and p.predicted_speedup is not None
    ]


def speedup_chart(runs: list[RunView]) -> Chart | Missing:
    """Predicted against measured speedup per run and batch size, with the y = x line."""
    points = speedup_points(runs)
    if not points:
        return Missing(
            "speedup", "Measured vs predicted speedup", "needs baseline=true (plain decoding and step costs)"
        )
    values = [v for _, _, m, p in points for v in (m, p)]
    lo, hi = min(values) * 0.9, max(values) * 1.1
    traces = [
        {
            "type": "scatter",
            "mode": "markers+text",
            "name": label,
            "x": [m for name, _, m, _ in points if name == label],
            "y": [p for name, _, _, p in points if name == label],
            "text": [f"B={b}" for name, b, _, _ in points if name == label],
            "textposition": "top right",
            "customdata": [
                f"B={b}: measured x{m:.3f}, predicted x{p:.3f} ({p / m - 1:+.1%})"
                for name, b, m, p in points
                if name == label
            ],
            "hovertemplate": hover_template(),
        }
        for label in sorted({name for name, *_ in points})
    ]
    traces.append(
        {
            "type": "scatter",
            "mode": "lines",
            "name": "predicted = measured",
            "x": [lo, hi],
            "y": [lo, hi],
            "line": {"dash": "dash", "color": "#444", "width": 1},
            "hoverinfo": "skip",
        }
    )
    layout = base_layout(
        f"Predicted vs measured speedup (within {GAP_TOLERANCE:.0%} of the line: the model holds)",
        xaxis={"title": {"text": "measured speedup"}},
        yaxis={"title": {"text": "predicted speedup"}},
    )
    return Chart("speedup", "Measured vs predicted speedup", {"data": coloured(traces), "layout": layout})


def waterfall_chart(key: str, title: str, factors: dict[str, float], measured: float) -> Chart:
    """A speedup account: the model's prediction, each correction as the step it takes the running
    product, and the measured speedup."""
    names = [MODEL, *CORRECTIONS]
    running, steps = factors[MODEL], [factors[MODEL]]
    for name in CORRECTIONS:
        after = running * factors[name]
        steps.append(after - running)
        running = after
    steps.append(measured)
    labels = [n.replace("_", " ") for n in names] + ["measured"]
    trace = {
        "type": "waterfall",
        "name": title,
        "x": labels,
        "y": steps,
        "measure": ["absolute", *["relative"] * len(CORRECTIONS), "total"],
        "customdata": [f"{MODEL.replace('_', ' ')}: x{factors[MODEL]:.3f}"]
        + [f"{n.replace('_', ' ')}: x{factors[n]:.3f}" for n in CORRECTIONS]
        + [f"measured: x{measured:.3f}"],
        "hovertemplate": "%{customdata}<extra></extra>",
        "increasing": {"marker": {"color": "#2a9d4b"}},
        "decreasing": {"marker": {"color": "#c0392b"}},
        "totals": {"marker": {"color": "#34495e"}},
    }
    levels = [factors[MODEL]]
    for name in CORRECTIONS:
        levels.append(levels[-1] * factors[name])
    low, high = min(levels + [measured]), max(levels + [measured])
    pad = max(0.02, (high - low) * 0.5)
    layout = base_layout(
        title, showlegend=False, height=320, yaxis={"title": {"text": "speedup"}, "range": [low - pad, high + pad]}
    )
    return Chart(key, title, {"data": [trace], "layout": layout})


# Predicted operating points carry their 80 % ranges in these columns (reports/whatif_page.py
# operating_frame); measured ones do not, and are drawn without bars.
RANGE_COLUMNS = {
    "tokens_per_s_per_request_low",
    "tokens_per_s_per_request_high",
    "output_tokens_per_s_low",
    "output_tokens_per_s_high",
}


def range_bars(group: pd.DataFrame) -> dict[str, Any]:
    """Asymmetric error bars on both axes from the range columns."""

    def bars(column: str) -> dict[str, Any]:
        value = group[column]
        high, low = group[f"{column}_high"] - value, value - group[f"{column}_low"]
        return {"type": "data", "symmetric": False, "array": list(high), "arrayminus": list(low), "thickness": 1}

    return {"error_x": bars("tokens_per_s_per_request"), "error_y": bars("output_tokens_per_s")}


def pareto_chart(points: pd.DataFrame, front: pd.DataFrame) -> Chart | Missing:
    """Throughput against interactivity across every run, one series per mechanism, the Pareto
    front dashed and its points labelled by batch size (and D); every point says its own on hover
    (labels on all of them overlap where points crowd)."""
    key, title = "pareto", "Throughput vs interactivity"
    if len(points) < 2:
        return Missing(
            key, title, "needs two or more measured operating points: batch_sizes=[1,4,16] with baseline=true"
        )
    traces = []
    for mechanism, group in points.groupby("mechanism", sort=True):
        group = group.sort_values(["d", "batch_size"], na_position="first")
        labels = [f"B={r.batch_size}" + ("" if pd.isna(r.d) else f" d={int(r.d)}") for r in group.itertuples()]
        on_front = group.index.isin(front.index)
        hover = [
            f"{label}: {x:.1f} tokens/s per request, {y:.1f} tokens/s in all"
            for label, x, y in zip(labels, group.tokens_per_s_per_request, group.output_tokens_per_s)
        ]
        trace = {
            "type": "scatter",
            "mode": "markers+text",
            "name": mechanism,
            "x": list(group.tokens_per_s_per_request),
            "y": list(group.output_tokens_per_s),
            "text": [label if shown else "" for label, shown in zip(labels, on_front)],
            "textposition": "top right",
            "customdata": hover,
            "hovertemplate": hover_template(),
        }
        if RANGE_COLUMNS <= set(group.columns):
            trace |= range_bars(group)
            trace["customdata"] = [
                f"{h}; 80% range per request [{r.tokens_per_s_per_request_low:.1f}, "
                f"{r.tokens_per_s_per_request_high:.1f}], in all [{r.output_tokens_per_s_low:.1f}, "
                f"{r.output_tokens_per_s_high:.1f}]"
                for h, r in zip(hover, group.itertuples())
            ]
        traces.append(trace)
    if len(front) > 1:
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": "Pareto front",
                "x": list(front.tokens_per_s_per_request),
                "y": list(front.output_tokens_per_s),
                "line": {"dash": "dash", "color": "#222", "width": 1},
                "hoverinfo": "skip",
            }
        )
    layout = base_layout(
        "Throughput vs interactivity (measured, all prompts)",
        xaxis={"title": {"text": "interactivity: output tokens/s per request"}},
        yaxis={"title": {"text": "throughput: output tokens/s"}},
    )
    return Chart(key, title, {"data": coloured(traces), "layout": layout})


# -- segments and turns ---------------------------------------------------------------------------


def segment_chart(runs: list[RunView]) -> Chart | Missing:
    """AL per segment (thinking, answer) per run, with CI whiskers."""
    traces = []
    for segment in ("thinking", "answer"):
        points = Points(segment)
        for run in runs:
            f = (run.summary.by_segment or {}).get(segment)
            if f is None or f.al is None:
                continue
            share = "-" if f.share_of_output_tokens is None else f"{f.share_of_output_tokens:.0%}"
            points.add(
                run.label,
                f.al,
                f.al_ci95,
                f"{run.label}, {segment}: AL {f.al:.3f}<br>{ci_text(f.al_ci95)}<br>"
                f"{f.n_steps} steps, {share} of output tokens",
            )
        if points.x:
            traces.append(points.trace("bar"))
    layout = base_layout(
        "AL per segment",
        barmode="group",
        xaxis={"type": "category"},
        yaxis={"title": {"text": AL_AXIS}, "rangemode": "tozero"},
    )
    chart = Chart("segments", "Thinking vs answer", {"data": coloured(traces), "layout": layout})
    return drawn(chart, "one segment measured: outputs never left thinking, or never entered it")


def turn_chart(runs: list[RunView]) -> Chart | Missing:
    """AL against the assistant-turn index of agent trajectories, one line per run."""
    traces = []
    for run in runs:
        turns = sorted((int(k), g) for k, g in (run.summary.by_turn or {}).items() if g.al is not None)
        if not turns:
            continue
        points = Points(run.label)
        for turn, g in turns:
            points.add(
                turn,
                g.al,
                g.al_ci95,
                f"turn {turn}: AL {g.al:.3f}<br>{ci_text(g.al_ci95)}<br>n = {g.n_requests} requests, {g.n_steps} steps",
            )
        traces.append(points.trace("scatter", mode="lines+markers"))
    layout = base_layout(
        "AL by agent turn", xaxis={"dtick": 1, "title": {"text": "assistant turn"}}, yaxis={"title": {"text": "AL"}}
    )
    chart = Chart("turns", "AL by agent turn", {"data": coloured(traces), "layout": layout})
    return drawn(chart, "one assistant turn per trajectory: nothing to follow across turns")


# -- context length -------------------------------------------------------------------------------


def extension_at(window: ContextWindow | None, input_tokens: int | None) -> str | None:
    """The context extension figures at this input length were measured under: the run's, where the
    length is past the target's own window (as the run's result table marks it); else None."""
    if window is None or not window.extended or input_tokens is None or window.native is None:
        return None
    return window.extension if input_tokens > window.native else None


def extension_over(window: ContextWindow | None, lengths: Iterable[int]) -> str | None:
    """The context extension a group of prompts of these input lengths was measured under in part
    or whole: the extension's name, followed by the lengths past the target's own window where
    they are not all of them ("yarn x4 from 8192 at 32k"); None where none is past it."""
    lengths = sorted(set(lengths))
    past = [tokens for tokens in lengths if extension_at(window, tokens) is not None]
    if not past:
        return None
    return window.extension + ("" if past == lengths else " at " + ", ".join(length_label(t) for t in past))


def length_figures(run: RunView) -> list[tuple[str, GroupFigures]]:
    """A speculative run's length buckets that have an AL, shortest first."""
    if run.summary.d is None:
        return []
    found = [(label, g) for label, g in (run.summary.by_length or {}).items() if g.al is not None]
    return sorted(found, key=lambda item: item[1].input_tokens or 0)


def length_series_names(runs: list[RunView]) -> dict[int, str]:
    """Each run's line name: its drafter and D, with the temperature where runs differ in it."""
    several = len({run.temperature for run in runs}) > 1
    return {id(run): run.label + (f" T={run.temperature:g}" if several else "") for run in runs}


# The two figures drawn against length: (key, title, value, its CI, its name in hover text, y-axis title).
LENGTH_FIGURES = {
    "al": ("al_by_length", "AL by context length", "al", "al_ci95", "AL", AL_AXIS),
    "tokens_per_step": (
        "tokens_per_step_by_length",
        "Tokens per step by context length",
        "tokens_per_step",
        "tokens_per_step_ci95",
        "tokens/step",
        "tokens per target step",
    ),
}
EXTENDED_SYMBOL = "diamond-open"


def length_chart(runs: list[RunView], figure: str = "al") -> Chart | Missing:
    """AL (or tokens per step) against the input length, one line per drafter and D with 95% CI
    whiskers; points past the target's own window (measured under its context extension) drawn
    as open diamonds, the extension named in their hover and the native window as a dashed line."""
    key, title, value, ci_name, shown, axis = LENGTH_FIGURES[figure]
    names = length_series_names(runs)
    traces, natives, values, ticks = [], set(), [], {}
    for run in runs:
        window = run.summary.context_window
        points, symbols = Points(names[id(run)]), []
        for label, g in length_figures(run):
            y = getattr(g, value)
            if y is None or g.input_tokens is None:
                continue
            extension = extension_at(window, g.input_tokens)
            ci = getattr(g, ci_name)
            hover = f"{label} ({g.input_tokens:,} input tokens): {shown} {y:.3f}<br>{ci_text(ci)}"
            hover += f"<br>n = {g.n_requests} requests, {g.n_steps} drafted steps"
            if extension is not None:
                hover += f"<br>extended: past the native window ({window.native:,}), measured with {extension}"
                natives.add(window.native)
            points.add(g.input_tokens, y, ci, hover)
            ticks[g.input_tokens] = label
            symbols.append(EXTENDED_SYMBOL if extension is not None else "circle")
            values += [y, *(ci or [])]
        if points.x:
            traces.append(points.trace("scatter", mode="lines+markers", marker={"symbol": symbols, "size": 9}))
    layout = base_layout(
        title + " (95% CI over requests" + ("; open diamonds: extended context)" if natives else ")"),
        xaxis={
            "type": "log",
            "tickvals": sorted(ticks),
            "ticktext": [ticks[t] for t in sorted(ticks)],
            "title": {"text": "input tokens (log scale)"},
        },
        yaxis={"title": {"text": axis}},
    )
    chart = drawn(
        Chart(key, title, {"data": coloured(traces), "layout": layout}),
        "one length measured: several (dataset.input_tokens=[1000,8000,32000]) draw it against length",
    )
    if isinstance(chart, Chart):  # the window's line is no measured point: added once the chart is drawn
        chart.figure["data"] += [native_window_trace(n, min(values), max(values)) for n in sorted(natives)]
    return chart


def native_window_trace(native: int, low: float, high: float) -> dict[str, Any]:
    """A dashed vertical line at the target's own window: lengths right of it ran extended."""
    return {
        "type": "scatter",
        "mode": "lines",
        "name": f"native window {native:,} (right of it: extended)",
        "x": [native, native],
        "y": [low, high],
        "line": {"dash": "dash", "color": "#444", "width": 1},
        "hoverinfo": "skip",
    }


# -- comparisons and history --------------------------------------------------------------------


def forest_chart(table: pd.DataFrame) -> Chart | Missing:
    """Candidate − baseline AL per drafter, D and domain (whole outputs) with its paired 95% CI, one
    row each; significant changes (the CI excludes zero) in colour, the rest grey."""
    whole = table[table.segment == "all"].sort_values(["drafter", "d", "domain"], key=lambda c: c.map(str))
    if whole.empty:
        return Missing("forest", "AL differences", "no (drafter, D) measured on both sides")
    # a group past the target's own window was measured under a context extension: said on its row
    rows = [
        f"{r.drafter} d={r.d} · {r.domain}" + (" (extended)" if getattr(r, "context_extension", "") else "")
        for r in whole.itertuples()
    ]
    traces = []
    for label, significant, colour in (("significant", True, "#c0392b"), ("not significant", False, "#8a8a8a")):
        part = [(row, r) for row, r in zip(rows, whole.itertuples()) if bool(r.significant) == significant]
        if not part:
            continue
        diff = [r.al_diff for _, r in part]
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": label,
                "x": diff,
                "y": [row for row, _ in part],
                "error_x": {
                    "type": "data",
                    "symmetric": False,
                    "array": [0 if pd.isna(r.diff_ci95_hi) else r.diff_ci95_hi - r.al_diff for _, r in part],
                    "arrayminus": [0 if pd.isna(r.diff_ci95_lo) else r.al_diff - r.diff_ci95_lo for _, r in part],
                    "color": colour,
                },
                "marker": {"color": colour, "size": 9},
                "customdata": [
                    f"{row}: baseline {r.baseline_al:.3f} → candidate {r.candidate_al:.3f}<br>difference "
                    f"{r.al_diff:+.3f}, {ci_text([r.diff_ci95_lo, r.diff_ci95_hi], signed=True, missing=NO_PAIRED_CI)}, {r.n_requests} prompts"
                    + (f"<br>measured with {r.context_extension}" if getattr(r, "context_extension", "") else "")
                    for row, r in part
                ],
                "hovertemplate": "%{customdata}<extra></extra>",
            }
        )
    layout = base_layout(
        "AL difference, candidate − baseline (paired 95% CI over prompts)",
        height=max(260, 28 * len(rows) + 140),
        xaxis={"title": {"text": "AL difference"}, "zeroline": True, "zerolinecolor": "#333", "zerolinewidth": 1},
        yaxis={"type": "category", "categoryorder": "array", "categoryarray": rows[::-1], "automargin": True},
    )
    return Chart("forest", "AL differences", {"data": traces, "layout": layout})


def trend_chart(history: pd.DataFrame) -> Chart | Missing:
    """AL per night over all prompts, one line per (drafter, D, engine setting); regressed nights marked."""
    pooled = history[history.domain == "all"].sort_values("night")
    pooled = pooled.assign(setting=pooled.setting.fillna("")) if "setting" in pooled else pooled.assign(setting="")
    if pooled.night.nunique() < 2:
        return Missing("trend", "Nightly AL", "one night so far: the trend starts with the second")
    traces = []
    for (drafter, d, setting), g in pooled.groupby(["drafter", "d", "setting"], sort=True):
        regressed = g.regressed.eq(True).tolist() if "regressed" in g else [False] * len(g)
        traces.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": f"{drafter} d={d}" + (f" ({setting})" if setting else ""),
                "x": [str(n) for n in g.night],
                "y": list(g.al),
                "marker": {
                    "symbol": ["x" if r else "circle" for r in regressed],
                    "size": [12 if r else 7 for r in regressed],
                },
                "customdata": [
                    f"{n}: AL {al:.3f}" + (" (regression)" if r else "") for n, al, r in zip(g.night, g.al, regressed)
                ],
                "hovertemplate": hover_template(),
            }
        )
    layout = base_layout(
        "Nightly AL, all prompts (x: a regression)",
        xaxis={"type": "category", "title": {"text": "night"}},
        yaxis={"title": {"text": "AL"}},
    )
    return Chart("trend", "Nightly AL", {"data": coloured(traces), "layout": layout})
