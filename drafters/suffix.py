"""Suffix decoding (Arctic Inference): suffix-tree lookup over the prompt and past outputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from drafters.base import Drafter, DrafterConfig, MechanismFacts, ReplayKind
from drafters.replay import lockstep_replay
from speclens.errors import ConfigError
from speclens.model_facts import ModelFacts


@dataclass
class SuffixConfig(DrafterConfig):
    max_tree_depth: int = 24
    max_cached_requests: int = 10000
    max_spec_factor: float = 1.0
    min_token_prob: float = 0.1


class Suffix(Drafter):
    config_class = SuffixConfig
    facts = MechanismFacts(
        architecture="suffix trees over the prompt and past responses (Arctic Inference)",
        inputs="token stream",
        generation="one lookup",
        release="none",
        training_cost="none",
        serve_memory="none",
        speculation_cost="lookup",
        best_fit="repetitive and agentic workloads, outputs that repeat earlier responses",
    )
    replay = ReplayKind.exact
    replay_in_lockstep = True

    def speculative_config(self, d: int) -> dict[str, Any]:
        return {
            "method": "suffix",
            "num_speculative_tokens": d,
            "suffix_decoding_max_tree_depth": self.cfg.max_tree_depth,
            "suffix_decoding_max_cached_requests": self.cfg.max_cached_requests,
            "suffix_decoding_max_spec_factor": self.cfg.max_spec_factor,
            "suffix_decoding_min_token_prob": self.cfg.min_token_prob,
        }

    def replay_batches(self, batches, d: int, proposer: str = ""):
        """Suffix proposals also draw on every other request's response so far (one global
        suffix tree), so the batch is replayed in lockstep, as vLLM's proposer sees it: each
        engine step, every running request (in input-batch order) adds its sampled tokens and
        speculates; finished requests leave the batch and the batch is condensed as vLLM does.
        Assumes every prompt of a batch is prefilled in the first step (see evals.replay)."""
        # optional (built from source by make install): only suffix decoding needs it.
        from arctic_inference.suffix_decoding import SuffixDecodingCache

        cache = SuffixDecodingCache(
            max_tree_depth=self.cfg.max_tree_depth, max_cached_requests=self.cfg.max_cached_requests
        )

        def propose(request_id, ctx, sampled, num_tokens):
            if request_id not in cache.active_requests:
                cache.start_request(request_id, ctx.tokens[: ctx.prompt_len].astype(np.int32))
            cache.add_active_response(request_id, np.asarray(sampled, dtype=np.int32))
            if num_tokens >= ctx.max_model_len:
                return []
            pattern = ctx.tokens[max(0, num_tokens - self.cfg.max_tree_depth) : num_tokens].astype(np.int32)
            draft = cache.speculate(
                request_id,
                pattern,
                max_spec_tokens=min(d, ctx.max_model_len - num_tokens - 1),
                max_spec_factor=self.cfg.max_spec_factor,
                min_token_prob=self.cfg.min_token_prob,
            )
            return list(draft.token_ids)

        return [lockstep_replay(batch, propose, request_prefix=f"turn{b}") for b, batch in enumerate(batches)]

    def max_d(self) -> int:
        # A proposal is a path in the suffix tree: it cannot be longer than the tree is deep.
        return min(super().max_d(), self.cfg.max_tree_depth)

    def validate(self, d: int, target: ModelFacts, draft: ModelFacts | None) -> None:
        super().validate(d, target, draft)
        # optional (built from source by make install): only suffix decoding needs it.
        try:
            import arctic_inference  # noqa: F401
        except ImportError as exc:
            raise ConfigError(
                "drafter=suffix needs arctic-inference==0.1.1, which is not importable "
                f"({exc}); `make install` builds it (see the Makefile)."
            ) from None
