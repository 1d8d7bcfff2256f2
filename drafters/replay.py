"""Offline replay of a drafter over one greedy generation of the target.

Under greedy verification a step accepts the longest prefix of the proposal that
equals the target's own next tokens, so knowing the target's greedy token stream
(continued past where the run stops, since vLLM counts the last step's accepted
tokens before truncation) and the drafter's proposal at each step start gives the
exact per-step acceptance for any D, without running vLLM per D.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

import numpy as np

from speclens.generation import DraftedStep

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
    # An EAGLE head's chained drafts, [d_max, len(tokens)]: [k - 1, p] is the k-th draft of the chain
    # whose first is taken at position p, while its drafts so far were right (runners/head_chain.py).
    chain_drafts: np.ndarray | None = None


class Propose(Protocol):
    """A drafter's proposal at a step, where it depends only on its own request (drafters/base.py)."""

    def __call__(self, ctx: "ReplayContext", pos: int, d: int) -> Any: ...


def accepted_prefix(proposal, tokens: np.ndarray, pos: int) -> int:
    n = 0
    for j, token in enumerate(proposal):
        if pos + j >= len(tokens) or token != tokens[pos + j]:
            break
        n += 1
    return n


def forced_proposal(tokens: np.ndarray, pos: int, d: int, draft_at: Callable[[int], int]) -> list[int]:
    """A proposal at a step starting at `pos` from drafts computed along the target's own tokens:
    draft k (`draft_at(k)`) holds while drafts 1..k-1 were the target's tokens; after the first
    miss the drafts' inputs are unknown, and so are they (none can be accepted)."""
    proposal: list[int] = []
    for k in range(1, d + 1):
        if proposal and proposal[-1] != tokens[pos + k - 2]:
            proposal.extend([UNKNOWN_TOKEN] * (d - k + 1))
            break
        proposal.append(draft_at(k))
    return proposal


def chain_proposal(ctx: ReplayContext, pos: int, d: int) -> list[int]:
    """A head's, MTP layer's or parallel draft's proposal at a step starting at `pos`: the drafts
    from position pos - 2 (where it sees the token just sampled at pos - 1)."""
    start, chains = pos - 2, ctx.chain_drafts
    assert chains is not None, "a head's replay needs its chains (runners/replay_chains.py)"

    def draft_at(k: int) -> int:
        return int(chains[k - 1, start]) if k <= chains.shape[0] and start < chains.shape[1] else UNKNOWN_TOKEN

    return forced_proposal(ctx.tokens, pos, d, draft_at)


def replay_turn(propose: Propose, ctx: ReplayContext, d: int) -> tuple[list[DraftedStep], int]:
    """Drafted steps and target forward passes of one turn at draft length `d`."""
    pos = ctx.prompt_len + 1  # the prefill step samples the first token
    end = ctx.prompt_len + ctx.output_tokens
    steps: list[DraftedStep] = []
    target_steps = 1
    while pos < end:
        target_steps += 1
        proposal = propose(ctx, pos, d)
        if len(proposal) == 0:
            pos += 1
            continue
        accepted = accepted_prefix(proposal, ctx.tokens, pos)
        steps.append(DraftedStep(pos, len(proposal), accepted))
        pos += accepted + 1
    return steps, target_steps


def condense(slots: list) -> list:
    """vLLM's InputBatch.condense: the last live request fills the lowest empty slot, repeatedly."""
    slots = list(slots)
    while True:
        empty = [i for i, s in enumerate(slots) if s is None]
        live = [i for i, s in enumerate(slots) if s is not None]
        if not empty or not live or empty[0] > live[-1]:
            return [s for s in slots if s is not None]
        slots[empty[0]], slots[live[-1]] = slots[live[-1]], None


def lockstep_replay(batch: list[ReplayContext], propose, request_prefix: str) -> list[tuple[list[DraftedStep], int]]:
    """Replay one batch step by step with a proposer whose state is shared by all requests.

    `propose(request_id, ctx, sampled_tokens, num_tokens)` is called once per engine step for
    every request still in the batch, in batch order, right after that step's sampling.
    """
    n = len(batch)
    pos = [ctx.prompt_len + 1 for ctx in batch]  # the prefill step samples one token each
    sampled = [[int(ctx.tokens[ctx.prompt_len])] for ctx in batch]
    steps: list[list[DraftedStep]] = [[] for _ in range(n)]
    target_steps = [1] * n
    order = list(range(n))
    while order:
        drafts = {i: propose(f"{request_prefix}/{i}", batch[i], sampled[i], pos[i]) for i in order}
        # Requests that reached their end finished in the step just run; they leave the batch.
        slots = [i if pos[i] < batch[i].prompt_len + batch[i].output_tokens else None for i in order]
        order = condense(slots)
        for i in order:
            target_steps[i] += 1
            draft, ctx = drafts[i], batch[i]
            accepted = accepted_prefix(draft, ctx.tokens, pos[i]) if len(draft) else 0
            if len(draft):
                steps[i].append(DraftedStep(pos[i], len(draft), accepted))
            sampled[i] = [int(t) for t in ctx.tokens[pos[i] : pos[i] + accepted + 1]]
            pos[i] += accepted + 1
    return list(zip(steps, target_steps))
