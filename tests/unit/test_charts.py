"""The report's chart choice (reports/plotly_charts.py): bars for one D per drafter, lines for several,
bars over integer counts, integer positions, token-range bins; never a chart of one point; and
golden chart specifications (the Plotly figure dicts, not pixels)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pandas as pd
import pytest

from reports import plotly_charts
from reports.curves import CURVE_COLUMNS
from speclens.figures.metrics import PositionBin
from tests.unit.test_commands_fake import check_golden


def curve(drafter: str, d: int, domain: str, al: float, ci: tuple[float, float] | None = (0.1, 0.1)) -> dict:
    lo, hi = (al - ci[0], al + ci[1]) if ci else (None, None)
    return dict(zip(CURVE_COLUMNS, [drafter, d, domain, al, lo, hi, al - 0.2, "measured", 0.0, "all", ""]))


def frame(*rows: dict) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=CURVE_COLUMNS)


def run(label: str, d: int, histogram=None, per_position=None, bins=()) -> SimpleNamespace:
    summary = SimpleNamespace(
        label=label,
        d=d,
        n_steps=10,
        acceptance_histogram=histogram,
        per_position_acceptance=per_position,
        al_by_position=list(bins),
    )
    return SimpleNamespace(summary=summary, label=label)


def golden(name: str, chart: plotly_charts.Chart) -> None:
    check_golden(name, json.dumps(chart.figure, indent=1, sort_keys=True) + "\n")


def test_one_d_per_drafter_gives_bars_per_domain_with_ci_whiskers():
    curves = frame(
        curve("ngram", 3, "all", 2.5),
        curve("ngram", 3, "coding", 2.8),
        curve("eagle3", 5, "all", 3.1, ci=(0.2, 0.3)),
        curve("eagle3", 5, "coding", 3.4, ci=None),
    )
    chart = plotly_charts.al_chart(curves, [])
    assert isinstance(chart, plotly_charts.Chart) and chart.title == "AL per domain" and chart.domain_filter
    traces = chart.figure["data"]
    assert [t["type"] for t in traces] == ["bar", "bar"]
    assert [t["name"] for t in traces] == ["eagle3 d=5", "ngram d=3"]
    assert traces[0]["x"] == ["all", "coding"] and traces[0]["y"] == [3.1, 3.4]
    assert traces[0]["error_y"]["array"] == [pytest.approx(0.3), 0.0]  # no CI: no whisker
    assert traces[0]["marker"]["color"] != traces[1]["marker"]["color"]
    golden("chart_al_bars.json", chart)


def test_several_d_give_lines_with_integer_d_in_small_multiples_sharing_the_y_axis():
    curves = frame(
        *(curve("ngram", d, dom, 1.5 + d / 10) for d in (1, 2, 3) for dom in ("all", "coding", "math", "chat"))
    )
    chart = plotly_charts.al_chart(curves, [])
    assert chart.title == "AL vs D per domain"
    layout = chart.figure["layout"]
    assert [a["text"] for a in layout["annotations"]] == ["all", "chat", "coding", "math"]
    assert {layout[f"xaxis{s}"]["dtick"] for s in ("", "2", "3", "4")} == {1}
    assert all(layout[f"yaxis{s}"]["matches"] == "y" for s in ("2", "3", "4"))
    traces = chart.figure["data"]
    assert [t["xaxis"] for t in traces] == ["x", "x2", "x3", "x4"] and traces[0]["x"] == [1, 2, 3]
    assert [t["showlegend"] for t in traces] == [True, False, False, False]
    assert len({t["line"]["color"] for t in traces}) == 1  # one drafter, one colour in every panel
    golden("chart_al_lines.json", chart)


def test_no_chart_is_drawn_from_one_point():
    one = plotly_charts.al_chart(frame(curve("ngram", 3, "all", 2.5)), [])
    assert isinstance(one, plotly_charts.Missing) and "one drafter at one D over one domain" in one.reason
    per_position = plotly_charts.per_position_chart([run("ngram d=1", 1, per_position=[0.4])])
    assert isinstance(per_position, plotly_charts.Missing) and "d=2 or more" in per_position.reason
    bins = [PositionBin(0, 256, 10, 2.0)]
    position = plotly_charts.al_by_position_chart([run("ngram d=3", 3, bins=bins)])
    assert isinstance(position, plotly_charts.Missing) and "0–255" in position.reason
    assert isinstance(plotly_charts.al_chart(frame(), []), plotly_charts.Missing)
    assert isinstance(plotly_charts.speedup_chart([]), plotly_charts.Missing)


def test_counts_are_bars_positions_are_integers_and_context_bins_are_token_ranges():
    runs = [
        run(
            "ngram d=3", 3, [1, 2, 3, 4], [0.9, 0.7, 0.4], [PositionBin(0, 256, 6, 2.0), PositionBin(512, None, 4, 1.5)]
        )
    ]
    histogram = plotly_charts.histogram_chart(runs)
    assert histogram.figure["data"][0]["type"] == "bar" and histogram.figure["data"][0]["x"] == [0, 1, 2, 3]
    assert histogram.figure["data"][0]["y"] == [0.1, 0.2, 0.3, 0.4]
    assert histogram.figure["layout"]["xaxis"]["dtick"] == 1
    per_position = plotly_charts.per_position_chart(runs)
    assert per_position.figure["data"][0]["x"] == [1, 2, 3] and per_position.figure["layout"]["xaxis"]["dtick"] == 1
    position = plotly_charts.al_by_position_chart(runs)
    assert position.figure["data"][0]["x"] == ["0–255", "512+"]
    assert position.figure["layout"]["xaxis"]["categoryarray"] == ["0–255", "512+"]


def test_a_speedup_account_waterfall_closes_on_the_measured_speedup():
    factors = {
        "steady_state_model": 1.5,
        "prefill": 0.9,
        "ramp_up_and_tail": 1.0,
        "slow_outliers": 1.0,
        "token_yield": 1.0,
    }
    chart = plotly_charts.waterfall_chart("a", "ngram d=3, B=1", factors, 1.35)
    trace = chart.figure["data"][0]
    assert trace["measure"][0] == "absolute" and trace["measure"][-1] == "total"
    assert sum(trace["y"][:-1]) == trace["y"][-1] == 1.35  # the steps add up to the measured speedup


def test_the_forest_plot_marks_significant_differences():
    table = pd.DataFrame(
        [
            {
                "drafter": "ngram",
                "d": 3,
                "domain": "all",
                "n_requests": 8,
                "baseline_al": 2.5,
                "candidate_al": 2.1,
                "al_diff": -0.4,
                "diff_ci95_lo": -0.6,
                "diff_ci95_hi": -0.2,
                "significant": True,
                "segment": "all",
            },
            {
                "drafter": "ngram",
                "d": 3,
                "domain": "coding",
                "n_requests": 4,
                "baseline_al": 2.6,
                "candidate_al": 2.65,
                "al_diff": 0.05,
                "diff_ci95_lo": -0.1,
                "diff_ci95_hi": 0.2,
                "significant": False,
                "segment": "all",
            },
        ]
    )
    chart = plotly_charts.forest_chart(table)
    significant, other = chart.figure["data"]
    assert (significant["name"], significant["y"], significant["x"]) == ("significant", ["ngram d=3 · all"], [-0.4])
    assert other["y"] == ["ngram d=3 · coding"] and other["marker"]["color"] != significant["marker"]["color"]


def test_an_al_is_shown_with_the_decimals_its_interval_justifies():
    from reports.build import al_digits

    assert [al_digits(ci) for ci in ([2.80, 2.90], [2.846, 2.852], [1.0, 3.0], None, [2.0, 2.0])] == [2, 3, 1, 3, 3]


def test_hover_ci_text_says_why_an_interval_is_missing_and_signs_differences():
    assert plotly_charts.ci_text([2.9, 3.4]) == "95% CI [2.900, 3.400]"
    assert plotly_charts.ci_text([-0.2, 0.05], signed=True) == "95% CI [-0.200, +0.050]"
    assert plotly_charts.ci_text(None) == f"no CI ({plotly_charts.NO_CI})"
    assert (
        plotly_charts.ci_text([float("nan"), float("nan")], missing=plotly_charts.NO_PAIRED_CI)
        == "no CI (fewer than two prompts)"
    )


def test_plain_decoding_keeps_one_colour_and_only_the_front_is_labelled():
    from reports.speedup_ranking import pareto_front
    from reports.whatif_page import speedup_chart

    rows = [  # plain beats ngram at B=16; ngram is faster per request at B=1 and 4
        ("plain", None, 1, 50.0, 50.0),
        ("plain", None, 16, 30.0, 480.0),
        ("ngram", 3, 1, 80.0, 80.0),
        ("ngram", 3, 4, 60.0, 240.0),
        ("ngram", 3, 16, 20.0, 320.0),
        ("suffix", 3, 1, 70.0, 70.0),
    ]
    points = pd.DataFrame(
        [
            {"mechanism": m, "d": d, "batch_size": b, "tokens_per_s_per_request": x, "output_tokens_per_s": y}
            for m, d, b, x, y in rows
        ]
    )
    colours = {}
    for others in (["ngram"], ["suffix"], ["ngram", "suffix"]):  # plain sorts after ngram, before suffix
        shown = points[points.mechanism.isin(["plain", *others])]
        chart = plotly_charts.pareto_chart(shown, pareto_front(shown))
        traces = {t["name"]: t for t in chart.figure["data"]}
        colours[tuple(others)] = traces["plain"]["marker"]["color"]
        front = pareto_front(shown)
        for name, trace in traces.items():
            if name == "Pareto front":
                continue
            mine = shown[shown.mechanism == name].sort_values(["d", "batch_size"], na_position="first")
            labelled = [bool(text) for text in trace["text"]]
            assert labelled == list(mine.index.isin(front.index))
    assert set(colours.values()) == {plotly_charts.PLAIN_COLOUR}
    full = {t["name"]: t.get("text") for t in plotly_charts.pareto_chart(points, pareto_front(points)).figure["data"]}
    assert full["ngram"] == ["B=1 d=3", "B=4 d=3", ""] and full["plain"] == ["", "B=16"]
    # whatif's speedup chart labels the batch sizes predicted, not a log axis's minor ticks
    predicted = [
        {"drafter": "eagle3", "d": 3, "batch_size": b, "context_len": 512, "fits": True, "speedup": 2.0}
        | {"al": 2.5, "bound": "memory"}
        for b in (1, 4, 64)
    ]
    axis = speedup_chart(predicted, "eagle3", 512).figure["layout"]["xaxis"]
    assert (axis["type"], axis["tickvals"], axis["ticktext"]) == ("log", [1, 4, 64], ["1", "4", "64"])
