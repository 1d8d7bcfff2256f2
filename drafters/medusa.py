"""Medusa: extra decoding heads on the target's last hidden state, one head per draft position."""

from __future__ import annotations

from dataclasses import dataclass

from drafters.base import MechanismFacts, ReplayKind
from drafters.checkpoint_drafter import CheckpointDrafter, CheckpointDrafterConfig
from speclens.errors import ConfigError
from speclens.model_facts import ModelFacts


@dataclass
class MedusaConfig(CheckpointDrafterConfig):
    """drafter=medusa: needs drafter.model=<local path or hub id>."""


class Medusa(CheckpointDrafter):
    config_class = MedusaConfig
    vllm_method = "medusa"
    replay = ReplayKind.estimated
    required_architectures = ("MedusaModel",)
    facts = MechanismFacts(
        architecture="D residual MLP heads on the target's last hidden state",
        inputs="target hidden states",
        generation="one parallel pass",
        release="post-training head",
        training_cost="low",
        serve_memory="weights, no KV cache",
        speculation_cost="D small heads once",
        best_fit="cheap drafting where an EAGLE head is not available",
    )

    def check_pair(self, d: int, target: ModelFacts, draft: ModelFacts | None) -> None:
        super().check_pair(d, target, draft)
        assert draft is not None
        heads = draft.raw.get("num_heads")
        # vLLM builds exactly D heads; fewer in the checkpoint fails at load.
        if heads is not None and d > int(heads):
            raise ConfigError(
                f"d={d} with drafter=medusa: drafter.model has {heads} heads, one per draft position, so d <= {heads}."
            )
        if draft.hidden_size != target.hidden_size:
            raise ConfigError(
                f"drafter.model={draft.path} has hidden_size={draft.hidden_size} but target.model has "
                f"hidden_size={target.hidden_size}; Medusa heads must be trained for this target."
            )
