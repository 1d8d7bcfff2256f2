"""A load ladder's section of the report (`python -m reports.build <ladder dir>`): the load policy
first, output tokens/s and TPOT against the offered rate for every arm with the crossovers marked
(interactive and PNG), the crossover rows and every stage."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from reports import png_plots
from reports.load_ladder import (
    ALL_DOMAINS,
    STAGE_HEADER,
    arm_label,
    gap_sentence,
    policy_sentence,
    schedule_gaps,
    stage_cells,
)
from reports.page import Section
from reports.plotly_charts import Chart, base_layout
from speclens.file_formats.load_file import (
    LOAD_REQUESTS_FILE,
    CrossoverRow,
    LoadPolicy,
    LoadServeFile,
    LoadStage,
    read_load_file,
)
from speclens.file_formats.serve_file import SERVE_FILE
from speclens.file_formats.summary_file import read_json_object
from speclens.schema import parse

# (figure, axis title, its value on a stage row)
FIGURES = (
    ("output_tokens_per_s", "output tokens/s", lambda s: s.output_tokens_per_s),
    ("tpot_ms", "TPOT p50 (ms)", lambda s: None if s.tpot_ms is None else s.tpot_ms.p50),
)


def arm_name(stage: LoadStage) -> str:
    return arm_label(stage.arm, stage.drafter, stage.d)


def series(stages: Sequence[LoadStage], value) -> dict[str, tuple[list[float], list[float]]]:
    """Per arm, the rates and the figure's mean over repeats at each."""
    held: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for s in stages:
        v = value(s)
        if v is not None:
            held[arm_name(s)][s.request_rate].append(v)
    return {
        arm: (sorted(by_rate), [float(np.mean(by_rate[r])) for r in sorted(by_rate)]) for arm, by_rate in held.items()
    }


def crossover_marks(rows: Sequence[CrossoverRow], figure: str) -> list[tuple[str, float]]:
    marks = []
    for row in rows:
        if row.domain != ALL_DOMAINS:
            continue
        rate = row.throughput_rate if figure == "output_tokens_per_s" else row.tpot_rate
        if rate is not None:
            marks.append((f"{row.drafter} d={row.d}", rate))
    return marks


def ladder_chart(stages: Sequence[LoadStage], rows: Sequence[CrossoverRow], figure: str, axis: str, value) -> Chart:
    traces: list[dict[str, Any]] = [
        {"type": "scatter", "mode": "lines+markers", "name": arm, "x": x, "y": y}
        for arm, (x, y) in sorted(series(stages, value).items())
    ]
    shapes = [
        {
            "type": "line",
            "xref": "x",
            "yref": "paper",
            "x0": rate,
            "x1": rate,
            "y0": 0,
            "y1": 1,
            "line": {"dash": "dash"},
        }
        for _, rate in crossover_marks(rows, figure)
    ]
    # on a log axis Plotly places annotations at log10 of the value (shapes take the value itself)
    annotations = [
        {"x": math.log10(rate), "y": 1, "xref": "x", "yref": "paper", "text": f"{name} crossover", "showarrow": False}
        for name, rate in crossover_marks(rows, figure)
        if rate > 0
    ]
    layout = base_layout(
        f"{axis} against the offered rate",
        xaxis={"title": "offered rate (requests/s)", "type": "log"},
        yaxis={"title": axis},
        shapes=shapes,
        annotations=annotations,
    )
    return Chart(f"load-{figure}", f"{axis} against the offered rate", {"data": traces, "layout": layout})


def ladder_png(stages: Sequence[LoadStage], rows: Sequence[CrossoverRow], figure: str, axis: str, value) -> bytes:
    def plot(ax):
        for arm, (x, y) in sorted(series(stages, value).items()):
            ax.plot(x, y, "o-", label=arm)
        for name, rate in crossover_marks(rows, figure):
            ax.axvline(rate, linestyle="--", color="grey")
            ax.annotate(f" {name} crossover", (rate, ax.get_ylim()[1]), fontsize=7, ha="left", va="top")
        ax.set_xscale("log")
        ax.set_xlabel("offered rate (requests/s)")
        ax.set_ylabel(axis)
        ax.set_title(f"{axis} against the offered rate")

    return png_plots.draw(plot, size=(6.8, 4.2), dpi=110)


def read_policy(root: Path) -> LoadPolicy | None:
    path = root / SERVE_FILE
    if not path.is_file():
        return None
    return parse(LoadServeFile, read_json_object(path), path, "serve.json beside a load ladder").load_policy


def ladder_sections(root: Path) -> list[Section]:
    """The ladder's sections, from load.json (and the serve.json and requests beside it)."""
    found = read_load_file(root)
    stages, rows = found.stages, found.crossover
    policy = read_policy(root)
    requests_path = root / LOAD_REQUESTS_FILE
    gaps = schedule_gaps(pd.read_parquet(requests_path), stages) if requests_path.is_file() else []
    source = f"{stages[0].provenance.source}, {stages[0].arrivals} arrivals" if stages else "no stage measured"
    section = Section(
        "Where speculation stops paying under load",
        answer=policy_sentence(policy) if policy else "No drafter's arm: no crossover.",
        text=[f"Figures: {source}."]
        + ([] if found.complete else ["The ladder is incomplete: re-run its command to resume it."])
        + [gap_sentence(g, policy) for g in gaps],
    )
    for figure, axis, value in FIGURES:
        section.charts.append(ladder_chart(stages, rows, figure, axis, value))
        section.images.append((f"load_{figure}", ladder_png(stages, rows, figure, axis, value)))
    if policy is not None:
        section.code.append(f"num_speculative_tokens_per_batch_size: {policy.num_speculative_tokens_per_batch_size}")
    section.tables.append(
        (
            ["drafter", "D", "domain", "throughput crossover", "TPOT crossover", "lead at top (tok/s)"],
            [
                [
                    r.drafter,
                    str(r.d),
                    r.domain,
                    _rate(r.throughput_rate, r.throughput_interval, r.below_ladder),
                    _rate(r.tpot_rate, r.tpot_interval, r.below_ladder),
                    f"{r.throughput_lead_at_top:+.1f}",
                ]
                for r in rows
            ],
        )
    )
    ordered = sorted(stages, key=lambda s: (s.request_rate, s.repeat, arm_name(s)))
    rows = [[f"{s.request_rate:g}", arm_name(s), str(s.repeat), *stage_cells(s)] for s in ordered]
    section.tables.append((["rate", "arm", "repeat", *STAGE_HEADER], rows))
    return [section]


def _rate(rate: float | None, interval: list[float] | None, below: bool) -> str:
    if rate is None:
        return "not reached"
    spread = f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else ""
    return f"{'<= ' if below else ''}{rate:.2f}{spread}"
