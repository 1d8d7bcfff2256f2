"""The terminal result table of one run: overall, then one row per domain."""

from __future__ import annotations

from typing import Any

import pandas as pd


def cell(value: Any, digits: int = 2, signed: bool = False) -> str:
    """A table cell: `-` for a missing value (None, NaN, NA), floats to `digits` places."""
    import math

    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"
    return str(value)


def _ci(ci: list[float] | None) -> str:
    return "-" if ci is None else f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def result_table(summary: dict[str, Any]) -> str:
    header = ("domain", "requests", "steps", "AL", "AL 95% CI", "tokens/step")
    rows = [
        (
            "all",
            str(summary["n_requests"]),
            str(summary["n_steps"]),
            cell(summary["al"]),
            _ci(summary["al_ci95"]),
            cell(summary["tokens_per_step"]),
        )
    ]
    for domain, figures in summary["by_domain"].items():
        rows.append(
            (
                domain,
                str(figures["n_requests"]),
                str(figures["n_steps"]),
                cell(figures["al"]),
                _ci(figures["al_ci95"]),
                cell(figures["tokens_per_step"]),
            )
        )
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    line = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    d = summary["d"]
    title = f"speclens: drafter={summary['drafter']}" + (f" d={d}" if d else "") + f" on {summary['dataset']}"
    out = [title, line(header), line(["-" * w for w in widths]), line(rows[0])]
    out += [line(r) for r in rows[1:]]
    timing = summary["timing"]
    out.append(
        f"generate {timing['generate_s']:.1f}s, {timing['output_tokens_per_s']:.1f} output tokens/s"
        + (f", measured speedup x{summary['speedup']:.2f} over plain decoding" if summary.get("speedup") else "")
    )
    points = summary.get("operating_points") or []
    if len(points) > 1 or any(p["t_verif"] for p in points):
        out += [operating_point_line(p) for p in points]
    loss = summary.get("lossless")
    if loss and loss["checked"]:
        out.append(
            f"lossless: {loss['n_identical']}/{loss['n_compared']} outputs identical to plain decoding"
            + ("" if loss["identical"] else "  <-- NOT identical, see summary.json lossless.mismatched")
        )
    return "\n".join(out)


def _ms(timing: dict | None) -> str:
    return "-" if timing is None else f"{timing['median_ms']:.1f}"


def operating_point_line(point: dict[str, Any]) -> str:
    """One batch size's throughput, speedups and step costs (medians, ms)."""
    speedups = ""
    if point["speedup"] is not None:
        speedups += f", speedup x{point['speedup']:.2f} measured"
    if point["predicted_speedup"] is not None:
        lo, hi = point["predicted_speedup_range"]
        speedups += f", x{point['predicted_speedup']:.2f} predicted [{lo:.2f}, {hi:.2f}]"
    if point["gap_above_tolerance"]:
        speedups += f" (gap {point['speedup_gap']:+.0%}: above 10%)"
    draft = "-" if point["t_draft_ms"] is None else f"{point['t_draft_ms']:.1f}"
    return (
        f"B={point['batch_size']}: {point['output_tokens_per_s']:.1f} output tokens/s{speedups}; "
        f"T_verif(B) {_ms(point['t_verif'])} ms, T_step {_ms(point['t_step'])} ms, "
        f"T_verif(B(1+D)) {_ms(point['t_verif_spec'])} ms, T_draft {draft} ms"
    )


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub-style markdown table (pipes in cells escaped)."""
    cell = lambda v: str(v).replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
