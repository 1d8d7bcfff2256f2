"""Train the small draft model to draft in parallel (PARD's mask-token scheme), for vLLM's
`parallel_drafting`.

vLLM drafts in parallel by feeding the draft model the verified tokens, then D - 1 copies of
the checkpoint's mask token (config.json `pard_token`) at the next positions, and taking the
D outputs of the last verified token and the masks as the D draft tokens
(`vllm/v1/spec_decode/llm_base_proposer.py`). So the draft learns both: at every real position
the next token, as small_lm.py trains it, and at the j-th mask after a cut t the token j + 1
places after t. One sequence holds a sample's real tokens and, behind them, a group of masks for
each of a few cuts; an attention mask lets each group see the real tokens up to its cut and the
group's own earlier masks, and nothing else, so one forward pass trains every cut.

The mask token is SmolLM2's `<empty_output>` (an existing special token that the answers never
hold), its embedding frozen with the rest: the kept layers learn what it means.
"""

from __future__ import annotations

import pathlib
import random
from collections.abc import Callable
from dataclasses import dataclass

from drafters.training.selfdistill import Sample, training_autocast
from drafters.training.small_lm import DraftPlan, distil, save_draft, truncated_target

__all__ = ["MASK_TOKEN", "ParallelDraftPlan", "ParallelDraftResult", "train_parallel_draft_model"]

MASK_TOKEN = 16  # SmolLM2's `<empty_output>`
MASK_TOKEN_KEY = "pard_token"  # the config.json key vLLM reads it from


@dataclass(frozen=True)
class ParallelDraftPlan(DraftPlan):
    max_d: int = 5  # trained for D up to this: max_d - 1 masks after each cut
    cuts_per_sample: int = 8


@dataclass(frozen=True)
class ParallelDraftResult:
    steps: int
    final_loss: float
    heldout_agreement: list[float]  # teacher-forced agreement with the target at draft positions 1..max_d
    num_layers: int
    probe: str | None  # the weights' digest after PROBE_STEPS steps (drafters/training/optimise.py)


@dataclass(frozen=True)
class _Batch:
    ids: object  # [B, L] token ids
    positions: object  # [B, L] rotary positions
    allowed: object  # [B, 1, L, L] bool: row may attend to column
    wanted: object  # [B, L] the token each column should predict, -1 for none
    slot: object  # [B, L] the draft position each column trains (1: next token, j + 1: j-th mask), 0 for none


def _cuts(sample: Sample, count: int, rng: random.Random | None) -> list[int]:
    """Positions of the last verified token, inside the answer and with a next token to predict:
    `count` drawn at random (training), or every one (held out, rng None)."""
    first, last = len(sample.prompt_ids) - 1, len(sample.ids) - 2
    every = list(range(max(first, 0), last + 1))
    if rng is None or len(every) <= count:
        return every
    return sorted(rng.sample(every, count))


def _batch(samples: list[Sample], masks: int, cuts: list[list[int]]) -> _Batch:
    import torch

    widths = [len(s.ids) + len(c) * masks for s, c in zip(samples, cuts, strict=True)]
    width = max(widths)
    ids = torch.zeros(len(samples), width, dtype=torch.long)
    positions = torch.zeros(len(samples), width, dtype=torch.long)
    allowed = torch.zeros(len(samples), 1, width, width, dtype=torch.bool)
    wanted = torch.full((len(samples), width), -1, dtype=torch.long)
    slot = torch.zeros(len(samples), width, dtype=torch.long)
    for i, (sample, sample_cuts) in enumerate(zip(samples, cuts, strict=True)):
        tokens = sample.ids
        n = len(tokens)
        ids[i, :n] = torch.tensor(tokens)
        positions[i, :n] = torch.arange(n)
        allowed[i, 0, :n, :n] = torch.ones(n, n, dtype=torch.bool).tril()
        answer_from = len(sample.prompt_ids) - 1
        wanted[i, answer_from : n - 1] = torch.tensor(tokens[answer_from + 1 :])
        slot[i, answer_from : n - 1] = 1
        for g, t in enumerate(sample_cuts):
            start = n + g * masks
            group = slice(start, start + masks)
            ids[i, group] = MASK_TOKEN
            positions[i, group] = torch.arange(t + 1, t + 1 + masks)
            allowed[i, 0, group, : t + 1] = True
            allowed[i, 0, group, group] = torch.ones(masks, masks, dtype=torch.bool).tril()
            for j in range(1, masks + 1):
                if t + 1 + j < n:
                    wanted[i, start + j - 1] = tokens[t + 1 + j]
                    slot[i, start + j - 1] = j + 1
        for c in range(widths[i], width):  # padding sees itself only (a row with nothing to see is NaN)
            allowed[i, 0, c, c] = True
    return _Batch(ids, positions, allowed, wanted, slot)


def _hidden(draft, batch: _Batch):
    return draft.model(
        input_ids=batch.ids, position_ids=batch.positions, attention_mask=batch.allowed
    ).last_hidden_state


def _agreement(draft, heldout: list[Sample], plan: ParallelDraftPlan) -> list[float]:
    """Teacher-forced greedy agreement with the target's answers at each draft position, over every
    cut of the held-out answers."""
    import torch

    agree = [0] * plan.max_d
    total = [0] * plan.max_d
    draft.eval()
    with torch.no_grad(), training_autocast():
        for sample in heldout:
            batch = _batch([sample], plan.max_d - 1, [_cuts(sample, 0, None)])
            predicted = draft.lm_head(_hidden(draft, batch)).argmax(-1)
            for k in range(1, plan.max_d + 1):
                at = batch.slot == k
                agree[k - 1] += int((predicted[at] == batch.wanted[at]).sum())
                total[k - 1] += int(at.sum())
    return [round(a / max(t, 1), 4) for a, t in zip(agree, total, strict=True)]


def _save(draft, target_dir: pathlib.Path, out_dir: pathlib.Path) -> None:
    setattr(draft.config, MASK_TOKEN_KEY, MASK_TOKEN)
    save_draft(draft, target_dir, out_dir)


def untrained_parallel_draft_model(target_dir: pathlib.Path, out_dir: pathlib.Path, plan: ParallelDraftPlan) -> None:
    """The starting point (small_lm's), naming its mask token: a parallel draft of the trained
    one's shape, for runs at synthetic acceptance."""
    import torch
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32)
    _save(truncated_target(target, plan.keep_layers), target_dir, out_dir)


def train_parallel_draft_model(
    target_dir: pathlib.Path,
    train: list[Sample],
    heldout: list[Sample],
    out_dir: pathlib.Path,
    plan: ParallelDraftPlan,
    progress: Callable[[int, float], None] = lambda step, loss: None,
    stop_after: int | None = None,
) -> ParallelDraftResult:
    """Train for ``plan.steps`` optimiser steps and save the draft model in ``out_dir`` (bf16, its
    config naming the mask token). With ``stop_after``, only that many steps, nothing checked or
    saved (the determinism probe)."""

    def scored(draft, samples: list[Sample], rng: random.Random):
        batch = _batch(samples, plan.max_d - 1, [_cuts(s, plan.cuts_per_sample, rng) for s in samples])
        return _hidden(draft, batch), batch.wanted

    draft, loss_value, probe = distil(target_dir, train, plan, progress, scored, stop_after)
    if stop_after is not None:
        return ParallelDraftResult(stop_after, loss_value, [], len(plan.keep_layers), probe)
    agreement = _agreement(draft, heldout, plan)
    _save(draft, target_dir, out_dir)
    return ParallelDraftResult(plan.steps, loss_value, agreement, len(plan.keep_layers), probe)
