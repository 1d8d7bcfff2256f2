"""Every plot speclens draws, as PNG bytes: one matplotlib set-up for all of them."""

from __future__ import annotations

import io
from typing import Any, Callable

import pandas as pd

from reports.plotly_charts import extension_at, length_figures, length_series_names, speedup_points
from reports.runs import RunView
from speclens.figures.costs import GAP_TOLERANCE


def draw(plot: Callable[[Any], None], size: tuple[float, float] = (6.4, 4.0), dpi: int = 100) -> bytes:
    """Run `plot(ax)` on a fresh figure (grid, legend when labelled) and return it as PNG."""
    # matplotlib is loaded only when a plot is drawn.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=size)
    plot(ax)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    # Fixed margins: tight_layout costs more than the drawing itself.
    fig.subplots_adjust(left=0.12, right=0.97, top=0.91, bottom=0.13)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    return buf.getvalue()


def _series_label(key: tuple, columns: list[str]) -> str:
    """A curve's legend label: its drafter, then each varying axis (temperature, chat template
    variables, engine setting, segment, n-gram proposer)."""
    parts = []
    for column, value in zip(columns, key):
        if column == "temperature":
            parts.append(f"T={value:g}")
        elif column == "segment":
            parts.append(f"({value})")
        elif column == "proposer":
            parts.append(f"[{value} proposer]" if value else "")
        elif column in ("drafter", "d"):
            parts.append(str(value) if column == "drafter" else f"d={value}")
        elif column == "setting":
            parts.append(value or "engine defaults")
        else:
            parts.append(value or "template defaults")
    return " ".join(part for part in parts if part)


def _series(curves: pd.DataFrame, first: list[str]) -> list[str]:
    """The columns one line is drawn per: `first`, then each axis that varies in `curves`."""
    return first + [
        c
        for c in ("temperature", "chat_template_kwargs", "setting", "segment", "proposer")
        if c in curves and curves[c].nunique() > 1
    ]


def al_vs_d(curves: pd.DataFrame, domain: str, title: str = "AL vs D") -> bytes:
    """AL against D, one line per drafter (and mode, segment) with its 95% CI band; measured points as dots."""
    # matplotlib is loaded only when a plot is drawn.
    from matplotlib.ticker import MaxNLocator

    keys = _series(curves, ["drafter"])

    def plot(ax):
        for key, g in curves[curves.domain == domain].groupby(keys, sort=True):
            g = g.sort_values("d")
            (line,) = ax.plot(g.d, g.al, label=_series_label(key, keys))
            ax.fill_between(g.d, g.al_ci95_lo, g.al_ci95_hi, color=line.get_color(), alpha=0.15, linewidth=0)
            measured = g[g.source == "measured"]
            ax.plot(measured.d, measured.al, "o", color=line.get_color())
            other = g[g.source != "measured"]
            ax.plot(other.d, other.al, ".", color=line.get_color())
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("draft length D")
        ax.set_ylabel("AL (accepted + 1 per drafted step)")
        ax.set_title(f"{title} — {domain}  (dots: measured)")

    return draw(plot, size=(6.4, 4.2), dpi=110)


def al_by_domain(curves: pd.DataFrame) -> bytes:
    """AL per domain as grouped bars (one per drafter and D) with 95% CI whiskers: runs at one D each."""
    import numpy as np

    domains = sorted(curves.domain.unique(), key=lambda d: (d != "all", d))
    keys = _series(curves, ["drafter", "d"])
    groups = list(curves.groupby(keys, sort=True))
    width = 0.8 / max(1, len(groups))

    def plot(ax):
        for i, (key, g) in enumerate(groups):
            g = g.set_index("domain").reindex(domains)
            x = np.arange(len(domains)) + (i - (len(groups) - 1) / 2) * width
            err = [(g.al - g.al_ci95_lo).fillna(0), (g.al_ci95_hi - g.al).fillna(0)]
            ax.bar(x, g.al, width, yerr=err, capsize=3, label=_series_label(key, keys))
        ax.set_xticks(range(len(domains)), domains, rotation=20)
        ax.set_ylabel("AL (accepted + 1 per drafted step)")
        ax.set_title("AL per domain (whiskers: 95% CI)")

    return draw(plot, size=(6.8, 4.2), dpi=110)


