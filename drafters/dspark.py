"""DSpark: one parallel draft pass plus a sequential correction (vLLM's V2 model runner only)."""

from __future__ import annotations

from dataclasses import dataclass

from drafters.base import MechanismFacts, ReplayKind
from drafters.checkpoint_drafter import CheckpointDrafter, CheckpointDrafterConfig
from speclens.errors import ConfigError
from speclens.model_facts import ModelFacts


@dataclass
class DsparkConfig(CheckpointDrafterConfig):
    """drafter=dspark: needs drafter.model=<local path or hub id>."""


def v2_runner_available() -> bool:
    """vLLM's V2 model runner needs Triton with a backend for this device."""
    # vllm is loaded only where an engine or its code is needed: light commands never pay for it.
    from vllm.triton_utils import HAS_TRITON

    return bool(HAS_TRITON)


class Dspark(CheckpointDrafter):
    config_class = DsparkConfig
    vllm_method = "dspark"
    replay = ReplayKind.estimated
    facts = MechanismFacts(
        architecture="a small parallel drafter with a sequential correction step",
        inputs="fused target hidden states",
        generation="one parallel pass + sequential correction",
        release="separate model",
        training_cost="high",
        serve_memory="weights + small KV cache",
        speculation_cost="~5 layers once + a light correction",
        best_fit="long drafts where a one-pass drafter's later positions are weak",
    )

    def validate(self, d: int, target: ModelFacts, draft: ModelFacts | None) -> None:
        if not v2_runner_available():
            raise ConfigError(
                "drafter=dspark needs vLLM's V2 model runner, which needs Triton with a backend for this "
                "device; this build has none (vLLM: 'Model Runner V1 does not support: dspark speculative "
                "decoding'). Run it on a GPU machine with the CUDA build of vLLM."
            )
        super().validate(d, target, draft)

    def check_pair(self, d: int, target: ModelFacts, draft: ModelFacts | None) -> None:
        super().check_pair(d, target, draft)
        assert draft is not None
        block = draft.raw.get("block_size")
        if block is not None and d > int(block):
            raise ConfigError(f"d={d} with drafter=dspark: drafter.model has block_size={block}, so d <= {block}.")
