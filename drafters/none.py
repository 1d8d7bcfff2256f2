"""Plain decoding: the baseline with no speculation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from drafters.base import Drafter, DrafterConfig, MechanismFacts


@dataclass
class NoDrafterConfig(DrafterConfig):
    """drafter=none: plain decoding, no keys."""


class NoDrafter(Drafter):
    config_class = NoDrafterConfig
    facts = MechanismFacts(
        architecture="none (plain decoding)",
        inputs="-",
        generation="-",
        release="none",
        training_cost="none",
        serve_memory="none",
        speculation_cost="none",
        best_fit="the baseline every speedup is measured against",
    )

    @property
    def speculative(self) -> bool:
        return False

    def speculative_config(self, d: int) -> dict[str, Any] | None:
        return None