def al_vs_d_by_segment(curves: pd.DataFrame, domain: str) -> bytes:
    """AL against D per drafter and segment (thinking, answer) of a reasoning target's outputs."""
    return al_vs_d(curves, domain, "AL vs D per segment")


def al_vs_temperature(curves: pd.DataFrame, domain: str) -> bytes:
    """AL against sampling temperature, one line per (drafter, D), with its 95% CI band."""

    keys = ["drafter", "d"] + [
        c for c in ("chat_template_kwargs", "setting") if c in curves and curves[c].nunique() > 1
    ]

    def plot(ax):
        for key, g in curves[curves.domain == domain].groupby(keys, sort=True):
            g = g.sort_values("temperature")
            (line,) = ax.plot(g.temperature, g.al, "o-", label=_series_label(key, keys))
            ax.fill_between(g.temperature, g.al_ci95_lo, g.al_ci95_hi, color=line.get_color(), alpha=0.15, linewidth=0)
        ax.set_xlabel("sampling temperature")
        ax.set_ylabel("AL (accepted + 1 per drafted step)")
        ax.set_title(f"AL vs temperature — {domain}")

    return draw(plot, size=(6.4, 4.2), dpi=110)


def per_position(runs: list[RunView]) -> bytes:
    from matplotlib.ticker import MaxNLocator

    def plot(ax):
        for run in runs:
            rates = run.summary.per_position_acceptance
            if rates:
                ax.plot(range(1, len(rates) + 1), rates, "o-", label=run.label)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("draft position k")
        ax.set_ylabel("P(k-th draft token accepted)")
        ax.set_ylim(0, 1.02)
        ax.set_title("Per-position acceptance")

    return draw(plot)


def histogram(runs: list[RunView]) -> bytes:
    from matplotlib.ticker import MaxNLocator

    def plot(ax):
        for i, run in enumerate(runs):
            counts = run.summary.acceptance_histogram
            if counts and sum(counts):
                total = sum(counts)
                ax.bar(
                    [k + (i - (len(runs) - 1) / 2) * 0.8 / len(runs) for k in range(len(counts))],
                    [c / total for c in counts],
                    0.8 / len(runs),
                    label=run.label,
                )
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("tokens accepted in a drafted step")
        ax.set_ylabel("share of drafted steps")
        ax.set_title("Acceptance histogram")

    return draw(plot)


def al_by_position(runs: list[RunView]) -> bytes:
    return binned_al(runs, lambda run: run.summary.al_by_position, 256, "context length at the step", "context")


def al_by_output_position(runs: list[RunView]) -> bytes:
    return binned_al(runs, lambda run: run.summary.al_by_output_position, 32, "generated tokens at the step", "output")


def binned_al(runs: list[RunView], bins_of, linthresh: int, axis: str, title: str) -> bytes:
    def plot(ax):
        for run in runs:
            bins = bins_of(run)
            if bins and run.summary.d is not None:
                ax.plot([b.from_ for b in bins], [b.al for b in bins], "o-", label=run.label)
        ax.set_xscale("symlog", linthresh=linthresh)
        ax.set_xlabel(f"{axis} (tokens, bin start)")
        ax.set_ylabel("AL")
        ax.set_title(f"AL by {title} position")

    return draw(plot)


def al_per_request(runs: list[RunView]) -> bytes:
    """Each run's requests' ALs: box p10 to p90 around the median, whiskers min to max."""

    def plot(ax):
        stats = [
            {
                "label": run.label,
                "q1": s["p10"],
                "med": s["p50"],
                "q3": s["p90"],
                "whislo": s["min"],
                "whishi": s["max"],
            }
            for run in runs
            if (s := run.summary.al_per_request) and run.summary.d is not None
        ]
        ax.bxp(stats, showfliers=False)
        ax.set_ylabel("a request's own AL")
        ax.set_title("AL per request (box p10-p90, whiskers min-max)")

    return draw(plot)


