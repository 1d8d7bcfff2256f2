"""Train an EAGLE-3 head for a Llama target with vLLM's `speculators` library, on CPU.

speculators' own trainer moves the model to GPU 0 and autocasts to CUDA, so
speclens calls its model directly: `Eagle3DraftModel` (config, vocabulary
mapping, the frozen embedding / lm_head / norm taken from the verifier, the
training-time-test forward and its KL loss against the verifier) and
`save_pretrained`, whose folder vLLM loads as `method=eagle3` unchanged. What
is ours: the verifier's hidden states from plain transformers, packing, the
optimiser loop, and the held-out agreement counted as vLLM's verification accepts
(speculators' own metric compares within the draft vocabulary).
"""

from __future__ import annotations

import pathlib
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from drafters.training.optimise import Optimiser, steps_to_train
from drafters.training.selfdistill import Sample, compute_dtype, training_autocast, training_threads

__all__ = ["HeadPlan", "HeadResult", "chain_agreement", "head_agreement", "train_eagle3_head"]


@dataclass(frozen=True)
class HeadPlan:
    steps: int
    tokens_per_step: int = 1024
    lr: float = 3e-3
    draft_vocab_size: int = 8192
    ttt_steps: int = 3
    # The first steps train only the first draft position (a third of the cost of all three):
    # it is the one every accepted token depends on.
    first_position_share: float = 0.6
    # Inputs of these target layers are fused (low, middle, high), as vLLM numbers them.
    aux_layers: tuple[int, ...] = (2, 15, 27)
    seed: int = 0

    @property
    def first_position_steps(self) -> int:
        return int(self.steps * self.first_position_share)

    @property
    def work(self) -> int:
        """Draft positions trained, summed over steps: what the time goes by."""
        return self.first_position_steps + (self.steps - self.first_position_steps) * self.ttt_steps


@dataclass(frozen=True)
class HeadResult:
    steps: int
    final_loss: float
    # The saved (bf16) head's agreement on the held-out answers (see chain_agreement).
    heldout_agreement: list[float]
    probe: str | None  # the weights' digest after PROBE_STEPS steps (drafters/training/optimise.py)


def _verifier_states(target, samples: list[Sample], aux_layers: tuple[int, ...]) -> list[dict]:
    """Per sample: its ids, the fused aux hidden states and the final hidden state before the norm
    (speculators applies the verifier's norm itself; transformers' last hidden state is after it)."""
    import torch

    captured = {}
    hook = target.model.norm.register_forward_hook(lambda _m, args, _out: captured.__setitem__("pre_norm", args[0]))
    states = []
    try:
        with torch.no_grad():
            for s in samples:
                ids = torch.tensor([s.ids])
                out = target.model(input_ids=ids, output_hidden_states=True)
                fused = torch.cat([out.hidden_states[i] for i in aux_layers], dim=-1)[0]
                mask = torch.zeros(len(s.ids), dtype=torch.bool)
                mask[len(s.prompt_ids) :] = True  # learn the answers, not the prompts
                states.append(
                    {
                        "input_ids": ids[0],
                        "hidden_states": fused.to(compute_dtype()),
                        "verifier_last_hidden_states": captured["pre_norm"][0].to(compute_dtype()),
                        "loss_mask": mask,
                    }
                )
    finally:
        hook.remove()
    return states


def _target_pass(target_dir: pathlib.Path, sample_lists: list[list[Sample]], aux_layers: tuple[int, ...]):
    """One load of the target (in compute_dtype): _verifier_states of each list, its config and its lm_head
    weight (what the agreement check needs of it)."""
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=compute_dtype()).eval()
    states = [_verifier_states(target, samples, aux_layers) for samples in sample_lists]
    return states, target.config, target.lm_head.weight.detach()


def _pack(states: list[dict]) -> dict:
    """Samples into one row, shifted as speculators' `shift_batch` aligns them: token x[i+1]
    with the hidden state g[i] and the verifier's output y[i+1]."""
    import torch

    cols: dict[str, list] = {
        k: []
        for k in (
            "input_ids",
            "hidden_states",
            "verifier_last_hidden_states",
            "loss_mask",
            "position_ids",
            "document_ids",
        )
    }
    for doc, s in enumerate(states):
        n = s["input_ids"].shape[0]
        cols["input_ids"].append(s["input_ids"][1:])
        cols["hidden_states"].append(s["hidden_states"][:-1].float())
        cols["verifier_last_hidden_states"].append(s["verifier_last_hidden_states"][1:].float())
        cols["loss_mask"].append(s["loss_mask"][1:])
        cols["position_ids"].append(torch.arange(1, n))
        cols["document_ids"].append(torch.full((n - 1,), doc))
    return {k: torch.cat(v).unsqueeze(0) for k, v in cols.items()}


