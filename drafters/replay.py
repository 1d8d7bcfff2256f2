"""Offline replay of a drafter over one greedy generation of the target.

Under greedy verification a step accepts the longest prefix of the proposal that
equals the target's own next tokens, so knowing the target's greedy token stream
(continued past where the run stops, since vLLM counts the last step's accepted
tokens before truncation) and the drafter's proposal at each step start gives the
exact per-step acceptance for any D, without running vLLM per D.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from runners.engine import DraftedStep

if TYPE_CHECKING:
    from drafters.base import Drafter

# Stands for a draft token after the first miss: its value is unknown and cannot be accepted.
UNKNOWN_TOKEN = -1


@dataclass(frozen=True)
class ReplayContext:
    """One request turn: prompt + the target's greedy continuation (past the stop)."""

    tokens: np.ndarray
    prompt_len: int
    # Tokens a normal run outputs for this turn.
    output_tokens: int
    max_model_len: int
    # The draft model's argmax after each prefix: [j] predicts position j + 1 (draft models only).
    draft_predictions: np.ndarray | None = None


def accepted_prefix(proposal, tokens: np.ndarray, pos: int) -> int:
    n = 0
    for j, token in enumerate(proposal):
        if pos + j >= len(tokens) or token != tokens[pos + j]:
            break
        n += 1
    return n


def replay_turn(drafter: "Drafter", ctx: ReplayContext, d: int) -> tuple[list[DraftedStep], int]:
    """Drafted steps and target forward passes of one turn at draft length `d`."""
    pos = ctx.prompt_len + 1  # the prefill step samples the first token
    end = ctx.prompt_len + ctx.output_tokens
    steps: list[DraftedStep] = []
    target_steps = 1
    while pos < end:
        target_steps += 1
        proposal = drafter.replay_proposal(ctx, pos, d)
        if len(proposal) == 0:
            pos += 1
            continue
        accepted = accepted_prefix(proposal, ctx.tokens, pos)
        steps.append(DraftedStep(pos, len(proposal), accepted))
        pos += accepted + 1
    return steps, target_steps
