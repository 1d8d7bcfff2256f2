"""An external draft model: a smaller causal LM run D times per step."""

from __future__ import annotations

from dataclasses import dataclass

from drafters.base import MechanismFacts, ReplayKind
from drafters.checkpoint_drafter import CheckpointDrafter, ParallelDraftingConfig
from drafters.replay import UNKNOWN_TOKEN, chain_proposal, forced_proposal

# Architecture-name fragments of heads and special drafters, which are not standalone draft models.
HEAD_MARKERS = ("eagle", "medusa", "dflash", "dspark", "speculator", "mtp")


@dataclass
class DraftModelConfig(ParallelDraftingConfig):
    """drafter=draft_model: needs drafter.model=<local path or hub id>."""


class DraftModel(CheckpointDrafter):
    config_class = DraftModelConfig
    facts = MechanismFacts(
        architecture="small causal LM sharing the target's vocabulary",
        inputs="token ids",
        generation="D serial passes",
        release="separate model",
        training_cost="none (off-the-shelf) to high (distilled)",
        serve_memory="draft weights + full KV cache",
        speculation_cost="full draft forward x D",
        best_fit="a same-family small model exists; low batch sizes",
    )
    vllm_method = "draft_model"
    replay = ReplayKind.exact

    @property
    def replay_needs_draft_predictions(self) -> bool:  # type: ignore[override]
        return not self.parallel

    @property
    def replay_head(self) -> str | None:  # type: ignore[override]
        """Parallel drafting (PARD): its drafts from every start, mask blocks and all
        (runners/parallel_draft.py); serial: the teacher-forced argmax does."""
        return "pard" if self.parallel else None

    def checkpoint_kind_error(self, draft) -> str | None:
        heads = [a for a in draft.architectures if any(k in a.lower() for k in HEAD_MARKERS)]
        if heads or not any(a.endswith("ForCausalLM") for a in draft.architectures):
            return (
                f"its architectures are {list(draft.architectures)}; drafter=draft_model needs a standalone "
                "causal LM (…ForCausalLM). Heads and drafters have their own drafter= (eagle, eagle3, "
                "medusa, dflash, dspark)"
            )
        return None

    def replay_proposal(self, ctx, pos: int, d: int, proposer: str = ""):
        """Greedy drafting from the target's prefix: while the draft agrees with the target, its
        next input is the target's token, so the teacher-forced argmax is its proposal; after the
        first miss its tokens are unknown, and none of them can be accepted. In parallel, the
        drafts of its mask block at pos - 2 (drafters/replay.py chain_proposal)."""
        if self.parallel:
            return chain_proposal(ctx, pos, d)
        predictions = ctx.draft_predictions

        def draft_at(k: int) -> int:
            at = pos + k - 2  # the argmax after the target's prefix up to the token before draft k's
            return int(predictions[at]) if at < len(predictions) else UNKNOWN_TOKEN

        return forced_proposal(ctx.tokens, pos, d, draft_at)
