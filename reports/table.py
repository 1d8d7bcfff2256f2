"""The terminal result table of one run: overall, then one row per domain."""

from __future__ import annotations

from typing import Any


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _ci(ci: list[float] | None) -> str:
    return "-" if ci is None else f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def result_table(summary: dict[str, Any]) -> str:
    header = ("domain", "requests", "steps", "AL", "AL 95% CI", "tokens/step")
    rows = [
        (
            "all",
            str(summary["n_requests"]),
            str(summary["n_steps"]),
            _fmt(summary["al"]),
            _ci(summary["al_ci95"]),
            _fmt(summary["tokens_per_step"]),
        )
    ]
    for domain, figures in summary["by_domain"].items():
        rows.append(
            (
                domain,
                str(figures["n_requests"]),
                str(figures["n_steps"]),
                _fmt(figures["al"]),
                _ci(figures["al_ci95"]),
                _fmt(figures["tokens_per_step"]),
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
    loss = summary.get("lossless")
    if loss and loss["checked"]:
        out.append(
            f"lossless: {loss['n_identical']}/{loss['n_compared']} outputs identical to plain decoding"
            + ("" if loss["identical"] else "  <-- NOT identical, see summary.json lossless.mismatched")
        )
    return "\n".join(out)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub-style markdown table (pipes in cells escaped)."""
    cell = lambda v: str(v).replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
