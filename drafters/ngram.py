"""Prompt-lookup (n-gram) drafting: proposes the continuation of the last matching n-gram."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from drafters.base import Drafter, DrafterConfig, MechanismFacts, ReplayKind
from speclens.errors import ConfigError
from speclens.model_facts import ModelFacts


@dataclass
class NgramConfig(DrafterConfig):
    prompt_lookup_min: int = 2
    prompt_lookup_max: int = 5


class Ngram(Drafter):
    config_class = NgramConfig
    facts = MechanismFacts(
        architecture="n-gram match over the request's own context",
        inputs="token stream",
        generation="one lookup",
        release="none",
        training_cost="none",
        serve_memory="none",
        speculation_cost="lookup",
        best_fit="outputs that copy the input: summarization, RAG, code editing",
    )
    replay = ReplayKind.exact

    def speculative_config(self, d: int) -> dict[str, Any]:
        return {
            "method": "ngram",
            "num_speculative_tokens": d,
            "prompt_lookup_min": self.cfg.prompt_lookup_min,
            "prompt_lookup_max": self.cfg.prompt_lookup_max,
        }

    def replay_proposal(self, ctx, pos: int, d: int):
        # vLLM's own matcher, so replayed proposals are vLLM's by construction.
        from vllm.v1.spec_decode.ngram_proposer import (
            _find_longest_matched_ngram_and_propose_tokens,
        )

        return _find_longest_matched_ngram_and_propose_tokens(
            ctx.tokens[:pos], self.cfg.prompt_lookup_min, self.cfg.prompt_lookup_max, ctx.max_model_len, d
        )

    def validate(self, d: int, target: ModelFacts, draft: ModelFacts | None) -> None:
        super().validate(d, target, draft)
        lo, hi = self.cfg.prompt_lookup_min, self.cfg.prompt_lookup_max
        if lo < 1 or hi < lo:
            raise ConfigError(
                f"drafter.prompt_lookup_min={lo}, drafter.prompt_lookup_max={hi}: "
                "need 1 <= prompt_lookup_min <= prompt_lookup_max."
            )
