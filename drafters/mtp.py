"""Multi-token prediction: the target's own MTP layer(s) draft, no separate checkpoint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from drafters.base import (
    Drafter,
    DrafterConfig,
    MechanismFacts,
    ReplayKind,
    check_path_hints,
)
from drafters.replay import chain_proposal
from speclens.errors import ConfigError
from speclens.model_facts import ModelFacts, text_config

# config.json fields that count a target's MTP layers, by model family.
MTP_LAYER_FIELDS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers")


@dataclass
class MtpConfig(DrafterConfig):
    # vLLM 0.32 runs every family as `mtp` (deepseek_mtp, mimo_mtp, qwen3_next_mtp, … are
    # deprecated aliases it rewrites); set this only to pass another method name through.
    method: str | None = None


def mtp_layers(target: ModelFacts) -> int:
    text = text_config(target.raw)
    return max((int(text.get(f) or 0) for f in MTP_LAYER_FIELDS), default=0)


class Mtp(Drafter):
    config_class = MtpConfig
    # vLLM's proposer runs one MTP module as a chain, as an EAGLE head (module 0 at every draft):
    # its first k drafts from a position do not depend on D >= k (runners/head_chain.py).
    replay = ReplayKind.exact
    replay_head = "mtp"
    facts = MechanismFacts(
        architecture="the target's own multi-token-prediction layer(s)",
        inputs="target hidden states",
        generation="D serial passes",
        release="part of the base checkpoint",
        training_cost="none (comes with the target)",
        serve_memory="weights + small KV cache",
        speculation_cost="1 layer serial",
        best_fit="targets released with MTP layers (DeepSeek-V3, MiMo, Qwen3-Next, GLM-4.5)",
    )

    def replay_proposal(self, ctx, pos: int, d: int, proposer: str = ""):
        return chain_proposal(ctx, pos, d)

    def speculative_config(self, d: int) -> dict[str, Any]:
        # No `model`: vLLM takes the MTP layers from the target checkpoint.
        return {"method": self.cfg.method or "mtp", "num_speculative_tokens": d}

    def validate(self, d: int, target: ModelFacts, draft: ModelFacts | None) -> None:
        check_path_hints("mtp", target.path, "target.model")
        super().validate(d, target, draft)

    def check_pair(self, d: int, target: ModelFacts, draft: ModelFacts | None) -> None:
        super().check_pair(d, target, draft)
        layers = mtp_layers(target)
        if layers < 1:
            raise ConfigError(
                f"target.model={target.path} has no multi-token-prediction layers (its config.json sets none "
                f"of {', '.join(MTP_LAYER_FIELDS)}); drafter=mtp needs a target trained with MTP. "
                "Choose another drafter (eagle3, draft_model, ngram) for this target."
            )
        # vLLM: D up to the number of MTP layers, or a multiple of it (the layers are re-run).
        if d > layers and d % layers:
            raise ConfigError(
                f"d={d} with drafter=mtp: target.model has {layers} MTP layers; vLLM needs d <= {layers} "
                f"or a multiple of {layers}."
            )
