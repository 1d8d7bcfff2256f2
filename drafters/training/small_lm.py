"""Distil a small draft model from the target: a few of its layers, retrained on its own answers.

The draft is a plain `LlamaForCausalLM` with the target's vocabulary, embedding
(tied to the lm_head, frozen) and final norm, and ``keep_layers`` of its decoder
layers as the starting point. Dropping most layers destroys SmolLM2's
predictions (greedy agreement ~1%), so the layers are retrained: cross-entropy
on the target's greedy answers, whose next token *is* the target's argmax (hard-
label distillation). The loss is taken over the answers' most frequent tokens
only, which cuts the cost of the 49,152-row output layer by six.
"""

from __future__ import annotations

import pathlib
import random
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from drafters.training.optimise import Optimiser, steps_to_train
from drafters.training.selfdistill import Sample, training_autocast, training_threads

__all__ = ["DraftPlan", "DraftResult", "distil", "save_draft", "train_draft_model", "truncated_target"]

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


@dataclass(frozen=True)
class DraftPlan:
    steps: int
    keep_layers: tuple[int, ...] = (0, 1, 28, 29)
    samples_per_step: int = 8
    lr: float = 2e-3
    loss_vocab_size: int = 8192
    seed: int = 0


@dataclass(frozen=True)
class DraftResult:
    steps: int
    final_loss: float
    heldout_agreement: float  # teacher-forced greedy agreement with the target on held-out answers
    num_layers: int
    probe: str | None  # the weights' digest after PROBE_STEPS steps (drafters/training/optimise.py)


def _pad(samples: list[Sample]):
    import torch

    width = max(len(s.ids) for s in samples)
    ids = torch.zeros(len(samples), width, dtype=torch.long)
    mask = torch.zeros(len(samples), width, dtype=torch.long)
    labels = torch.full((len(samples), width), -1, dtype=torch.long)  # label of the token at each position
    for i, s in enumerate(samples):
        n = len(s.ids)
        ids[i, :n] = torch.tensor(s.ids)
        mask[i, :n] = 1
        labels[i, len(s.prompt_ids) : n] = torch.tensor(s.answer_ids)
    return ids, mask, labels


def truncated_target(target, keep_layers: tuple[int, ...]):
    """A LlamaForCausalLM holding the target's embedding, norm and ``keep_layers``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig.from_dict({**target.config.to_dict(), "num_hidden_layers": len(keep_layers)})
    draft = LlamaForCausalLM(config)
    state = {}
    for key, value in target.state_dict().items():
        if key.startswith("model.layers."):
            index = int(key.split(".")[2])
            if index in keep_layers:
                state[key.replace(f"model.layers.{index}.", f"model.layers.{keep_layers.index(index)}.", 1)] = value
        else:
            state[key] = value
    draft.load_state_dict(state, strict=False)  # lm_head.weight is tied to the embedding
    draft.tie_weights()
    return draft


def _agreement(draft, heldout: list[Sample]) -> float:
    import torch

    agree = total = 0
    draft.eval()
    with torch.no_grad(), training_autocast():
        for start in range(0, len(heldout), 8):
            ids, mask, labels = _pad(heldout[start : start + 8])
            predicted = draft(input_ids=ids, attention_mask=mask).logits[:, :-1].argmax(-1)
            wanted = labels[:, 1:]
            agree += int(((predicted == wanted) & (wanted >= 0)).sum())
            total += int((wanted >= 0).sum())
    return agree / max(total, 1)


def untrained_draft_model(target_dir: pathlib.Path, out_dir: pathlib.Path, plan: DraftPlan) -> None:
    """The draft model's starting point (the target's embedding, norm and `keep_layers`), saved as
    the trainer saves it: a draft of the trained one's shape for runs at synthetic acceptance."""
    import torch
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32)
    save_draft(truncated_target(target, plan.keep_layers), target_dir, out_dir)


