"""Why a greedy speculative output differs from plain decoding: a numerical near-tie, or a
divergence (a broken engine or drafter).

Greedy speculative decoding is lossless in exact arithmetic. In floating point the verify pass
runs the same tokens through kernels of another shape (more tokens per step, another reduction
order), which moves each logit by a few units in the last place (ulps). Where plain decoding's
top two tokens were closer than that, the two runs may pick different tokens: a near-tie.

The bound: the top logits of these language models lie around 16-32, where a float with a p-bit
significand has ulp = 2^(5 - p). A top-2 margin (logit, i.e. log-probability, difference) under
NEAR_TIE_ULPS such ulps is a near-tie:

    bfloat16 (p = 8)   ulp 0.125      bound 0.5
    float16  (p = 11)  ulp 0.0156     bound 0.0625
    float32  (p = 24)  ulp 1.9e-6     bound 7.6e-6

A larger margin cannot be flipped by rounding: a divergence.
"""

from __future__ import annotations

from typing import Iterable, Sequence

# Significand bits (the implicit bit included) of each dtype speclens runs in.
SIGNIFICAND_BITS = {"bfloat16": 8, "float16": 11, "half": 11, "float32": 24, "float": 24}
NEAR_TIE_ULPS = 4
# log2 of the lower end of the top logits' range [16, 32).
TOP_LOGIT_EXPONENT = 4

NEAR_TIE = "near_tie"
DIVERGENCE = "divergence"
# No top-2 margin to judge by (the runner gives none): counted with the divergences.
UNEXPLAINED = "unexplained"
# A later turn whose prompt already differed (it carries an earlier turn's answer, which parted):
# explained by that earlier turn's mismatch, not counted again.
FOLLOWS_EARLIER_TURN = "follows_earlier_turn"


def top2_margin(logprobs: Iterable[float]) -> float:
    """The top log-probability minus the runner-up's (infinite where only one token is given)."""
    values = sorted(logprobs, reverse=True)
    return values[0] - values[1] if len(values) > 1 else float("inf")


def near_tie_bound(dtype: str) -> float:
    """The largest top-2 margin that rounding in `dtype` can flip (module docstring)."""
    bits = SIGNIFICAND_BITS.get(str(dtype), SIGNIFICAND_BITS["float32"])
    return NEAR_TIE_ULPS * 2.0 ** (TOP_LOGIT_EXPONENT + 1 - bits)


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int:
    """The first output position where the two differ (the shorter length if one is a prefix)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def classify(margin: float | None, dtype: str) -> str:
    if margin is None:
        return UNEXPLAINED
    return NEAR_TIE if margin < near_tie_bound(dtype) else DIVERGENCE
