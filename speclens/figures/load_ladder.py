"""A request-rate ladder's figures (issue 67): where speculation stops paying under load.

A ladder runs each arm (plain decoding; a drafter at a D) at each offered request rate. Per drafter,
D and domain, its crossovers are the rates where the drafter's advantage over plain decoding
vanishes: `throughput_rate`, where plain decoding's output tokens/s overtakes the drafter's, and
`tpot_rate`, where the drafter's TPOT is no longer below plain decoding's. Between two rungs the
advantage is taken as linear in the rate (the crossover interpolated where it changes sign); its
interval comes from resampling each stage's samples (the repeats' figures, or the requests'), with
the share of resamples in which it was reached. A stage is `saturated` where the rate achieved
falls short of what a server keeping up with its arrivals would achieve, or the requests in flight
grow through it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

# Resamples of the crossover's interval, and its level.
BOOTSTRAP_RESAMPLES = 2000
INTERVAL = 0.95
# A stage whose rate achieved falls short of what a server keeping up with its arrivals would
# achieve by more than this share is saturated.
SATURATION_FLOOR = 0.05
# Requests in flight over a stage's last third against its first: grown by more than this share
# and by more than QUEUE_GROWTH_MIN requests (a short stage's bursts of arrivals move it by one or
# two), the queue grows through the stage.
QUEUE_GROWTH = 0.5
QUEUE_GROWTH_MIN = 2.0


@dataclass(frozen=True)
class Crossover:
    """Where one advantage vanishes along the ladder. `rate` None: not reached up to the top rate
    (`advantage_at_top` says where the arms stand there); `below_ladder`: gone at the lowest rate
    already (`rate` is that rate, an upper bound)."""

    rate: float | None
    interval: tuple[float, float] | None
    # The share of resamples in which it was reached below the top rate.
    reached_share: float
    advantage_at_top: float
    below_ladder: bool = False

    @property
    def reached(self) -> bool:
        return self.rate is not None


def crossover_rate(rates: Sequence[float], advantage: Sequence[float]) -> tuple[float | None, bool]:
    """The first rate where `advantage` (the drafter's lead at each rate: > 0 while it pays) drops
    to zero or below, interpolated linearly between the two rungs around it; (None, False) where it
    stays above zero to the top rate, (rates[0], True) where it is gone at the lowest already."""
    if len(rates) != len(advantage) or not rates:
        raise ValueError("one advantage per rate")
    if advantage[0] <= 0:
        return float(rates[0]), True
    for i in range(1, len(rates)):
        if advantage[i] <= 0:
            lo, hi, a_lo, a_hi = rates[i - 1], rates[i], advantage[i - 1], advantage[i]
            return float(lo + (hi - lo) * a_lo / (a_lo - a_hi)), False
    return None, False


def crossover(
    rates: Sequence[float],
    drafter: Sequence[Sequence[float]],
    plain: Sequence[Sequence[float]],
    higher_is_better: bool,
    seed: int = 0,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> Crossover:
    """The crossover of one figure (output tokens/s: higher is better; TPOT: lower is better) from
    each stage's samples on both arms (the repeats' figures, or per-request values), the point from
    the samples' means and the interval from resampling each stage's samples (seeded)."""
    if not (len(rates) == len(drafter) == len(plain)) or any(len(s) == 0 for s in (*drafter, *plain)):
        raise ValueError("samples of both arms at every rate")
    sign = 1.0 if higher_is_better else -1.0

    def lead(d_means: Sequence[float], p_means: Sequence[float]) -> list[float]:
        return [sign * (d - p) for d, p in zip(d_means, p_means)]

    point = lead([float(np.mean(s)) for s in drafter], [float(np.mean(s)) for s in plain])
    rate, below = crossover_rate(rates, point)
    rng = np.random.default_rng(seed)
    arrays = [np.asarray(s, dtype=float) for s in (*drafter, *plain)]
    means = np.stack([a[rng.integers(0, len(a), size=(resamples, len(a)))].mean(axis=1) for a in arrays], axis=1)
    n = len(rates)
    found = [crossover_rate(rates, lead(row[:n], row[n:]))[0] for row in means]
    hits = np.array([r for r in found if r is not None], dtype=float)
    share = len(hits) / resamples
    interval = None
    if rate is not None and len(hits):
        tail = (1 - INTERVAL) / 2
        interval = (float(np.quantile(hits, tail)), float(np.quantile(hits, 1 - tail)))
    return Crossover(rate, interval, share, point[-1], below)


def saturated(keeping_up_rate: float, achieved_rate: float, in_flight: Sequence[float] = ()) -> bool:
    """Whether a stage could not keep up: the rate achieved short of `keeping_up_rate` (what a
    server keeping up with the stage's very arrivals would achieve) by more than SATURATION_FLOOR,
    or the requests in flight (sampled evenly through the stage) growing."""
    return achieved_rate < keeping_up_rate * (1 - SATURATION_FLOOR) or queue_grows(in_flight)


def queue_grows(in_flight: Sequence[float]) -> bool:
    """The requests in flight over the stage's last third above its first third's by more than
    QUEUE_GROWTH of them, more than QUEUE_GROWTH_MIN requests and more than three of a Poisson
    count's standard deviations (sqrt of the first third's mean: arrivals alone move it that much)."""
    if len(in_flight) < 3:
        return False
    third = len(in_flight) // 3
    first, last = float(np.mean(in_flight[:third])), float(np.mean(in_flight[-third:]))
    return last - first > max(QUEUE_GROWTH_MIN, QUEUE_GROWTH * first, 3.0 * math.sqrt(first))


def littles_law_gap(achieved_rate: float, mean_latency_s: float, mean_in_flight: float) -> float | None:
    """Little's law, L = lambda W: (lambda W - L) / L, the mean requests in flight measured against
    the rate achieved times the mean request latency (None where nothing was in flight)."""
    if mean_in_flight <= 0:
        return None
    return (achieved_rate * mean_latency_s - mean_in_flight) / mean_in_flight


def goodput(
    ttft_ms: Sequence[float],
    tpot_ms: Sequence[float | None],
    seconds: float,
    slo_ttft_ms: float | None,
    slo_tpot_ms: float | None,
) -> float:
    """Requests per second that met the SLO (both bounds given; a request of one output token has
    no TPOT and meets that bound)."""
    if seconds <= 0:
        raise ValueError("a stage lasts more than no time")
    met = 0
    for ttft, tpot in zip(ttft_ms, tpot_ms):
        ok = slo_ttft_ms is None or ttft <= slo_ttft_ms
        ok &= slo_tpot_ms is None or tpot is None or tpot <= slo_tpot_ms
        met += ok
    return met / seconds


@dataclass(frozen=True)
class ServedRequest:
    """One request of a stage as the load generator saw it, in seconds from the stage's start."""

    sent_s: float
    latency_s: float
    ttft_s: float | None
    output_tokens: int
    chunk_gaps_s: tuple[float, ...] = ()

    @property
    def finished_s(self) -> float:
        return self.sent_s + self.latency_s

    @property
    def tpot_s(self) -> float | None:
        if self.ttft_s is None or self.output_tokens < 2:
            return None
        return (self.latency_s - self.ttft_s) / (self.output_tokens - 1)