def al_vs_turn(runs: list[RunView]) -> bytes:
    """AL against the assistant-turn index of agent trajectories, one line per run, 95% CI band."""
    from matplotlib.ticker import MaxNLocator

    def plot(ax):
        for run in runs:
            turns = sorted((int(k), g) for k, g in (run.summary.by_turn or {}).items() if g.al is not None)
            if not turns:
                continue
            x = [k for k, _ in turns]
            (line,) = ax.plot(x, [g.al for _, g in turns], "o-", label=run.label)
            ci = [g.al_ci95 or [g.al, g.al] for _, g in turns]
            ax.fill_between(x, [c[0] for c in ci], [c[1] for c in ci], color=line.get_color(), alpha=0.15, linewidth=0)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("assistant turn of the trajectory")
        ax.set_ylabel("AL")
        ax.set_title("AL by agent turn")

    return draw(plot)


def al_vs_d_by_length(curves: pd.DataFrame) -> bytes:
    """AL against D, one line per drafter (and mode) and input length, from the length groups'
    curve rows (domain `all@<length>`); lengths measured under a context extension dashed and named."""
    from matplotlib.ticker import MaxNLocator

    keys = _series(curves, ["drafter"])

    def plot(ax):
        for key, g in curves.sort_values("input_tokens").groupby([*keys, "input_tokens"], sort=True):
            g = g.sort_values("d")
            extension = g.context_extension.iloc[0]
            label = f"{_series_label(key[:-1], keys)} {g.domain.iloc[0].partition('@')[2]}"
            label += f" (extended: {extension})" if extension else ""
            (line,) = ax.plot(g.d, g.al, marker="o", linestyle="--" if extension else "-", label=label)
            ax.fill_between(g.d, g.al_ci95_lo, g.al_ci95_hi, color=line.get_color(), alpha=0.15, linewidth=0)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("draft length D")
        ax.set_ylabel("AL (accepted + 1 per drafted step)")
        ax.set_title("AL vs D per input length (95% CI bands)")

    return draw(plot, size=(6.4, 4.2), dpi=110)


def al_vs_length(runs: list[RunView]) -> bytes:
    """AL against the prompts' input length (log scale), one line per drafter and D with 95% CI
    whiskers; points past the target's own window (a context extension) as open diamonds, the
    native window dashed."""

    from matplotlib.ticker import NullFormatter

    names = length_series_names(runs)

    def plot(ax):
        natives, ticks = set(), {}
        for run in runs:
            found = [(label, g) for label, g in length_figures(run) if g.input_tokens is not None]
            if not found:
                continue
            ticks |= {g.input_tokens: label for label, g in found}
            x = [g.input_tokens for _, g in found]
            y = [g.al for _, g in found]
            ci = [g.al_ci95 or [g.al, g.al] for _, g in found]
            err = [[v - c[0] for v, c in zip(y, ci)], [c[1] - v for v, c in zip(y, ci)]]
            (line,) = ax.plot(x, y, "-", label=names[id(run)])
            ax.errorbar(x, y, yerr=err, fmt="none", ecolor=line.get_color(), capsize=3)
            window = run.summary.context_window
            for tokens, value in zip(x, y):
                extended = extension_at(window, tokens) is not None
                ax.plot(
                    tokens,
                    value,
                    "D" if extended else "o",
                    color=line.get_color(),
                    fillstyle="none" if extended else "full",
                )
                if extended:
                    natives.add((window.native, window.extension))
        for native, extension in sorted(natives):
            ax.axvline(
                native,
                color="#444",
                linestyle="--",
                linewidth=1,
                label=f"native window {native:,} (right: {extension})",
            )
        ax.set_xscale("log")
        ax.set_xticks(sorted(ticks), [ticks[t] for t in sorted(ticks)])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("input tokens (log scale)")
        ax.set_ylabel("AL (accepted + 1 per drafted step)")
        ax.set_title("AL by context length (whiskers: 95% CI; open diamonds: extended)")

    return draw(plot, size=(6.4, 4.2), dpi=110)


