"""The report's plots, each drawn from finished runs into PNG bytes."""

from __future__ import annotations

import io
from typing import Callable

import pandas as pd

from reports.runs import Run


def _figure(draw: Callable, size: tuple[float, float] = (6.4, 4.0)) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=size)
    draw(ax)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.subplots_adjust(left=0.12, right=0.97, top=0.91, bottom=0.13)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def label(run: Run) -> str:
    s = run.summary
    return s["drafter"] + (f" d={s['d']}" if s["d"] is not None else "")


def al_vs_d(curves: pd.DataFrame, domain: str) -> bytes:
    def draw(ax):
        for drafter, g in curves[curves.domain == domain].groupby("drafter", sort=True):
            g = g.sort_values("d")
            (line,) = ax.plot(g.d, g.al, "o-", label=drafter)
            ax.fill_between(g.d, g.al_ci95_lo, g.al_ci95_hi, color=line.get_color(), alpha=0.15, linewidth=0)
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("draft length D")
        ax.set_ylabel("AL")
        ax.set_title(f"AL vs D: {domain}")

    return _figure(draw)


def per_position(runs: list[Run]) -> bytes:
    def draw(ax):
        for run in runs:
            rates = run.summary.get("per_position_acceptance")
            if rates:
                ax.plot(range(1, len(rates) + 1), rates, "o-", label=label(run))
        ax.set_xlabel("draft position k")
        ax.set_ylabel("P(k-th draft token accepted)")
        ax.set_ylim(0, 1.02)
        ax.set_title("Per-position acceptance")

    return _figure(draw)


def histogram(runs: list[Run]) -> bytes:
    def draw(ax):
        for run in runs:
            counts = run.summary.get("acceptance_histogram")
            if counts and sum(counts):
                total = sum(counts)
                ax.plot(range(len(counts)), [c / total for c in counts], "o-", label=label(run))
        ax.set_xlabel("tokens accepted in a drafted step")
        ax.set_ylabel("share of drafted steps")
        ax.set_title("Acceptance histogram")

    return _figure(draw)


def al_by_position(runs: list[Run]) -> bytes:
    def draw(ax):
        for run in runs:
            bins = run.summary.get("al_by_position") or []
            if bins and run.summary["d"] is not None:
                ax.plot([b["from"] for b in bins], [b["al"] for b in bins], "o-", label=label(run))
        ax.set_xscale("symlog", linthresh=256)
        ax.set_xlabel("context length at the step (tokens, bin start)")
        ax.set_ylabel("AL")
        ax.set_title("AL by context position")

    return _figure(draw)


def speedups(runs: list[Run]) -> bytes | None:
    """Predicted against measured speedup, one point per run and batch size; None without any."""
    points = [(label(run), p["batch_size"], p["speedup"], p["predicted_speedup"])
              for run in runs for p in run.summary.get("operating_points") or []
              if p.get("speedup") is not None and p.get("predicted_speedup") is not None]
    if not points:
        return None

    def draw(ax):
        for name, b, measured, predicted in points:
            ax.plot(measured, predicted, "o")
            ax.annotate(f"{name} B={b}", (measured, predicted), fontsize=7, xytext=(3, 3), textcoords="offset points")
        values = [v for _, _, m, p in points for v in (m, p)]
        lo, hi = min(values) * 0.9, max(values) * 1.1
        ax.plot([lo, hi], [lo, hi], "k--", linewidth=1, label="predicted = measured")
        ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="grey", alpha=0.15,
                        label="within 10%")
        ax.set_xlabel("measured speedup")
        ax.set_ylabel("predicted speedup")
        ax.set_title("Predicted vs measured speedup")

    return _figure(draw)
