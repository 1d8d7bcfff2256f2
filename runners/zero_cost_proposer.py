"""A proposer that drafts D tokens per request at no cost, for timing verification alone.

Run through vLLM's `custom_class` method (`speculative_config={"method": "custom_class",
"model": "runners.zero_cost_proposer.ZeroCostProposer", "num_speculative_tokens": D}`),
every decode step verifies B·(1 + D) tokens while drafting costs a list comprehension:
its step time is T_verif(B·(1 + D)). Which tokens it proposes does not matter for timing
(it repeats each request's last token); acceptance in this pass is never reported.
"""

from __future__ import annotations

from typing import Any

CLASS_PATH = "runners.zero_cost_proposer.ZeroCostProposer"


class ZeroCostProposer:
    def __init__(self, vllm_config: Any) -> None:
        self.num_tokens = vllm_config.speculative_config.num_speculative_tokens

    def load_model(self, target_model: Any) -> None:
        """Nothing to load (vLLM's CPU runner calls this on every drafter)."""

    def propose(self, sampled_token_ids: list[list[int]], *args: Any, **kwargs: Any) -> list[list[int]]:
        return [[ids[-1]] * self.num_tokens if ids else [] for ids in sampled_token_ids]