def speedups(runs: list[RunView]) -> bytes | None:
    """Predicted against measured speedup, one point per run and batch size; None without any."""
    points = speedup_points(runs)
    if not points:
        return None

    def plot(ax):
        for name, b, measured, predicted in points:
            ax.plot(measured, predicted, "o")
            ax.annotate(f"{name} B={b}", (measured, predicted), fontsize=7, xytext=(3, 3), textcoords="offset points")
        values = [v for _, _, m, p in points for v in (m, p)]
        lo, hi = min(values) * 0.9, max(values) * 1.1
        ax.plot([lo, hi], [lo, hi], "k--", linewidth=1, label="predicted = measured")
        band = GAP_TOLERANCE
        ax.fill_between(
            [lo, hi],
            [lo * (1 - band), hi * (1 - band)],
            [lo * (1 + band), hi * (1 + band)],
            color="grey",
            alpha=0.15,
            label=f"within {band:.0%}",
        )
        ax.set_xlabel("measured speedup")
        ax.set_ylabel("predicted speedup")
        ax.set_title("Predicted vs measured speedup")

    return draw(plot)


def pareto(points: pd.DataFrame, front: pd.DataFrame) -> bytes:
    """Total output tokens/s against tokens/s per request, one curve per (mechanism, D) over the
    batch sizes; the Pareto front marked, its points labelled by batch size (labels on every point
    overlap where curves crowd; each curve runs from its smallest B at the right)."""

    def plot(ax):
        for label, g in points.groupby("label", sort=True):
            g = g.sort_values("batch_size")
            ax.plot(g.tokens_per_s_per_request, g.output_tokens_per_s, "o-", label=label, markersize=4)
            for r in g[g.index.isin(front.index)].itertuples():
                ax.annotate(
                    f"B={r.batch_size}",
                    (r.tokens_per_s_per_request, r.output_tokens_per_s),
                    fontsize=7,
                    xytext=(3, 3),
                    textcoords="offset points",
                )
        if not front.empty:
            ax.plot(front.tokens_per_s_per_request, front.output_tokens_per_s, "k--", linewidth=1, label="Pareto front")
            ax.scatter(
                front.tokens_per_s_per_request,
                front.output_tokens_per_s,
                s=90,
                facecolors="none",
                edgecolors="k",
                zorder=3,
            )
        ax.set_xlabel("interactivity: output tokens/s per request")
        ax.set_ylabel("throughput: output tokens/s (all requests)")
        ax.set_title("Throughput vs interactivity (measured, all prompts)")

    return draw(plot, size=(6.8, 4.6), dpi=110)


def trend(history: pd.DataFrame) -> bytes:
    """AL per night, one line per (drafter, D) over all prompts; nights that regressed marked."""

    def plot(ax):
        pooled = history[history.domain == "all"].sort_values("night")
        for (drafter, d), g in pooled.groupby(["drafter", "d"], sort=True):
            ax.plot(g.night, g.al, "o-", label=f"{drafter} d={d}")
            bad = g[g.regressed.eq(True)]
            ax.plot(bad.night, bad.al, "x", color="red", markersize=10, markeredgewidth=2)
        ax.set_xlabel("night")
        ax.set_ylabel("AL (all prompts)")
        ax.set_title("Nightly AL (red x: regression)")
        ax.tick_params(axis="x", labelrotation=30)

    return draw(plot, size=(7.0, 4.2), dpi=110)


def waterfall(title: str, factors: dict[str, float], measured: float) -> bytes:
    """A speedup account as a waterfall: the model's prediction, each correction as the step it
    takes the running product (green up, red down), and the measured speedup."""

    def plot(ax):
        names = list(factors)
        running, x = 1.0, 0
        for i, name in enumerate(names):
            start = 0.0 if i == 0 else running  # the model's bar starts at 0; each correction where it was
            running *= factors[name]
            color = "tab:blue" if i == 0 else ("tab:green" if factors[name] >= 1 else "tab:red")
            ax.bar(x, running - start, bottom=start, color=color, width=0.6)
            ax.annotate(
                f"x{factors[name]:.3f}",
                (x, running),
                ha="center",
                fontsize=7,
                xytext=(0, 3),
                textcoords="offset points",
            )
            x += 1
        ax.bar(x, measured, color="black", width=0.6)
        ax.annotate(
            f"{measured:.3f}", (x, measured), ha="center", fontsize=7, xytext=(0, 3), textcoords="offset points"
        )
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
        ax.set_xticks(range(x + 1), [n.replace("_", " ") for n in names] + ["measured"], rotation=20, fontsize=7)
        ax.set_ylabel("speedup")
        ax.set_title(title)

    return draw(plot, size=(6.4, 3.6), dpi=90)
