"""When an open-loop load sends each request: `poisson` (exponential gaps, seeded) or `constant`
(evenly spaced) arrivals at a rate in requests per second (request_rate=, the load ladder's rungs)."""

from __future__ import annotations

import random
from typing import Literal

ArrivalProcess = Literal["poisson", "constant"]
PROCESSES: tuple[str, ...] = ("poisson", "constant")


def arrival_offsets(rate_per_s: float, n: int, process: str = "poisson", seed: int = 0) -> list[float]:
    """Seconds from the start at which each of `n` requests arrives (the first one gap in: a stage
    starts with nothing in flight)."""
    if rate_per_s <= 0:
        raise ValueError(f"rate {rate_per_s}: must be > 0")
    if process == "constant":
        return [(i + 1) / rate_per_s for i in range(n)]
    if process != "poisson":
        raise ValueError(f"arrivals={process}: one of {', '.join(PROCESSES)}")
    gap = random.Random(seed).expovariate
    times, t = [], 0.0
    for _ in range(n):
        t += gap(rate_per_s)
        times.append(t)
    return times