def _batches(states: list[dict], tokens_per_step: int, rng: random.Random):
    """Endless packed batches of about ``tokens_per_step`` tokens, reshuffled every epoch."""
    order = list(range(len(states)))
    while True:
        rng.shuffle(order)
        batch, size = [], 0
        for i in order:
            batch.append(states[i])
            size += states[i]["input_ids"].shape[0]
            if size >= tokens_per_step:
                yield _pack(batch)
                batch, size = [], 0


def _build_model(target_dir: pathlib.Path, target_config, plan: HeadPlan, d2t, t2d):
    """The head, its draft vocabulary given by ``d2t``/``t2d`` (set before the target's weights are
    loaded: they slice the target's lm_head to that vocabulary)."""
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    from transformers import LlamaConfig

    layer = {
        k: v
        for k, v in target_config.to_dict().items()
        if k not in ("architectures", "_name_or_path", "transformers_version", "dtype")
    }
    layer_config = LlamaConfig(**{**layer, "num_hidden_layers": 1})
    layer_config._attn_implementation = "sdpa"  # speculators' default flex attention has no CPU backward
    config = Eagle3SpeculatorConfig(
        transformer_layer_config=layer_config,
        draft_vocab_size=plan.draft_vocab_size,
        norm_before_residual=True,
        eagle_aux_hidden_state_layer_ids=list(plan.aux_layers),
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=plan.ttt_steps)],
            default_proposal_method="greedy",
            verifier=VerifierConfig.from_pretrained(str(target_dir)),
        ),
    )
    model = Eagle3DraftModel(config)
    model.load_vocab_mappings(t2d, d2t)
    model.load_verifier_weights()
    return model


def untrained_eagle3_head(target_dir: pathlib.Path, out_dir: pathlib.Path, plan: HeadPlan) -> None:
    """A head of the trained one's shape, untrained (seeded), saved as the trainer saves it: what a
    run at synthetic acceptance times, where drafting costs what the shape costs. Its draft
    vocabulary is the target's first `draft_vocab_size` ids (no answers to count)."""
    import torch
    from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution
    from transformers import AutoConfig

    torch.manual_seed(plan.seed)
    target_config = AutoConfig.from_pretrained(str(target_dir))
    d2t, t2d = build_vocab_mappings_from_distribution({}, plan.draft_vocab_size, target_config.vocab_size)
    model = _build_model(target_dir, target_config, plan, d2t, t2d)
    model.to(torch.bfloat16).save_pretrained(str(out_dir))


def train_eagle3_head(
    target_dir: pathlib.Path,
    train: list[Sample],
    heldout: list[Sample],
    out_dir: pathlib.Path,
    plan: HeadPlan,
    progress: Callable[[int, float], None] = lambda work, loss: None,
    stop_after: int | None = None,
) -> HeadResult:
    """Train for ``plan.steps`` optimiser steps and save the head in ``out_dir`` (bf16). ``progress``
    hears the work done so far (of ``plan.work``) and the last loss, from 0 when the steps begin.
    With ``stop_after``, only that many steps, nothing checked or saved (the determinism probe)."""
    import torch
    from speculators.losses import resolve_loss_config
    from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution

    torch.set_num_threads(training_threads())  # fixed, so that the same inputs give the same bytes
    torch.manual_seed(plan.seed)
    (train_states, heldout_states), target_config, lm_head = _target_pass(target_dir, [train, heldout], plan.aux_layers)
    counts = Counter(t for s in train for t in s.answer_ids)
    d2t, t2d = build_vocab_mappings_from_distribution(dict(counts), plan.draft_vocab_size, target_config.vocab_size)
    model = _build_model(target_dir, target_config, plan, d2t, t2d)
    params = [p for p in model.parameters() if p.requires_grad]
    optimiser = Optimiser(params, plan.lr, plan.steps)
    loss_config = resolve_loss_config("kl_div", "eager")
    batches = _batches(train_states, plan.tokens_per_step, random.Random(plan.seed))

    model.train()
    loss_value = float("nan")
    work = 0
    progress(work, loss_value)
    for step in range(steps_to_train(plan.steps, stop_after)):
        batch = next(batches)
        ttt_steps = 1 if step < plan.first_position_steps else plan.ttt_steps
        with training_autocast():
            _, loss, _ = model(**batch, ttt_steps=ttt_steps, loss_config=loss_config)
        loss_value = optimiser.step(loss)
        work += ttt_steps
        progress(work, loss_value)
    if stop_after is not None:
        return HeadResult(stop_after, loss_value, [], optimiser.probe)

    model.eval()
    model.to(torch.bfloat16).to(compute_dtype())  # the saved weights' values, computed as training computed
    agreement = _agreement(model, heldout_states, lm_head, plan.ttt_steps)
    model.to(torch.bfloat16).save_pretrained(str(out_dir))
    return HeadResult(plan.steps, loss_value, agreement, optimiser.probe)