def distil(
    target_dir: pathlib.Path,
    train: list[Sample],
    plan: DraftPlan,
    progress: Callable[[int, float], None],
    scored: Callable,
    stop_after: int | None = None,
):
    """The draft's start (`truncated_target`) trained for ``plan.steps`` optimiser steps of ``plan.samples_per_step``
    samples: ``scored(draft, samples, rng)`` gives the hidden states of the positions it trains and
    the token each should predict (-1: none), and the cross-entropy over the answers' most frequent
    tokens is minimised. ``stop_after``: only that many of the plan's steps. Returns the draft, the
    last loss and the determinism probe (Optimiser.probe)."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(training_threads())  # fixed, so that the same inputs give the same bytes
    torch.manual_seed(plan.seed)
    target = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32)
    draft = truncated_target(target, plan.keep_layers)
    del target
    draft.model.embed_tokens.weight.requires_grad_(False)
    params = [p for p in draft.parameters() if p.requires_grad]

    counts = Counter(t for s in train for t in s.answer_ids)
    vocab = torch.tensor(sorted(t for t, _ in counts.most_common(plan.loss_vocab_size)))
    to_loss_vocab = torch.full((draft.config.vocab_size + 1,), -1, dtype=torch.long)  # index -1: no label
    to_loss_vocab[vocab] = torch.arange(len(vocab))
    output_rows = draft.lm_head.weight.detach()[vocab]

    optimiser = Optimiser(params, plan.lr, plan.steps)
    rng = random.Random(plan.seed)
    order: list[int] = []

    draft.train()
    loss_value = float("nan")
    progress(0, loss_value)
    for step in range(steps_to_train(plan.steps, stop_after)):
        if len(order) < plan.samples_per_step:
            order = list(range(len(train)))
            rng.shuffle(order)
        batch = [train[order.pop()] for _ in range(plan.samples_per_step)]
        with training_autocast():
            hidden, labels = scored(draft, batch, rng)
            wanted = to_loss_vocab[labels]
            kept = wanted >= 0
            logits = hidden[kept] @ output_rows.T
        loss = F.cross_entropy(logits.float(), wanted[kept])
        loss_value = optimiser.step(loss)
        progress(step + 1, loss_value)
    return draft, loss_value, optimiser.probe


def save_draft(draft, target_dir: pathlib.Path, out_dir: pathlib.Path) -> None:
    """The draft in bf16 with the target's tokenizer files: a standalone checkpoint, like any
    draft model on the hub."""
    import torch

    draft.to(torch.bfloat16)
    draft.save_pretrained(str(out_dir))
    for name in _TOKENIZER_FILES:
        if (target_dir / name).is_file():
            shutil.copy2(target_dir / name, out_dir / name)


def _next_token(draft, samples: list[Sample], rng):
    ids, mask, labels = _pad(samples)
    hidden = draft.model(input_ids=ids, attention_mask=mask).last_hidden_state[:, :-1]
    return hidden, labels[:, 1:]


def train_draft_model(
    target_dir: pathlib.Path,
    train: list[Sample],
    heldout: list[Sample],
    out_dir: pathlib.Path,
    plan: DraftPlan,
    progress: Callable[[int, float], None] = lambda step, loss: None,
    stop_after: int | None = None,
) -> DraftResult:
    """Train for ``plan.steps`` optimiser steps and save the draft model in ``out_dir`` (bf16).
    ``progress`` hears the steps done and the last loss, from 0 when the steps begin. With
    ``stop_after``, only that many steps, nothing checked or saved (the determinism probe)."""
    draft, loss_value, probe = distil(target_dir, train, plan, progress, _next_token, stop_after)
    if stop_after is not None:
        return DraftResult(stop_after, loss_value, float("nan"), len(plan.keep_layers), probe)
    agreement = _agreement(draft, heldout)
    save_draft(draft, target_dir, out_dir)
    return DraftResult(plan.steps, loss_value, round(agreement, 4), len(plan.keep_layers), probe)
