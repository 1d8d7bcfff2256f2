"""Why two pooled ALs differ: the difference split into additive parts, one per group of drafted steps.

AL = 1 + A/N (accepted draft tokens over drafted steps). With a group g holding (a_g, n_g) on one
side and (b_g, m_g) on the other, and r = A/N, r' = B/M the two sides' rates,

    part_g = 1/2 * [ ((b_g - a_g) - r (m_g - n_g)) / M  +  ((b_g - a_g) - r' (m_g - n_g)) / N ]

sums over the groups to AL' - AL exactly (each bracket alone does; the mean makes the split the
same whichever side is called first). A group accepted at the same rate on both sides, or added or
dropped at the side's own rate, contributes nothing: a part is what its group moves the pooled AL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class Tally:
    """A group's accepted draft tokens and drafted steps on one side."""

    accepted: int = 0
    drafts: int = 0


def pooled_al(tallies: list[Tally]) -> float | None:
    drafts = sum(t.drafts for t in tallies)
    return 1.0 + sum(t.accepted for t in tallies) / drafts if drafts else None


def split_difference(groups: Mapping[str, tuple[Tally, Tally]]) -> dict[str, float]:
    """Each group's part of AL(second) - AL(first); {} where either side drafted nothing."""
    first = [pair[0] for pair in groups.values()]
    second = [pair[1] for pair in groups.values()]
    n, m = sum(t.drafts for t in first), sum(t.drafts for t in second)
    if not n or not m:
        return {}
    r = sum(t.accepted for t in first) / n
    r2 = sum(t.accepted for t in second) / m
    parts = {}
    for name, (a, b) in groups.items():
        gained, added = b.accepted - a.accepted, b.drafts - a.drafts
        parts[name] = 0.5 * ((gained - r * added) / m + (gained - r2 * added) / n)
    return parts
