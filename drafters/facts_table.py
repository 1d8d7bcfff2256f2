"""The mechanisms' comparison table (the seed's table as data), from the drafters' own facts."""

from __future__ import annotations

import dataclasses

from drafters import REGISTRY
from drafters.base import MechanismFacts

FACT_FIELDS = [f.name for f in dataclasses.fields(MechanismFacts)]
HEADER = ["drafter", "checkpoint", "replay", *FACT_FIELDS]


def comparison_rows() -> list[list[str]]:
    return [
        [name, "yes" if cls.needs_checkpoint else "no", str(cls.replay), *(getattr(cls.facts, f) for f in FACT_FIELDS)]
        for name, cls in REGISTRY.items()
    ]


def facts_of(drafter: str) -> MechanismFacts | None:
    cls = REGISTRY.get(drafter)
    return cls.facts if cls else None
