"""Proposers that cost nothing, for timing verification alone.

`ZeroCostProposer` drafts D tokens per request at no cost. Run through vLLM's `custom_class`
method (`speculative_config={"method": "custom_class", "model":
"runners.zero_cost_proposer.ZeroCostProposer", "num_speculative_tokens": D}`), every decode step
verifies B·(1 + D) tokens while drafting costs a list comprehension: its step time is
T_verif(B·(1 + D)). Which tokens it proposes does not matter for timing (it repeats each
request's last token); acceptance in this pass is never reported.

`IdleProposer` proposes nothing, at every step, with speculation switched on at D: vLLM's V1 model
runner still takes the speculative path for every step (its rejection sampler runs over zero
drafts, the proposer is called, the scheduler keeps the speculative bookkeeping: V1's own n-gram
proposer does the same on a step where it finds no match), so each step verifies B tokens, as
plain decoding does, through the speculative machinery: its step time is T_idle(B), and
T_idle(B) / T_verif(B) − 1 is the K=0 tax (speclens/figures/costs.py). vLLM refuses
num_speculative_tokens = 0, hence D with empty proposals.
"""

from __future__ import annotations

from typing import Any

CLASS_PATH = "runners.zero_cost_proposer.ZeroCostProposer"
IDLE_CLASS_PATH = "runners.zero_cost_proposer.IdleProposer"


class ZeroCostProposer:
    def __init__(self, vllm_config: Any) -> None:
        self.num_tokens = vllm_config.speculative_config.num_speculative_tokens

    def load_model(self, target_model: Any) -> None:
        """Nothing to load (vLLM's CPU runner calls this on every drafter)."""

    def propose(self, sampled_token_ids: list[list[int]], *args: Any, **kwargs: Any) -> list[list[int]]:
        return [[ids[-1]] * self.num_tokens if ids else [] for ids in sampled_token_ids]


class IdleProposer(ZeroCostProposer):
    """Proposes nothing for any request: speculation on, nothing drafted."""

    def propose(self, sampled_token_ids: list[list[int]], *args: Any, **kwargs: Any) -> list[list[int]]:
        return [[] for _ in sampled_token_ids]
