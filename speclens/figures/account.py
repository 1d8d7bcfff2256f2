"""The speedup account: an operating point's measured speedup written as the steady-state model's
prediction times named corrections, each measured from the engine-step records, whose product is
the measured speedup (an identity, not a fit).

For one pass at B requests in flight, with O its output tokens, G the sum of its engine-step
times, T its median steady step (exactly B requests, no prefill) and τ the tokens each request
gains per target step in the model (1 plain, TPS speculative):

    (O / G) / (B·τ / T) = slow_outliers · ramp_up_and_tail · prefill · token_yield

    slow_outliers     T / mean steady step              (a few very slow steps among fast ones)
    ramp_up_and_tail  mean steady step / mean decode step · mean requests per step / B
                      (steps with fewer than B in flight: cheaper, but fewer tokens)
    prefill           mean decode step / mean step      (steps that also prefill are slower)
    token_yield       O / (request-steps · τ)           (tokens a request actually gains per step)

The measured speedup (O_s/G_s)/(O_p/G_p) is then the model's T_verif(B)·TPS/T_step(B,D) times each
factor's speculative-over-plain ratio. Time outside engine steps (the harness between steps) is
not in the measured speedup, which is over engine-step time; its share of each pass is reported
beside the account.

Beside the factors, not one of them (the product stays the measured speedup), the K=0 tax
(speclens/figures/costs.py, measured by the idle pass: speculation on, nothing proposed):

    k0_tax            T_idle(B) / T_verif(B) − 1
    k0_tax_share      (T_idle(B) − T_verif(B)) / T_step(B, D)

k0_tax_share is how much of the speculative pass's median step is the speculative machinery with
nothing drafted (the rejection sampler, the proposer's call, the bookkeeping); the model's
T_step(B, D) already holds it, so it names part of steady_state_model rather than correcting it.
Absent where the idle pass did not run (no baseline, a server, Model Runner V2).
"""

from __future__ import annotations

from dataclasses import field

import numpy as np
import pandas as pd

from speclens.figures.costs import PassMode, PointCosts, in_flight
from speclens.figures.metrics import OMITTED_WHEN_NONE
from speclens.schema import record

# The corrections, in the order the account applies them after the steady-state model.
CORRECTIONS = ("prefill", "ramp_up_and_tail", "slow_outliers", "token_yield")
MODEL = "steady_state_model"


@record
class SpeedupAccount:
    """`factors`: the model's prediction and each correction (speculative over plain); `product`
    equals `measured` up to rounding. `outside_steps`: each pass's share of wall time outside
    engine steps (not part of the speedup). `k0_tax`, `k0_tax_share`: the K=0 tax and its share of
    the speculative step, beside the factors (module docstring); absent where not measured."""

    factors: dict[str, float]
    product: float
    measured: float
    outside_steps: dict[str, float] | None = None
    k0_tax: float | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    k0_tax_share: float | None = field(default=None, metadata=OMITTED_WHEN_NONE)

    @property
    def correction(self) -> float:
        """The product of the corrections that do not depend on the domain's acceptance."""
        return float(np.prod([self.factors[name] for name in CORRECTIONS]))


def pass_factors(
    engine_steps: pd.DataFrame, mode: str, batch_size: int, output_tokens: int, tokens_per_request_step: float
) -> dict[str, float] | None:
    """The four corrections of one pass (module docstring); None without steady steps."""
    s = engine_steps[(engine_steps["mode"] == mode) & (engine_steps["batch_size"] == batch_size)]
    if s.empty or output_tokens <= 0:
        return None
    decode = s["num_tokens"] == s["num_requests"] + s["num_draft_tokens"]
    held = in_flight(s)  # B, or fewer where a length pass had fewer prompts
    steady = decode & (s["num_requests"] == held)
    if not steady.any():
        return None
    walls = s["wall_s"].to_numpy(dtype=float)
    mean_steady = walls[steady.to_numpy()].mean()
    mean_decode = walls[decode.to_numpy()].mean()
    request_steps = int(s["num_requests"].sum())
    return {
        "prefill": mean_decode / walls.mean(),
        "ramp_up_and_tail": mean_steady / mean_decode * (request_steps / len(s)) / float(held.mean()),
        "slow_outliers": float(np.median(walls[steady.to_numpy()])) / mean_steady,
        "token_yield": output_tokens / (request_steps * tokens_per_request_step),
    }


def outside_share(engine_steps: pd.DataFrame, mode: str, batch_size: int, elapsed_s: float) -> float | None:
    s = engine_steps[(engine_steps["mode"] == mode) & (engine_steps["batch_size"] == batch_size)]
    return max(0.0, 1.0 - float(s["wall_s"].sum()) / elapsed_s) if elapsed_s > 0 else None


def k0_tax_share(point_costs: PointCosts | None) -> float | None:
    """(T_idle(B) − T_verif(B)) / T_step(B, D): the share of the speculative pass's median step that
    is the speculative machinery with nothing drafted; None where a term is missing."""
    if point_costs is None:
        return None
    t_idle, t_verif, t_step = point_costs.t_idle, point_costs.t_verif, point_costs.t_step
    if t_idle is None or t_verif is None or t_step is None or t_step.median_ms <= 0:
        return None
    return (t_idle.median_ms - t_verif.median_ms) / t_step.median_ms


def speedup_account(
    engine_steps: pd.DataFrame,
    batch_size: int,
    predicted: float | None,
    tokens_per_step: float | None,
    measured: float | None,
    output_tokens: tuple[int, int],
    elapsed_s: tuple[float, float],
    point_costs: PointCosts | None = None,
) -> SpeedupAccount | None:
    """The account of one operating point: `predicted` is the steady-state model's speedup at it,
    `output_tokens` and `elapsed_s` are (speculative, plain); `point_costs` (its step costs) gives
    the K=0 tax beside the factors. None where a term is missing (no baseline, or a pass without
    steady steps: a server shows none)."""
    if predicted is None or measured is None or not tokens_per_step:
        return None
    spec = pass_factors(engine_steps, PassMode.speculative, batch_size, output_tokens[0], tokens_per_step)
    plain = pass_factors(engine_steps, PassMode.plain, batch_size, output_tokens[1], 1.0)
    if spec is None or plain is None:
        return None
    factors = {MODEL: predicted} | {name: spec[name] / plain[name] for name in CORRECTIONS}
    outside = {
        str(mode): outside_share(engine_steps, mode, batch_size, elapsed)
        for mode, elapsed in zip((PassMode.speculative, PassMode.plain), elapsed_s)
    }
    return SpeedupAccount(
        factors=factors,
        product=float(np.prod(list(factors.values()))),
        measured=measured,
        outside_steps=outside,
        k0_tax=point_costs.k0_tax if point_costs is not None else None,
        k0_tax_share=k0_tax_share(point_costs),
    )
