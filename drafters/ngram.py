"""Prompt-lookup (n-gram) drafting: proposes the continuation of the last matching n-gram."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from drafters.base import Drafter, DrafterConfig, MechanismFacts, ReplayKind
from speclens.errors import ConfigError
from speclens.model_facts import ModelFacts


@dataclass
class NgramConfig(DrafterConfig):
    prompt_lookup_min: int = 2
    prompt_lookup_max: int = 5


# V1's proposer (NgramProposer, vllm/v1/spec_decode/ngram_proposer.py) and Model Runner V2's
# (NgramGPUSpeculator, vllm/v1/worker/gpu/spec_decode/ngram/speculator.py).
PROPOSERS = ("v1", "v2")


def ngram_v2_proposal(tokens: np.ndarray, min_n: int, max_n: int, k: int) -> np.ndarray:
    """What Model Runner V2's n-gram speculator drafts after `tokens`: the longest suffix n-gram
    (min_n <= n <= max_n) that also occurs earlier, at its rightmost earlier occurrence, and the k
    tokens that followed it; slots past the end, or all k where nothing matches, hold the last
    token. Always k drafts. (V1's proposer takes the leftmost occurrence and drafts nothing without
    a match.) A transcription of vLLM 0.32's two Triton kernels, checked against them under Triton's
    interpreter (tests/integration/test_ngram_v2.py)."""
    k = max(k, 0)
    drafts = np.full(k, tokens[-1] if len(tokens) else 0, dtype=np.int64)
    seq_len = len(tokens)
    for n in range(min(max_n, seq_len - 1), min_n - 1, -1):
        # occurrences start at 0 .. seq_len - n - 1: never the suffix itself
        windows = np.lib.stride_tricks.sliding_window_view(tokens[: seq_len - 1], n)
        hits = np.flatnonzero((windows == tokens[seq_len - n :]).all(axis=1))
        if hits.size:
            follow = tokens[hits[-1] + n : hits[-1] + n + k]
            drafts[: len(follow)] = follow
            return drafts
    return drafts


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

    # vLLM's two model runners draft n-grams differently (docs/usage.md#model-runner): replay draws both.
    replay_proposers = PROPOSERS

    def replay_proposal(self, ctx, pos: int, d: int, proposer: str = "v1"):
        lo, hi = self.cfg.prompt_lookup_min, self.cfg.prompt_lookup_max
        if proposer == "v2":
            # bounded by the model's window as V1's proposal is (only the last steps before it differ)
            return ngram_v2_proposal(ctx.tokens[:pos], lo, hi, min(d, ctx.max_model_len - pos))
        # vLLM's own matcher, so replayed proposals are vLLM's by construction.
        from vllm.v1.spec_decode.ngram_proposer import (
            _find_longest_matched_ngram_and_propose_tokens,
        )

        return _find_longest_matched_ngram_and_propose_tokens(ctx.tokens[:pos], lo, hi, ctx.max_model_len, d)

    def validate(self, d: int, target: ModelFacts, draft: ModelFacts | None) -> None:
        super().validate(d, target, draft)
        lo, hi = self.cfg.prompt_lookup_min, self.cfg.prompt_lookup_max
        if lo < 1 or hi < lo:
            raise ConfigError(
                f"drafter.prompt_lookup_min={lo}, drafter.prompt_lookup_max={hi}: "
                "need 1 <= prompt_lookup_min <= prompt_lookup_max."
            )
