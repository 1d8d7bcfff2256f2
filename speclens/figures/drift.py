"""Change points in a nightly AL series (issue 68): where a (drafter, D, domain)'s acceptance shifted,
by how much, with an interval, at a false-alarm rate the test states and holds.

The method: binary segmentation with the standardized mean-shift statistic
    max over splits k of |mean(x[:k]) - mean(x[k:])| / (sigma * sqrt(1/k + 1/(n-k)))
where sigma is the series' night-to-night noise: the larger of the nights' own standard errors
(their intervals, where the history has them) and a robust estimate from the series itself (the
median absolute successive difference, which a shift moves in one place only). The statistic's
distribution under no change depends only on n and on how sigma is estimated, so its `level`
quantile is simulated once per n (seeded, Gaussian nights, sigma estimated the same way): on a
stationary series the first split, and so any change at all, is reported with probability `level`.
Each side of a change found is searched again at the same level (a second change is looked for
only once a first was real). A shift that creeps over several nights splits where its two halves
differ most: it is found as one change at its middle, its size the difference of the halves.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

# The false-alarm rate per series where none is given: the probability that a series with no
# change reports one.
DEFAULT_LEVEL = 0.05
MIN_NIGHTS = 4  # fewer cannot separate a shift from one noisy night
_SIMULATIONS = 100_000
_SIMULATED_VALUES = 5_000_000  # (60 nights simulated 83,000 times; a year of nights 14,000)
_LEVEL_KEPT = 0.9
_NOISE_FLOOR = 1e-3  # AL units: a series of identical nights (greedy float32) still has a scale
_MAD_TO_SIGMA = 1.0 / (0.6744897501960817 * math.sqrt(2.0))  # successive differences of N(0, s^2)


@dataclass(frozen=True)
class Change:
    """One shift: `index` is the first night after it (its place in the series given)."""

    index: int
    size: float  # after - before, AL units
    interval: tuple[float, float]  # 95 % for `size`
    before: float
    after: float
    statistic: float
    threshold: float


def noise_of(values: np.ndarray, standard_errors: np.ndarray | None = None) -> float:
    """The nights' scatter about their level: successive differences' median absolute value (robust
    to the few differences a shift makes), or the nights' own standard errors where larger."""
    diffs = np.abs(np.diff(values))
    robust = float(np.median(diffs)) * _MAD_TO_SIGMA if len(diffs) else 0.0
    own = 0.0
    if standard_errors is not None:
        known = standard_errors[np.isfinite(standard_errors)]
        own = float(np.median(known)) if len(known) else 0.0
    return max(robust, own, _NOISE_FLOOR)


def _split_statistics(values: np.ndarray, sigma: float) -> np.ndarray:
    """|mean left - mean right| / its standard error, for each split 1..n-1 (rows of `values`)."""
    n = values.shape[-1]
    k = np.arange(1, n)
    cumulative = np.cumsum(values, axis=-1)[..., :-1]
    total = values.sum(axis=-1, keepdims=True)
    left = cumulative / k
    right = (total - cumulative) / (n - k)
    return np.abs(left - right) / (sigma * np.sqrt(1.0 / k + 1.0 / (n - k)))


@functools.lru_cache(maxsize=256)
def threshold(n: int, level: float = DEFAULT_LEVEL) -> float:
    """The largest split statistic's `1 - 0.9 * level` quantile over n stationary Gaussian nights,
    sigma estimated from each simulated series as `noise_of` does (seeded: the same every run). The
    tenth of `level` kept back covers the simulated quantile's own error, so that the rate holds
    at or below `level`, not about it."""
    rng = np.random.default_rng(68_000 + n)
    series = rng.standard_normal((max(2_000, min(_SIMULATIONS, _SIMULATED_VALUES // n)), n))
    diffs = np.abs(np.diff(series, axis=1))
    sigma = np.maximum(np.median(diffs, axis=1) * _MAD_TO_SIGMA, 1e-12)[:, None]
    k = np.arange(1, n)
    cumulative = np.cumsum(series, axis=1)[:, :-1]
    total = series.sum(axis=1, keepdims=True)
    stat = np.abs(cumulative / k - (total - cumulative) / (n - k)) / (sigma * np.sqrt(1.0 / k + 1.0 / (n - k)))
    return float(np.quantile(stat.max(axis=1), 1.0 - _LEVEL_KEPT * level))


def find_changes(
    values: list[float] | np.ndarray,
    standard_errors: list[float] | np.ndarray | None = None,
    level: float = DEFAULT_LEVEL,
) -> list[Change]:
    """The shifts in one series of nights (oldest first), in night order; [] where it is too short."""
    x = np.asarray(values, dtype=float)
    if len(x) < MIN_NIGHTS or not np.all(np.isfinite(x)):
        return []
    se = None if standard_errors is None else np.asarray(standard_errors, dtype=float)
    sigma = noise_of(x, se)
    found: list[Change] = []
    _segment(x, 0, len(x), sigma, level, found)
    return sorted(found, key=lambda c: c.index)


def _segment(x: np.ndarray, start: int, end: int, sigma: float, level: float, found: list[Change]) -> None:
    n = end - start
    if n < MIN_NIGHTS:
        return
    stats = _split_statistics(x[start:end], sigma)
    best = int(np.argmax(stats))
    limit = threshold(n, level)
    if stats[best] <= limit:
        return
    split = start + best + 1
    before, after = float(x[start:split].mean()), float(x[split:end].mean())
    half = 1.959963984540054 * sigma * math.sqrt(1.0 / (split - start) + 1.0 / (end - split))
    size = after - before
    found.append(Change(split, size, (size - half, size + half), before, after, float(stats[best]), limit))
    _segment(x, start, split, sigma, level, found)
    _segment(x, split, end, sigma, level, found)
