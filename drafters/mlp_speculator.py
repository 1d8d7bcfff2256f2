"""MLP speculator: listed so that asking for it gets a clear answer; vLLM's V1 engine disables it."""

from __future__ import annotations

from dataclasses import dataclass

from drafters.base import MechanismFacts
from drafters.checkpoint_drafter import CheckpointDrafter, CheckpointDrafterConfig
from speclens.errors import ConfigError
from speclens.model_facts import ModelFacts


@dataclass
class MlpSpeculatorConfig(CheckpointDrafterConfig):
    """drafter=mlp_speculator: needs drafter.model=<local path or hub id>."""


class MlpSpeculator(CheckpointDrafter):
    config_class = MlpSpeculatorConfig
    vllm_method = "mlp_speculator"
    facts = MechanismFacts(
        architecture="small MLP stages on the target's last hidden state",
        inputs="target hidden states",
        generation="D serial passes",
        release="post-training head",
        training_cost="low",
        serve_memory="weights, no KV cache",
        speculation_cost="1 MLP stage serial",
        best_fit="(not runnable in vLLM's V1 engine)",
    )

    def validate(self, d: int, target: ModelFacts, draft: ModelFacts | None) -> None:
        raise ConfigError(
            "drafter=mlp_speculator is disabled in vLLM's V1 engine, the only engine of vLLM 0.32 (its "
            "model registry leaves MLPSpeculatorPreTrainedModel out until it is supported in V1). "
            "Use eagle3, mtp, medusa or draft_model."
        )
