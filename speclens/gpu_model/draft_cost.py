"""T_draft(B, D): what proposing D drafts for B requests costs, per mechanism, from its own
architecture (the step-cost model's terms, speclens/gpu_model/step_cost.py):

- ngram, suffix: a lookup on the host per request (no GPU pass);
- eagle, eagle3: D serial passes of the head (its decoder layer(s) and its LM head over the draft
  vocabulary), the fusion layer of EAGLE-3 read with them;
- draft_model: D serial decode steps of the draft model;
- mtp: D serial passes of one target-shaped layer and the LM head;

  each serial drafter's first pass runs over the B·(1+D) tokens the target just verified (their
  hidden states and KV entries; vLLM's proposer, `llm_base_proposer.propose`, as SGLang's draft
  extend), the D − 1 others at B tokens;
- dflash, dspark: one pass of the draft model over B·D tokens (parallel drafting).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from speclens.errors import ConfigError
from speclens.gpu_model.model_shape import ModelShape, shape_of
from speclens.gpu_model.step_cost import Hardware, Terms, forward

LOOKUP = ("ngram", "suffix")
SERIAL_HEADS = ("eagle", "eagle3")
PARALLEL = ("dflash", "dspark")
MECHANISMS = (*LOOKUP, *SERIAL_HEADS, "draft_model", "mtp", *PARALLEL)
EAGLE3_DRAFT_VOCAB = 32000  # speculators' and EAGLE-3's usual draft vocabulary


def needs_draft_config(mechanism: str) -> bool:
    """Whether the cost needs the drafter's own config.json (EAGLE heads fall back to one
    target-shaped layer; MTP is a target layer; lookups run on the host)."""
    return mechanism in ("draft_model", *PARALLEL)


def head_shape(mechanism: str, target: ModelShape, config: dict[str, Any] | None) -> ModelShape:
    """An EAGLE head's shape: from its config.json, else one target-shaped dense layer (EAGLE-3:
    over a 32,000-token draft vocabulary). Read with it: EAGLE's 2h → h fusion layer; EAGLE-3's
    3h → h one and its first layer's QKV, which takes the token's embedding beside the fused
    hidden state (2h in: vLLM's llama_eagle3.py)."""
    if config is not None:
        head = shape_of(config, "drafter.model")
        vocab = config.get("draft_vocab_size") or head.vocab
    else:
        head = target.one_layer(experts=0, experts_per_token=0, expert_intermediate=0, shared_intermediate=0)
        head = replace(head, tied_embeddings=False, extra_params=0, expert_weights=None)
        vocab = EAGLE3_DRAFT_VOCAB if mechanism == "eagle3" else target.vocab
    fusion = (3 if mechanism == "eagle3" else 2) * target.hidden * head.hidden
    if mechanism == "eagle3":
        fusion += head.hidden * head.qkv_width
    return replace(head, vocab=vocab, extra_params=fusion)


def drafter_shape(mechanism: str, target: ModelShape, config: dict[str, Any] | None) -> ModelShape | None:
    """The shape whose passes draft for `mechanism` (None: a lookup, or MTP's target layer)."""
    if mechanism in SERIAL_HEADS:
        return head_shape(mechanism, target, config)
    return shape_of(config, "drafter.model") if config is not None else None


def mtp_shape(target: ModelShape) -> ModelShape:
    """One target-shaped layer (MoE where the target has experts, as its last layers are), its 2h → h
    projection, the LM head."""
    return target.one_layer(extra_params=2 * target.hidden * target.hidden)


def draft_ms(
    mechanism: str,
    d: int,
    batch: int,
    context: int,
    target: ModelShape,
    draft: ModelShape | None,
    hw: Hardware,
) -> float:
    """T_draft(B, D) in milliseconds (0 for D = 0)."""
    if d == 0:
        return 0.0
    hw = replace(hw, ops=None)  # drafting stays on speclens's own model, measured tables or not
    if mechanism in LOOKUP:
        return batch * hw.eff.lookup_us_per_request / 1e3
    overhead = hw.eff.draft_pass_overhead_ms
    if mechanism in SERIAL_HEADS or mechanism in ("draft_model", "mtp"):
        shape = mtp_shape(target) if mechanism == "mtp" else draft
        if shape is None:
            raise ConfigError(f"drafter={mechanism}: give drafter.model=<folder or hub id> for its config.json.")
        first: Terms = forward(shape, batch, 1 + d, context, hw, overhead)
        one: Terms = forward(shape, batch, 1, context, hw, overhead)
        return first.total_ms + (d - 1) * one.total_ms
    if mechanism in PARALLEL:
        if draft is None:
            raise ConfigError(f"drafter={mechanism}: give drafter.model=<folder or hub id> for its config.json.")
        return forward(draft, batch, d, context, hw, overhead).total_ms
    raise ConfigError(f"drafter={mechanism}: no draft-cost model for it; choose one of {', '.join(MECHANISMS)}.")
