"""Plain decoding: the baseline with no speculation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from drafters.base import Drafter, DrafterConfig


@dataclass
class NoDrafterConfig(DrafterConfig):
    name: str = "none"


class NoDrafter(Drafter):
    name = "none"
    config_class = NoDrafterConfig

    @property
    def speculative(self) -> bool:
        return False

    def speculative_config(self, d: int) -> dict[str, Any] | None:
        return None
