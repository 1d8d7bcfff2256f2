"""Train an EAGLE-3 head for a Llama target with vLLM's `speculators` library, on CPU.

speculators' own trainer moves the model to GPU 0 and autocasts to CUDA, so
speclens calls its model directly: `Eagle3DraftModel` (config, vocabulary
mapping, the frozen embedding / lm_head / norm taken from the verifier, the
training-time-test forward and its KL loss against the verifier) and
`save_pretrained`, whose folder vLLM loads as `method=eagle3` unchanged. What
is ours: the verifier's hidden states from plain transformers, packing, the
optimiser loop.
"""

from __future__ import annotations

import pathlib
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from drafters.training.optimise import Optimiser
from drafters.training.selfdistill import Sample, training_threads

__all__ = ["HeadPlan", "HeadResult", "train_eagle3_head"]


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
    # Share of held-out answer positions where draft tokens 1..k all equal the target's greedy ones,
    # k = 1..ttt_steps (what vLLM's per-position acceptance measures).
    heldout_agreement: list[float]


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
                mask[len(s.prompt_ids):] = True  # learn the answers, not the prompts
                states.append({"input_ids": ids[0], "hidden_states": fused.to(torch.bfloat16),
                               "verifier_last_hidden_states": captured["pre_norm"][0].to(torch.bfloat16),
                               "loss_mask": mask})
    finally:
        hook.remove()
    return states


def _pack(states: list[dict]) -> dict:
    """Samples into one row, shifted as speculators' `shift_batch` aligns them: token x[i+1]
    with the hidden state g[i] and the verifier's output y[i+1]."""
    import torch

    cols: dict[str, list] = {k: [] for k in ("input_ids", "hidden_states", "verifier_last_hidden_states",
                                             "loss_mask", "position_ids", "document_ids")}
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


def _build_model(target_dir: pathlib.Path, target_config, plan: HeadPlan, token_counts: Counter):
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution
    from transformers import LlamaConfig

    layer = {k: v for k, v in target_config.to_dict().items()
             if k not in ("architectures", "_name_or_path", "transformers_version", "dtype")}
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
    d2t, t2d = build_vocab_mappings_from_distribution(dict(token_counts), plan.draft_vocab_size,
                                                      target_config.vocab_size)
    model = Eagle3DraftModel(config)
    model.load_vocab_mappings(t2d, d2t)
    model.load_verifier_weights()
    return model


def _accuracies(metrics: dict, ttt_steps: int) -> list[float]:
    return [float(metrics[f"full_acc_{i}_sum"]) / max(float(metrics[f"full_acc_{i}_total"]), 1.0)
            for i in range(ttt_steps)]


def train_eagle3_head(
    target_dir: pathlib.Path,
    train: list[Sample],
    heldout: list[Sample],
    out_dir: pathlib.Path,
    plan: HeadPlan,
    progress: Callable[[int, float], None] = lambda work, loss: None,
) -> HeadResult:
    """Train for ``plan.steps`` optimiser steps and save the head in ``out_dir`` (bf16). ``progress``
    hears the work done so far (of ``plan.work``) and the last loss, from 0 when the steps begin."""
    import torch
    from speculators.losses import resolve_loss_config
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(training_threads())  # fixed, so that the same inputs give the same bytes
    torch.manual_seed(plan.seed)
    target = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.bfloat16).eval()
    train_states = _verifier_states(target, train, plan.aux_layers)
    heldout_states = _verifier_states(target, heldout, plan.aux_layers)
    target_config = target.config
    del target

    counts = Counter(t for s in train for t in s.answer_ids)
    model = _build_model(target_dir, target_config, plan, counts)
    params = [p for p in model.parameters() if p.requires_grad]
    optimiser = Optimiser(params, plan.lr, plan.steps)
    loss_config = resolve_loss_config("kl_div", "eager")
    batches = _batches(train_states, plan.tokens_per_step, random.Random(plan.seed))

    model.train()
    loss_value = float("nan")
    work = 0
    progress(work, loss_value)
    for step in range(plan.steps):
        batch = next(batches)
        ttt_steps = 1 if step < plan.first_position_steps else plan.ttt_steps
        with torch.autocast("cpu", dtype=torch.bfloat16):
            _, loss, _ = model(**batch, ttt_steps=ttt_steps, loss_config=loss_config)
        loss_value = optimiser.step(loss)
        work += ttt_steps
        progress(work, loss_value)

    model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        _, _, metrics = model(**_pack(heldout_states), ttt_steps=plan.ttt_steps, loss_config=loss_config)
    model.to(torch.bfloat16)
    model.save_pretrained(str(out_dir))
    return HeadResult(plan.steps, loss_value, [round(a, 4) for a in _accuracies(metrics, plan.ttt_steps)])