@dataclass(frozen=True)
class StageFigures:
    """What one arm achieved at one offered rate, its warm-up requests left out."""

    n_requests: int
    seconds: float
    achieved_rate: float
    output_tokens_per_s: float
    mean_in_flight: float
    littles_law_gap: float | None
    goodput_rps: float | None
    saturated: bool
    ttft_s: tuple[float, ...]
    tpot_s: tuple[float, ...]
    itl_s: tuple[float, ...]
    latency_s: tuple[float, ...]


# Points at which the requests in flight are counted through a stage (the queue-growth check).
IN_FLIGHT_SAMPLES = 30


def in_flight_at(requests: Sequence[ServedRequest], times: Sequence[float]) -> list[int]:
    """How many of `requests` were in flight (sent, not finished) at each of `times`."""
    return [sum(r.sent_s <= t < r.finished_s for r in requests) for t in times]


def stage_figures(
    requests: Sequence[ServedRequest],
    warmup_requests: int = 0,
    slo_ttft_ms: float | None = None,
    slo_tpot_ms: float | None = None,
    server_in_flight: Sequence[float] | None = None,
) -> StageFigures:
    """A stage's figures from its requests (in the order sent; the first `warmup_requests` left
    out). The rate achieved, tokens/s and goodput are per second of the stage's span, from the
    first measured request sent to the last finished (a steady server's rate is below the offered one
    by about one latency over that span); the mean
    in flight is the server's gauge where it reports one, else the client's time average, and
    Little's law holds it against the completion rate times the mean latency."""
    measured = sorted(requests, key=lambda r: r.sent_s)[warmup_requests:]
    if len(measured) < 2:
        raise ValueError("a stage's figures need at least two measured requests")
    start, end = measured[0].sent_s, max(r.finished_s for r in measured)
    span = end - start
    achieved = len(measured) / span
    # A server keeping up with these very arrivals finishes the last about one typical latency after
    # it was sent: what the achieved rate is held against (the arrivals' own noise left out).
    keeping_up = len(measured) / (measured[-1].sent_s - start + float(np.median([r.latency_s for r in measured])))
    latencies = [r.latency_s for r in measured]
    client_mean = sum(latencies) / span
    mean_in_flight = float(np.mean(server_in_flight)) if server_in_flight else client_mean
    last_sent = measured[-1].sent_s
    sample_times = np.linspace(start, last_sent, IN_FLIGHT_SAMPLES) if last_sent > start else [start]
    series = in_flight_at(measured, sample_times)
    tpots = [r.tpot_s for r in measured]
    good = None
    if slo_ttft_ms is not None or slo_tpot_ms is not None:
        ttft_ms = [float("inf") if r.ttft_s is None else r.ttft_s * 1000 for r in measured]
        good = goodput(ttft_ms, [None if t is None else t * 1000 for t in tpots], span, slo_ttft_ms, slo_tpot_ms)
    return StageFigures(
        n_requests=len(measured),
        seconds=span,
        achieved_rate=achieved,
        output_tokens_per_s=sum(r.output_tokens for r in measured) / span,
        mean_in_flight=mean_in_flight,
        littles_law_gap=littles_law_gap(achieved, float(np.mean(latencies)), mean_in_flight),
        goodput_rps=good,
        saturated=saturated(keeping_up, achieved, series),
        ttft_s=tuple(r.ttft_s for r in measured if r.ttft_s is not None),
        tpot_s=tuple(t for t in tpots if t is not None),
        itl_s=tuple(g for r in measured for g in r.chunk_gaps_s),
        latency_s=tuple(latencies),
    )
