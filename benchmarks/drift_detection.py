"""The nightly change-point test's false-alarm rate and power on seeded synthetic histories
(speclens/figures/drift.py; issue 68).

For each noise level (the nights' scatter at a fixed prompt set, AL units): HISTORIES stationary
histories of NIGHTS nights (any change reported is a false alarm), and as many with a step of
-STEP AL that the last one, two or three nights are past (found where a change is reported within
one night of the step, pointing down). Synthetic: Gaussian nights about AL 2.5; no engine runs.

    python benchmarks/drift_detection.py [--histories 200] [--nights 14] [--step 0.1] [--level 0.05]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from speclens.figures.drift import DEFAULT_LEVEL, find_changes  # noqa: E402

NOISE_LEVELS = (0.01, 0.02, 0.03, 0.04)


def false_alarm_rate(rng: np.random.Generator, histories: int, nights: int, noise: float, level: float) -> float:
    alarms = sum(bool(find_changes(2.5 + noise * rng.standard_normal(nights), level=level)) for _ in range(histories))
    return alarms / histories


def power(
    rng: np.random.Generator, histories: int, nights: int, noise: float, step: float, past: int, level: float
) -> float:
    """The share of histories whose step, `past` nights before the end, is reported at its night (±1)."""
    at = nights - past
    found = 0
    for _ in range(histories):
        series = 2.5 + noise * rng.standard_normal(nights)
        series[at:] -= step
        found += any(abs(c.index - at) <= 1 and c.size < 0 for c in find_changes(series, level=level))
    return found / histories


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--histories", type=int, default=200)
    parser.add_argument("--nights", type=int, default=14)
    parser.add_argument("--step", type=float, default=0.1)
    parser.add_argument("--level", type=float, default=DEFAULT_LEVEL)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(68)
    print(
        f"synthetic histories (seeded Gaussian nights about AL 2.5): {args.histories} per row, {args.nights} nights, "
        f"stated false-alarm level {args.level:g}, step -{args.step:g} AL"
    )
    print("noise_al  false_alarm_rate  power_1_night  power_2_nights  power_3_nights")
    rates = []
    for noise in NOISE_LEVELS:
        alarms = false_alarm_rate(rng, args.histories, args.nights, noise, args.level)
        rates.append(alarms)
        found = [power(rng, args.histories, args.nights, noise, args.step, past, args.level) for past in (1, 2, 3)]
        print(f"{noise:8.2f}  {alarms:16.3f}  {found[0]:13.3f}  {found[1]:14.3f}  {found[2]:14.3f}")
    # the noise's scale cancels in the test (it is estimated from each series), so the rows pool
    pooled, total = sum(rates) / len(rates), args.histories * len(rates)
    low, high = wilson(pooled, total)
    print(
        f"false_alarm_rate pooled {pooled:.3f} [{low:.3f}, {high:.3f}] over {total} stationary histories (stated {args.level:g})"
    )


def wilson(share: float, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score 95 % interval of a binomial share."""
    centre = (share + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(share * (1 - share) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return float(centre - half), float(centre + half)


if __name__ == "__main__":
    main()
