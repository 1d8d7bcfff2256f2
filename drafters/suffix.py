"""Suffix decoding (Arctic Inference): suffix-tree lookup over the prompt and past outputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from drafters.base import Drafter, DrafterConfig, ModelFacts
from evals.errors import ConfigError


@dataclass
class SuffixConfig(DrafterConfig):
    name: str = "suffix"
    max_tree_depth: int = 24
    max_cached_requests: int = 10000
    max_spec_factor: float = 1.0
    min_token_prob: float = 0.1


class Suffix(Drafter):
    name = "suffix"
    config_class = SuffixConfig
    draft_passes = "lookup"

    def speculative_config(self, d: int) -> dict[str, Any]:
        return {
            "method": "suffix",
            "num_speculative_tokens": d,
            "suffix_decoding_max_tree_depth": self.cfg.max_tree_depth,
            "suffix_decoding_max_cached_requests": self.cfg.max_cached_requests,
            "suffix_decoding_max_spec_factor": self.cfg.max_spec_factor,
            "suffix_decoding_min_token_prob": self.cfg.min_token_prob,
        }

    def max_d(self) -> int:
        # A proposal is a path in the suffix tree: it cannot be longer than the tree is deep.
        return min(super().max_d(), self.cfg.max_tree_depth)

    def validate(self, d: int, target: ModelFacts, draft: ModelFacts | None) -> None:
        super().validate(d, target, draft)
        try:
            import arctic_inference  # noqa: F401
        except ImportError as exc:
            raise ConfigError(
                "drafter=suffix needs arctic-inference==0.1.1, which is not importable "
                f"({exc}); `make install` builds it (see the Makefile)."
            ) from None