def chain_agreement(drafts: list, d2t, wanted, loss_mask) -> tuple[list[float], list[float]]:
    """Counts of agreeing draft chains in one packed row, as vLLM's greedy verification accepts
    them: for k = 1..len(drafts), the answer positions where draft tokens 1..k all equal the
    target's argmax over its whole vocabulary (``wanted``), and the positions counted. Aligned as
    speculators aligns its metric: draft step k at row j proposes what ``wanted`` holds at row j + k.
    ``drafts`` are in the draft vocabulary, mapped to the target's by the offsets ``d2t``; a token
    the draft vocabulary lacks can never agree."""
    agreed, counted = [], []
    still = loss_mask.clone()  # draft starts whose drafts so far all agreed
    for k, draft in enumerate(drafts):
        n = loss_mask.shape[1] - k
        proposed = draft + d2t[draft]
        still[:, :n] &= proposed[:, :n] == wanted[:, k:]
        agreed.append(float(still[:, :n][loss_mask[:, k:]].sum()))
        counted.append(float(loss_mask[:, k:].sum()))
    return agreed, counted


def _agreement(model, states: list[dict], lm_head, ttt_steps: int, chunk: int = 8) -> list[float]:
    """The head's chain agreement (chain_agreement) over ``states``' answers, ``chunk`` samples
    per packed row (a row's attention mask grows with the square of its length)."""
    import torch

    to_target_vocab, logits_weight = model.d2t.long(), lm_head.float().T
    agreed, counted = [0.0] * ttt_steps, [0.0] * ttt_steps
    for start in range(0, len(states), chunk):
        batch = _pack(states[start : start + chunk])
        with torch.no_grad(), training_autocast():
            drafts = model(
                **{k: v for k, v in batch.items() if k != "verifier_last_hidden_states"}, ttt_steps=ttt_steps
            )
            normed = model.verifier_norm(batch["verifier_last_hidden_states"].to(lm_head.dtype))
        wanted = (normed.float() @ logits_weight).argmax(-1)
        row_agreed, row_counted = chain_agreement(drafts, to_target_vocab, wanted, batch["loss_mask"])
        agreed = [a + b for a, b in zip(agreed, row_agreed)]
        counted = [a + b for a, b in zip(counted, row_counted)]
    return [round(a / max(c, 1.0), 4) for a, c in zip(agreed, counted)]


def head_agreement(
    target_dir: pathlib.Path, head_dir: pathlib.Path, sets: dict[str, list[Sample]]
) -> dict[str, list[float]]:
    """A saved head's agreement with the target on each named set of samples' answers, computed
    as the build's held-out check computes it (so the build's own held-out samples give back the
    figures in its speclens_drafter.json)."""
    import json

    import torch
    from safetensors.torch import load_file

    config = json.loads((head_dir / "config.json").read_text(encoding="utf-8"))
    ttt_steps = config["speculators_config"]["proposal_methods"][0]["speculative_tokens"]
    plan = HeadPlan(
        steps=0,
        draft_vocab_size=config["draft_vocab_size"],
        ttt_steps=ttt_steps,
        aux_layers=tuple(config["eagle_aux_hidden_state_layer_ids"]),
    )
    torch.set_num_threads(training_threads())
    rows, target_config, lm_head = _target_pass(target_dir, list(sets.values()), plan.aux_layers)
    weights = load_file(str(head_dir / "model.safetensors"))
    model = _build_model(target_dir, target_config, plan, weights["d2t"], weights["t2d"])
    loaded = model.load_state_dict(weights, strict=False)
    if loaded.unexpected_keys or set(loaded.missing_keys) - set(model._keys_to_ignore_on_save):
        raise ValueError(f"{head_dir} is not a head this builder saved: {loaded}")
    model.eval()
    model.to(torch.bfloat16).to(compute_dtype())
    return {name: _agreement(model, states, lm_head, ttt_steps) for name, states in zip(sets, rows)}
