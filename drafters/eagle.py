"""EAGLE (and EAGLE-3) heads: a small head on the target's hidden states, run D times per step."""

from __future__ import annotations

from dataclasses import dataclass

from drafters.base import MechanismFacts, ReplayKind
from drafters.checkpoint_drafter import CheckpointDrafter, ParallelDraftingConfig
from drafters.replay import chain_proposal
from speclens.errors import ConfigError
from speclens.model_facts import ModelFacts, text_config


@dataclass
class EagleConfig(ParallelDraftingConfig):
    """drafter=eagle: needs drafter.model=<local path or hub id>."""


class Eagle(CheckpointDrafter):
    config_class = EagleConfig
    facts = MechanismFacts(
        architecture="one decoder layer head on the target's last hidden state",
        inputs="target hidden states",
        generation="D serial passes",
        release="post-training head",
        training_cost="medium",
        serve_memory="weights + small KV cache",
        speculation_cost="1 layer serial",
        best_fit="chat and low-latency serving where a trained head exists",
    )
    vllm_method = "eagle"
    # The head's first k drafts from a position do not depend on D >= k: its chains from every
    # position, computed once from the target's states (runners/head_chain.py), replay each D.
    replay = ReplayKind.exact
    head_kind = "eagle"

    @property
    def replay_head(self) -> str | None:  # type: ignore[override]
        """Its chains (runners/head_chain.py); drafting in parallel (P-EAGLE) none: its drafts do not
        depend on D either, but its mask slots are not computed."""
        return None if self.parallel else self.head_kind

    # Fragments that mark the head generation in `architectures` or `model_type`.
    kind_marker = "eagle"

    def checkpoint_kind_error(self, draft: ModelFacts) -> str | None:
        names = [a.lower() for a in draft.architectures] + [
            str(draft.raw.get("model_type", "")).lower(),
            str(draft.raw.get("speculators_model_type", "")).lower(),
        ]
        is_eagle3 = any("eagle3" in n for n in names)
        if (self.kind_marker == "eagle3") != is_eagle3 or not any("eagle" in n for n in names):
            return (
                f"its architectures are {list(draft.architectures)} (model_type {draft.raw.get('model_type')!r}); "
                f"drafter={self.name} needs an {'EAGLE-3' if self.kind_marker == 'eagle3' else 'EAGLE(-1/2)'} head"
            )
        return None

    def replay_proposal(self, ctx, pos: int, d: int, proposer: str = ""):
        return chain_proposal(ctx, pos, d)

    def input_width(self, draft: ModelFacts) -> tuple[str, int | None]:
        """The key and width of the target hidden states the head takes in."""
        return "hidden_size", draft.hidden_size

    def check_pair(self, d: int, target: ModelFacts, draft: ModelFacts | None) -> None:
        super().check_pair(d, target, draft)
        assert draft is not None
        # The head consumes the target's hidden states, so the widths must agree.
        key, width = self.input_width(draft)
        if width != target.hidden_size:
            raise ConfigError(
                f"drafter.model={draft.path} has {key}={width} but "
                f"target.model={target.path} has hidden_size={target.hidden_size}; "
                f"a drafter={self.name} head must be trained for this target."
            )


@dataclass
class Eagle3Config(ParallelDraftingConfig):
    """drafter=eagle3: needs drafter.model=<local path or hub id>."""


class Eagle3(Eagle):
    config_class = Eagle3Config
    kind_marker = "eagle3"
    head_kind = "eagle3"

    def input_width(self, draft: ModelFacts) -> tuple[str, int | None]:
        # vLLM's EAGLE-3 heads (llama/qwen3/deepseek_eagle3.py) size their fusion layer by
        # target_hidden_size where the config declares one: a head narrower than its target.
        for config in (draft.raw, text_config(draft.raw)):
            if config.get("target_hidden_size"):
                return "target_hidden_size", config["target_hidden_size"]
        return super().input_width(draft)

    facts = MechanismFacts(
        architecture="one decoder layer head on fused low/mid/high target hidden states",
        inputs="fused target hidden states",
        generation="D serial passes",
        release="post-training head",
        training_cost="medium",
        serve_memory="weights + small KV cache",
        speculation_cost="1 layer serial",
        best_fit="general chat, coding and reasoning; the highest AL among heads at moderate D",
    )
    vllm_method = "eagle3"
