"""What verifying and drafting cost at an operating point, from engine-step timings, and the
speedup model built on them. Defined here once; summaries, rankings and reports read these.

B = requests in flight, D = draft length. Four passes over the same prompts at B:
- plain decoding (baseline pass):                    T_verif(B)
- the drafter's speculative pass:                    T_step(B, D), drafting included
- the zero-cost proposer (runners/zero_cost_proposer.py): T_verif(B·(1+D)), every step verifies
  D proposals per request and drafting costs nothing
- the idle proposer (same file): T_idle(B), speculation switched on at D with nothing proposed at
  any step: one token per request, through the speculative path (the rejection sampler with no
  drafts, the proposer called, the speculative bookkeeping) rather than plain decoding's
and T_draft(B, D) = T_step(B, D) − T_verif(B·(1+D)); the K=0 tax = T_idle(B) / T_verif(B) − 1
(what switching speculation on costs a step that drafts nothing: vLLM #49548 reports 6.6–21.6 %
per token from enabling dynamic speculation at K = 0).

Only steady decode steps count: as many requests as the pass held in flight (B, or fewer where a
length pass had fewer prompts), no prefill tokens (tokens = requests +
draft tokens), and in the verify pass all B·D proposals. Each term is the median over those
steps (robust to the odd slow step of a shared machine) with the quartiles as its spread.

Predicted speedup = T_verif(B)·TPS / (T_verif(B·(1+D)) + T_draft(B, D)) with TPS the tokens
per target step (the seed's AL: it counts undrafted steps, so it equals vLLM's AL only when
every step drafts). The denominator is T_step(B, D) by construction; the predicted range
puts both terms at opposite quartiles. Drafters that propose fewer than D tokens on some steps
(n-gram, suffix) verify fewer than B·(1+D) tokens per step, so their T_draft is a lower bound
and can be negative.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from speclens.config import Choice
from speclens.schema import Count, Milliseconds, record


class PassMode(Choice):
    """What one pass over the prompts runs (engine_steps.parquet's `mode`)."""

    # the drafter's own speculative decoding
    speculative = "speculative"
    # decoding without speculation
    plain = "plain"
    # the zero-cost proposer: D free proposals per request verified at every step
    verify = "verify"
    # speculation on at D, the proposer proposing nothing at every step: the K=0 tax
    idle = "idle"


# Fewer steady steps than this and a term is not reported (a median of two steps is noise).
MIN_STEADY_STEPS = 5
# A predicted speedup further than this from the measured one is flagged.
GAP_TOLERANCE = 0.10


@record
class StepTiming:
    """A step-time term over a pass's steady steps, in ms: median, quartiles, step count."""

    median_ms: Milliseconds
    p25_ms: Milliseconds
    p75_ms: Milliseconds
    n: Count


@dataclass
class PointCosts:
    """The cost terms of one operating point; a term is None when its pass did not run or had
    too few steady steps."""

    t_verif: StepTiming | None
    t_step: StepTiming | None
    t_verif_spec: StepTiming | None
    t_draft_ms: float | None
    # The idle pass's steady step T_idle(B), and the K=0 tax T_idle(B) / T_verif(B) − 1 with its
    # range from the quartiles of both (k0_tax).
    t_idle: StepTiming | None = None
    k0_tax: float | None = None
    k0_tax_range: list[float] | None = None


def in_flight(pass_steps: pd.DataFrame) -> pd.Series:
    """Per step of one pass, the most requests its pass held in flight: per length bucket where the
    pass runs one length at a time (evals/pipeline/passes.py), which may hold fewer than B."""
    if "input_tokens" in pass_steps.columns and pass_steps["input_tokens"].notna().any():
        return pass_steps.groupby(pass_steps["input_tokens"].fillna(-1))["num_requests"].transform("max")
    return pd.Series(pass_steps["num_requests"].max(), index=pass_steps.index)


def held(engine_steps: pd.DataFrame, mode: str, batch_size: int, input_tokens: int | None = None) -> int | None:
    """The most requests the pass at `batch_size` held in flight (of one length where given);
    None where the engine shows no steps (an attached server)."""
    s = engine_steps
    if s.empty:
        return None
    keep = (s["mode"] == mode) & (s["batch_size"] == batch_size)
    if input_tokens is not None and "input_tokens" in s.columns:
        keep &= s["input_tokens"] == input_tokens
    most = s.loc[keep, "num_requests"].max()
    return None if pd.isna(most) else int(most)


def steady_walls(engine_steps: pd.DataFrame, mode: str, batch_size: int, d: int | None = None) -> np.ndarray:
    """Wall times (s) of the pass's decode steps that carried as many requests as the pass held in
    flight (B, or fewer where a length pass had fewer prompts: in_flight) and no prefill; with
    `d`, only steps in which every request verified `d` proposals."""
    s = engine_steps[(engine_steps["mode"] == mode) & (engine_steps["batch_size"] == batch_size)]
    if s.empty:
        return np.array([], dtype=float)
    keep = (s["num_requests"] == in_flight(s)) & (s["num_tokens"] == s["num_requests"] + s["num_draft_tokens"])
    if d is not None:
        keep &= s["num_draft_tokens"] == s["num_requests"] * d
    return s.loc[keep, "wall_s"].to_numpy(dtype=float)


def step_timing(walls: np.ndarray) -> StepTiming | None:
    """Median and quartiles in ms, with the number of steps; None when too few to trust."""
    if len(walls) < MIN_STEADY_STEPS:
        return None
    p25, median, p75 = np.percentile(walls * 1000.0, [25, 50, 75])
    return StepTiming(float(median), float(p25), float(p75), int(len(walls)))


def predicted_speedup(
    tokens_per_step: float | None, t_verif: StepTiming | None, t_step: StepTiming | None
) -> tuple[float, list[float]] | tuple[None, None]:
    """T_verif(B)·TPS / T_step(B, D) and its range from the quartiles of both timings."""
    if tokens_per_step is None or t_verif is None or t_step is None:
        return None, None
    point = t_verif.median_ms * tokens_per_step / t_step.median_ms
    low = t_verif.p25_ms * tokens_per_step / t_step.p75_ms
    high = t_verif.p75_ms * tokens_per_step / t_step.p25_ms
    return point, [low, high]


def k0_tax(t_idle: StepTiming | None, t_verif: StepTiming | None) -> tuple[float, list[float]] | tuple[None, None]:
    """The K=0 tax T_idle(B) / T_verif(B) − 1 and its range, the two timings at opposite quartiles;
    (None, None) where either pass has no steady steps to time."""
    if t_idle is None or t_verif is None or t_verif.median_ms <= 0 or t_verif.p25_ms <= 0:
        return None, None
    low = t_idle.p25_ms / t_verif.p75_ms - 1.0
    high = t_idle.p75_ms / t_verif.p25_ms - 1.0
    return t_idle.median_ms / t_verif.median_ms - 1.0, [low, high]


def operating_point_costs(engine_steps: pd.DataFrame, batch_size: int, d: int | None) -> PointCosts:
    """T_verif(B), T_step(B, D), T_verif(B·(1+D)), T_draft(B, D), T_idle(B) and the K=0 tax for
    one operating point."""
    t_verif = step_timing(steady_walls(engine_steps, PassMode.plain, batch_size))
    t_step = t_verif_spec = t_draft = t_idle = None
    tax, tax_range = None, None
    if d is not None:
        t_step = step_timing(steady_walls(engine_steps, PassMode.speculative, batch_size))
        t_verif_spec = step_timing(steady_walls(engine_steps, PassMode.verify, batch_size, d))
        if t_step is not None and t_verif_spec is not None:
            t_draft = t_step.median_ms - t_verif_spec.median_ms
        # steps with no proposal at all (d=0): the idle proposer drafts nothing
        t_idle = step_timing(steady_walls(engine_steps, PassMode.idle, batch_size, 0))
        tax, tax_range = k0_tax(t_idle, t_verif)
    return PointCosts(t_verif, t_step, t_verif_spec, t_draft, t_idle, tax, tax_range)


def speedup_gap(predicted: float | None, measured: float | None) -> float | None:
    """predicted / measured − 1 (positive: the model is optimistic)."""
    if predicted is None or not measured:
        return None
    return predicted / measured - 1.0


def gap_above_tolerance(predicted: float | None, measured: float | None) -> bool:
    """Whether the prediction misses the measurement by more than GAP_TOLERANCE."""
    gap = speedup_gap(predicted, measured)
    return gap is not None and abs(gap) > GAP_TOLERANCE
