"""The draft-length guidelines computed for a GPU from the step-cost model (speclens/gpu_model/step_cost.py),
beside their config-only forms (speclens/config_guidelines.py):

- guideline 1: for each D, the smallest B at which T_verif(B·(1+D)) / T_verif(B) rises above 1.1,
  where verifying D more tokens per request stops being (nearly) free;
- guidelines 2 and 3: the knees of the predicted T_verif(B·(1+D)) over D at one B, the D after
  which a step costs more (the first is where guideline 2 starts the sweep, all of them the
  tile-aligned D of guideline 3);
- guideline 4: ρ from the modelled costs, T_draft(1, 1) / T_verif(1), in place of the layer ratio:
  at B = 1 a D pays only when AL > (T_verif(1·(1+D)) + T_draft(1, D)) / T_verif(1).

`at_length` states guidelines 2 and 3 at one context length beside the share of the step
attention takes there: the tile rule matters where attention is a large part of the step (long
contexts, large B), and hardly at all where the weights' reads are.
"""

from __future__ import annotations

from dataclasses import dataclass

from speclens.config_guidelines import starting_draft_length, tile_aligned_draft_lengths
from speclens.gpu_model.draft_cost import draft_ms
from speclens.gpu_model.model_shape import ModelShape
from speclens.gpu_model.step_cost import Hardware, verify_step

FREE_VERIFY_RATIO = 1.1
KNEE = 1.5  # a rise from D to D + 1 above 1.5 times the rise before it (flat: any rise at all)


def free_verification_limit(
    shape: ModelShape, hw: Hardware, d: int, batch_sizes: list[int], context: int
) -> int | None:
    """Guideline 1: the smallest of `batch_sizes` at which verifying 1 + D tokens per request costs
    more than 1.1 plain steps (None: free at every one)."""
    for b in sorted(batch_sizes):
        if (
            verify_step(shape, b, d, context, hw).total_ms / verify_step(shape, b, 0, context, hw).total_ms
            > FREE_VERIFY_RATIO
        ):
            return b
    return None


def verify_knees(shape: ModelShape, hw: Hardware, batch: int, context: int, max_d: int) -> list[int]:
    """Guidelines 2 and 3: each D after which T_verif(B·(1+D)) steps up (D = 1 … max_d): where
    the cost rises by more than it rose the step before (a tile boundary, or the GEMMs turning
    compute-bound), however small the step is beside the overheads. The per-token overhead is
    left out of the rises: it grows by the same amount at every D, so it has no knee."""
    costs = [verify_step(shape, batch, d, context, hw).total_ms for d in range(max_d + 2)]
    per_d = hw.eff.token_us * batch / 1e3
    rises = [b - a - per_d for a, b in zip(costs, costs[1:])]
    return [d for d in range(1, max_d + 1) if rises[d] > KNEE * rises[d - 1] + 1e-9 * costs[d]]


@dataclass(frozen=True)
class DraftPays:
    d: int
    break_even_al: float  # the AL above which this D beats plain decoding at B = 1


def low_latency_break_even(
    mechanism: str, shape: ModelShape, draft: ModelShape | None, hw: Hardware, context: int, ds: list[int]
) -> tuple[float, list[DraftPays]]:
    """Guideline 4 with modelled costs: ρ = T_draft(1, 1) / T_verif(1), and per D the AL it needs."""
    plain = verify_step(shape, 1, 0, context, hw).total_ms
    rho = draft_ms(mechanism, 1, 1, context, shape, draft, hw) / plain
    pays = [
        DraftPays(
            d,
            (verify_step(shape, 1, d, context, hw).total_ms + draft_ms(mechanism, d, 1, context, shape, draft, hw))
            / plain,
        )
        for d in ds
    ]
    return rho, pays


def attention_share(shape: ModelShape, hw: Hardware, batch: int, d: int, context: int) -> float:
    """The share of T_verif(B·(1+D)) attention takes at this context length (d = 0: a plain step)."""
    terms = verify_step(shape, batch, d, context, hw)
    return terms.attention_ms / terms.total_ms


@dataclass(frozen=True)
class AtBatch:
    """Guidelines 2-3 on a GPU at one B and context length, all predicted by the step-cost model."""

    batch_size: int
    knees: list[int]  # each D after which T_verif(B·(1+D)) steps up
    attention_share_plain: float  # of T_verif(B)
    attention_share_at_starting_d: float | None  # of T_verif(B·(1+D)) at guideline 2's D (None: no such D)


@dataclass(frozen=True)
class AtLength:
    """Guidelines 2 and 3 at one context length: the config's D (G alone decides them) and, per B,
    where the predicted verification cost steps up and the share of the step attention takes."""

    context_len: int
    g: int
    starting_d: int | None  # None: guideline 2 does not apply (G >= 128: MLA's one latent)
    tile_aligned: list[int]
    by_batch: list[AtBatch]


def at_length(shape: ModelShape, hw: Hardware, context: int, batch_sizes: list[int], max_d: int = 64) -> AtLength:
    """Guidelines 2 and 3 at `context` for each of `batch_sizes`."""
    g = shape.g
    starting = starting_draft_length(g)
    by_batch = [
        AtBatch(
            b,
            verify_knees(shape, hw, b, context, max_d),
            attention_share(shape, hw, b, 0, context),
            None if starting is None else attention_share(shape, hw, b, starting, context),
        )
        for b in batch_sizes
    ]
    return AtLength(context, g, starting, tile_aligned_draft_lengths(g), by_batch)
