"""DFlash: a small block-diffusion drafter that proposes a whole block in one parallel pass."""

from __future__ import annotations

from dataclasses import dataclass

from drafters.base import MechanismFacts, ReplayKind
from drafters.checkpoint_drafter import CheckpointDrafter, CheckpointDrafterConfig
from speclens.errors import ConfigError
from speclens.model_facts import ModelFacts


@dataclass
class DflashConfig(CheckpointDrafterConfig):
    """drafter=dflash: needs drafter.model=<local path or hub id>."""


def block_size(draft: ModelFacts) -> int | None:
    value = draft.raw.get("block_size") or (draft.raw.get("dflash_config") or {}).get("block_size")
    return int(value) if value else None


class Dflash(CheckpointDrafter):
    config_class = DflashConfig
    vllm_method = "dflash"
    replay = ReplayKind.estimated
    required_architectures = ("DFlashDraftModel",)
    facts = MechanismFacts(
        architecture="a few-layer block-diffusion drafter on the target's hidden states",
        inputs="fused target hidden states",
        generation="one parallel pass",
        release="separate model",
        training_cost="high",
        serve_memory="weights + small KV cache",
        speculation_cost="~5 layers once",
        best_fit="long drafts at low batch sizes: many tokens from one draft pass",
    )

    def check_pair(self, d: int, target: ModelFacts, draft: ModelFacts | None) -> None:
        super().check_pair(d, target, draft)
        assert draft is not None
        if "dflash_config" not in draft.raw:
            raise ConfigError(
                f"drafter.model={draft.path} has no dflash_config in its config.json; not a DFlash draft."
            )
        block = block_size(draft)
        # A block is the step's anchor token plus block_size - 1 proposals: D is the block size minus one.
        if block is not None and d > block - 1:
            raise ConfigError(
                f"d={d} with drafter=dflash: DFlash drafts one block per step (the anchor token plus "
                f"block_size - 1 proposals) and drafter.model has block_size={block}, so d <= {block - 1}."
            )
