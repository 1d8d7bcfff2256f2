"""Shared base for drafters that load a draft checkpoint (draft model, EAGLE heads)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from drafters.base import Drafter, DrafterConfig, ModelFacts
from evals.errors import ConfigError


@dataclass
class CheckpointDrafterConfig(DrafterConfig):
    # Local folder or hub id; `'${target.model}'` drafts with the target itself.
    model: str | None = None
    # "greedy" or "probabilistic" (vLLM's draft_sample_method).
    sample_method: str = "greedy"


class CheckpointDrafter(Drafter):
    needs_checkpoint = True
    vllm_method: str = ""

    def checkpoint(self) -> str | None:
        return self.cfg.model

    def speculative_config(self, d: int) -> dict[str, Any]:
        return {
            "method": self.vllm_method,
            "model": self.cfg.model,
            "num_speculative_tokens": d,
            "draft_sample_method": self.cfg.sample_method,
        }

    def validate(self, d: int, target: ModelFacts, draft: ModelFacts | None) -> None:
        super().validate(d, target, draft)
        if self.cfg.sample_method not in ("greedy", "probabilistic"):
            raise ConfigError(
                f"drafter.sample_method={self.cfg.sample_method!r}: choose greedy or probabilistic."
            )
        if draft is None:
            raise ConfigError(f"drafter={self.name} needs drafter.model=<local path or hub id>.")
        if draft.vocab_size != target.vocab_size:
            raise ConfigError(
                f"drafter.model={draft.path} has vocab_size={draft.vocab_size} but "
                f"target.model={target.path} has vocab_size={target.vocab_size}; "
                f"drafter={self.name} needs the target's vocabulary."
            )
