"""`make test`'s closing line: its wall time from the start of make (set-up included), the critical
path (the worker whose chain of tests ran longest: the wall time two workers cannot go below) and
the three slowest tests, from the file `pytest --times-file=` wrote.

    python -m tests.suite_time <make's start, epoch seconds> <times file>
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def minutes(seconds: float) -> str:
    whole = round(seconds)
    return f"{whole // 60} min {whole % 60} s"


def critical_path(ranked: list[dict]) -> str:
    """The worker with the most test seconds: its total, its test count and its two longest tests."""
    chains: dict[str, list[dict]] = {}
    for row in ranked:
        if "worker" in row:  # (a times file written before workers were recorded has none)
            chains.setdefault(row["worker"], []).append(row)
    if not chains:
        return "not recorded"
    worker, chain = max(chains.items(), key=lambda item: sum(row["seconds"] for row in item[1]))
    total = sum(row["seconds"] for row in chain)
    longest = ", ".join(f"{row['test']} {row['seconds']:.0f} s" for row in chain[:2])
    others = "; ".join(
        f"{name} {minutes(sum(row['seconds'] for row in rows))}"
        for name, rows in sorted(chains.items())
        if name != worker
    )
    return f"{worker} {minutes(total)} in {len(chain)} tests (longest: {longest})" + (
        f", beside {others}" if others else ""
    )


def closing_line(started: float, times_file: Path, now: float | None = None) -> str:
    wall = (time.time() if now is None else now) - started
    ranked = json.loads(times_file.read_text()) if times_file.is_file() else []
    slowest = ", ".join(f"{row['test']} {row['seconds']:.0f} s" for row in ranked[:3]) or "none recorded"
    return (
        f"make test: {minutes(wall)} wall, set-up included; critical path: {critical_path(ranked)}; slowest: {slowest}"
    )


if __name__ == "__main__":
    print(closing_line(float(sys.argv[1]), Path(sys.argv[2])))
