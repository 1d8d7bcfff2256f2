"""`make test`'s closing line: its wall time from the start of make (set-up included) and the three
slowest tests, from the file `pytest --times-file=` wrote.

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


def closing_line(started: float, times_file: Path, now: float | None = None) -> str:
    wall = (time.time() if now is None else now) - started
    ranked = json.loads(times_file.read_text()) if times_file.is_file() else []
    slowest = ", ".join(f"{row['test']} {row['seconds']:.0f} s" for row in ranked[:3]) or "none recorded"
    return f"make test: {minutes(wall)} wall, set-up included; slowest: {slowest}"


if __name__ == "__main__":
    print(closing_line(float(sys.argv[1]), Path(sys.argv[2])))
