"""The step-cost model fitted to a machine's own step costs (`evals.whatif calibrate=<dir>`,
`gpu=measured`): the bandwidth, the compute throughput and the per-pass overhead that make the
model's T_verif closest to the measured ones, in log space (each point weighs by its relative
error), and how far each point is then off, both fitted on all points and held out.

The fit stands for the machine as `Gpu(hbm_tb_s=bandwidth, bf16_tflops=throughput)` with every
efficiency 1: what is fitted is what the machine reaches, not its datasheet.

Beside the three constants, two small fits of what the runs measured besides T_verif, each with its
error on every point and held out (the point left out of that fit only; the three constants stay
fitted on every T_verif point):

- **the K=0 tax** (`fit_tax`): an undrafted step's cost beyond a plain one, T_idle(B) − T_verif(B)
  (speclens/figures/costs.py: speculation on, nothing proposed), a constant in ms, or linear in B where
  three batch sizes or more were measured and the line predicts them held out better; never below
  0 (Efficiency's fields are costs). The error of a point: (T_verif(B) + the tax) / T_idle(B) − 1;
- **T_draft** (`fit_draft`): for model drafters the per-pass overhead `draft_pass_overhead_ms`
  that makes the model's draft cost (speclens/gpu_model/draft_cost.py, on the fitted machine) the
  measured T_step − T_verif(B·(1+D)); for lookup drafters (n-gram, suffix) `lookup_us_per_request`
  from T_step − [s·T_verif(B·(1+D)) + (1 − s)·T_idle(B)], s the share of steady steps that drafted.
  Least squares of the error as a share of the measured step, (model − measured T_draft) / T_step
  (a lookup's measured cost is small and can be below 0: the share stays defined), at least 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from speclens.errors import ConfigError
from speclens.gpu_model.draft_cost import LOOKUP, draft_ms
from speclens.gpu_model.gpus import GPUS, Gpu
from speclens.gpu_model.model_shape import ModelShape
from speclens.gpu_model.step_cost import TILE_ROWS, Efficiency, Hardware, verify_step

MIN_POINTS = 3  # three numbers are fitted
# A held-out error past this and the fit does not predict the points it was not given: its
# predictions for this machine are not to be bet on (the 4-point CPU calibration of docs/whatif.md
# is off by 26 % held out at most).
HELD_OUT_BOUND = 0.30


@dataclass(frozen=True)
class StepCostPoint:
    """One measured T_verif: B requests, q = 1 + D query tokens each over `context` cached tokens."""

    batch_size: int
    d: int
    context: int
    t_ms: float


@dataclass(frozen=True)
class Undrafted:
    """One measured undrafted step: B requests over `context` cached tokens, plain decoding's
    T_verif(B) and the idle pass's T_idle(B) (speculation on, nothing proposed)."""

    batch_size: int
    context: int
    t_plain_ms: float
    t_idle_ms: float

    @property
    def tax_ms(self) -> float:
        return self.t_idle_ms - self.t_plain_ms


@dataclass(frozen=True)
class Drafted:
    """One measured T_draft: `drafter` proposing D for B requests over `context` cached tokens,
    its draft's shape (None: a lookup, MTP's target layer or an EAGLE head without a config), the
    measured drafting cost and the speculative pass's step it is a share of."""

    drafter: str
    batch_size: int
    d: int
    context: int
    t_draft_ms: float
    t_step_ms: float
    draft: ModelShape | None = None


@dataclass(frozen=True)
class Tax:
    """The K=0 tax fitted: `ms` per step + `us_per_request` per request in flight."""

    ms: float
    us_per_request: float = 0.0

    def at(self, batch_size: int) -> float:
        return self.ms + self.us_per_request * batch_size / 1e3

    @property
    def form(self) -> str:
        return "linear in B" if self.us_per_request else "constant"


@dataclass(frozen=True)
class Fit:
    hbm_tb_s: float
    tflops: float
    overhead_ms: float
    tile_rows: int | None = TILE_ROWS  # the attention kernels' tiles the fit found closer (None: none)
    # fitted beside the three (None: not fitted, the GPU constant of Efficiency kept): T_draft's ...
    draft_pass_overhead_ms: float | None = None
    lookup_us_per_request: float | None = None
    # ... and the K=0 tax an undrafted step pays beyond a plain one (0: none measured)
    k0_tax_ms: float = 0.0
    k0_tax_us_per_request: float = 0.0

    def hardware(self, weights: str = "bf16", tp: int = 1, expert_weights: str | None = None) -> Hardware:
        gpu = Gpu("measured", self.tflops, self.tflops, self.hbm_tb_s, memory_gb=math.inf, nvlink_gb_s=None)
        # three parameters fitted: a cost per token would be the compute term's to carry, one per
        # MoE layer the fitted overhead's
        drafting = {
            name: value
            for name, value in (
                ("draft_pass_overhead_ms", self.draft_pass_overhead_ms),
                ("lookup_us_per_request", self.lookup_us_per_request),
            )
            if value is not None
        }
        eff = Efficiency(
            mem=1.0,
            compute=1.0,
            overhead_ms=self.overhead_ms,
            token_us=0.0,
            moe_layer_us=0.0,
            k0_tax_ms=self.k0_tax_ms,
            k0_tax_us_per_request=self.k0_tax_us_per_request,
            **drafting,
        )
        return Hardware(gpu, tp=tp, weights=weights, eff=eff, tile_rows=self.tile_rows, expert_weights=expert_weights)

    def predict(self, shape: ModelShape, point: StepCostPoint, weights: str = "bf16") -> float:
        return verify_step(shape, point.batch_size, point.d, point.context, self.hardware(weights)).total_ms


LOG_BOUND = 30.0  # e^±30: far past any machine; a minimiser wandering beyond has lost the points


def _loss(shape: ModelShape, points: list[StepCostPoint], weights: str, tile_rows: int | None, x: np.ndarray) -> float:
    if np.abs(x).max() > LOG_BOUND:  # few points leave a direction free: the walk along it stops here
        return math.inf
    fit = Fit(math.exp(x[0]), math.exp(x[1]), math.exp(x[2]), tile_rows)
    return sum(math.log(fit.predict(shape, p, weights) / p.t_ms) ** 2 for p in points)


def _nelder_mead(f, x0: np.ndarray, steps: int = 600) -> np.ndarray:
    """A plain Nelder-Mead minimiser (numpy only: speclens does not depend on scipy)."""
    simplex = [x0] + [x0 + np.eye(len(x0))[i] for i in range(len(x0))]
    values = [f(x) for x in simplex]
    for _ in range(steps):
        order = np.argsort(values)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] < 1e-12 and np.ptp(np.array(simplex), axis=0).max() < 1e-6:
            break  # converged
        centroid = np.mean(simplex[:-1], axis=0)
        reflected = centroid + (centroid - simplex[-1])
        fr = f(reflected)
        if fr < values[0]:
            expanded = centroid + 2 * (centroid - simplex[-1])
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = centroid + 0.5 * (simplex[-1] - centroid)
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:  # shrink towards the best
                simplex = [simplex[0]] + [simplex[0] + 0.5 * (s - simplex[0]) for s in simplex[1:]]
                values = [values[0]] + [f(s) for s in simplex[1:]]
    return simplex[int(np.argmin(values))]


def fit(shape: ModelShape, points: list[StepCostPoint], weights: str = "bf16") -> Fit:
    """The bandwidth (TB/s), throughput (TFLOPS) and overhead (ms) that fit the points best, with
    attention in 128-row tiles (GPU kernels) or on the real rows (CPU kernels), whichever fits closer."""
    if len(points) < MIN_POINTS:
        raise ConfigError(
            f"calibration fits {MIN_POINTS} numbers and needs at least {MIN_POINTS} measured step costs; "
            f"the runs given hold {len(points)} (measure with baseline=true at two batch sizes or more)."
        )
    for p in points:
        if not p.t_ms > 0:  # fitted in log space: a step that took no time is no measurement
            raise ConfigError(
                f"calibration: the step cost measured at B={p.batch_size}, D={p.d}, context {p.context} is "
                f"{p.t_ms:g} ms; a step takes more than 0 ms, so the run's step timings are broken: measure it again."
            )
    smallest = min(p.t_ms for p in points)
    start = np.array([math.log(0.05), math.log(0.5), math.log(smallest / 2)])  # a CPU's order of magnitude
    fits = []
    for tile_rows in (TILE_ROWS, None):

        def loss(x, tile_rows=tile_rows):
            return _loss(shape, points, weights, tile_rows, x)

        best = _nelder_mead(loss, _nelder_mead(loss, start))  # restarted: out of a collapsed simplex
        fits.append((loss(best), Fit(math.exp(best[0]), math.exp(best[1]), math.exp(best[2]), tile_rows)))
    return min(fits, key=lambda f: f[0])[1]


def errors(
    shape: ModelShape, points: list[StepCostPoint], weights: str = "bf16", everything: Fit | None = None
) -> list[tuple[StepCostPoint, float, float]]:
    """Per point: the relative error of the fit on every point (`everything`, fitted here unless
    given), and of the fit without that point (held out)."""
    everything = everything or fit(shape, points, weights)
    out = []
    for i, p in enumerate(points):
        rest = points[:i] + points[i + 1 :]
        held = fit(shape, rest, weights) if len(rest) >= MIN_POINTS else None
        in_fit = everything.predict(shape, p, weights) / p.t_ms - 1
        held_out = math.nan if held is None else held.predict(shape, p, weights) / p.t_ms - 1
        out.append((p, in_fit, held_out))
    return out


def implausible(fitted: Fit, held_out: list[float]) -> list[str]:
    """Warnings for a fit no machine could have produced (bandwidth or throughput above every GPU
    of the table) or that misses its own held-out points by more than HELD_OUT_BOUND."""
    out = []
    fastest = max(GPUS.values(), key=lambda g: g.hbm_tb_s)
    if fitted.hbm_tb_s > fastest.hbm_tb_s:
        out.append(
            f"the fitted bandwidth, {fitted.hbm_tb_s * 1e3:.3g} GB/s, is above any GPU's ({fastest.name}: "
            f"{fastest.hbm_tb_s * 1e3:.3g} GB/s): the step costs do not pin it (the weights fit in a cache, or the "
            "timings are noise), so predictions that hinge on memory traffic are extrapolation"
        )
    strongest = max(GPUS.values(), key=lambda g: g.fp8_tflops or g.bf16_tflops)
    peak = strongest.fp8_tflops or strongest.bf16_tflops
    if fitted.tflops > peak:
        out.append(
            f"the fitted throughput, {fitted.tflops:.3g} TFLOPS, is above any GPU's ({strongest.name}: {peak:.4g} "
            "TFLOPS at fp8): the step costs do not pin it, so predictions that hinge on compute are extrapolation"
        )
    finite = [h for h in held_out if math.isfinite(h)]
    worst = max(finite, key=abs, default=None)
    if worst is not None and abs(worst) > HELD_OUT_BOUND:
        out.append(
            f"a point held out of the fit is predicted {worst:+.1%} off (bound ±{HELD_OUT_BOUND:.0%}): the fit does not "
            "predict what it was not given, so its predictions for this machine are not to be bet on; measure more "
            "batch sizes or D, or less noisy steps"
        )
    return out


# -- the K=0 tax ------------------------------------------------------------------------------------


def _constant_tax(points: list[Undrafted]) -> Tax:
    return Tax(max(0.0, sum(p.tax_ms for p in points) / len(points)))


def _linear_tax(points: list[Undrafted]) -> Tax:
    """a + b·B by least squares, neither below 0 (b < 0: the constant; a < 0: through the origin)."""
    b = np.array([p.batch_size for p in points], dtype=float)
    t = np.array([p.tax_ms for p in points])
    slope, intercept = np.polyfit(b, t, 1)
    if slope <= 0:
        return _constant_tax(points)
    if intercept < 0:
        return Tax(0.0, max(0.0, float((b * t).sum() / (b * b).sum())) * 1e3)
    return Tax(float(intercept), float(slope) * 1e3)


def _tax_error(tax: Tax, p: Undrafted) -> float:
    """The undrafted step predicted (plain + the tax) against the one measured."""
    return (p.t_plain_ms + tax.at(p.batch_size)) / p.t_idle_ms - 1


def _held_out_tax(points: list[Undrafted], fitter) -> list[float]:
    return [
        _tax_error(fitter(points[:i] + points[i + 1 :]), p) if len(points) > 1 else math.nan
        for i, p in enumerate(points)
    ]


def fit_tax(points: list[Undrafted]) -> Tax:
    """The K=0 tax in ms: constant, or linear in B where the points hold three batch sizes or more
    and the line's held-out errors are smaller (median |error|) than the constant's."""
    if not points:
        raise ConfigError("calibration: no measured T_idle to fit the K=0 tax on.")
    constant = _constant_tax(points)
    if len({p.batch_size for p in points}) < 3:
        return constant
    line = _linear_tax(points)

    def median_held_out(fitter) -> float:
        return float(np.median([abs(e) for e in _held_out_tax(points, fitter)]))

    return line if median_held_out(_linear_tax) < median_held_out(_constant_tax) else constant


def tax_errors(points: list[Undrafted], everything: Tax | None = None) -> list[tuple[Undrafted, float, float]]:
    """Per point: the error of the tax fitted on every point, and held out (the form fitted on
    every point, constant or line, refitted on the others; NaN where it is the only point)."""
    everything = everything or fit_tax(points)
    held = _held_out_tax(points, _linear_tax if everything.us_per_request else _constant_tax)
    return [(p, _tax_error(everything, p), h) for p, h in zip(points, held)]


# -- T_draft ----------------------------------------------------------------------------------------


def draft_kind(drafter: str) -> str:
    """Which constant a drafter's T_draft fits: `lookup_us_per_request` (n-gram, suffix) or
    `draft_pass_overhead_ms` (every drafter that runs a model)."""
    return "lookup_us_per_request" if drafter in LOOKUP else "draft_pass_overhead_ms"


def _terms(shape: ModelShape, fitted: Fit, p: Drafted, weights: str) -> tuple[float, float]:
    """The model's T_draft at the point as base + per_unit · x, x the constant its kind fits (the
    draft cost is linear in both: one overhead per serial pass, one lookup per request)."""
    field = draft_kind(p.drafter)

    def at(x: float) -> float:
        hw = replace(fitted, **{field: x}).hardware(weights)
        return draft_ms(p.drafter, p.d, p.batch_size, p.context, shape, p.draft, hw)

    base = at(0.0)
    return base, at(1.0) - base


def fit_draft(shape: ModelShape, fitted: Fit, points: list[Drafted], weights: str = "bf16") -> float:
    """The constant of the points' kind (all one kind) that brings the model's T_draft on the
    fitted machine closest to the measured one: least squares of (model − measured) / T_step,
    at least 0."""
    if not points:
        raise ConfigError("calibration: no measured T_draft to fit on.")
    if len({draft_kind(p.drafter) for p in points}) > 1:
        raise ConfigError("calibration: a T_draft fit takes drafters of one kind (lookup or model).")
    num = den = 0.0
    for p in points:
        base, per_unit = _terms(shape, fitted, p, weights)
        num += per_unit * (p.t_draft_ms - base) / p.t_step_ms**2
        den += per_unit**2 / p.t_step_ms**2
    return max(0.0, num / den) if den > 0 else 0.0


def _draft_error(shape: ModelShape, fitted: Fit, value: float, p: Drafted, weights: str) -> float:
    """(model − measured T_draft) / measured T_step: the step's share the drafting is off by."""
    base, per_unit = _terms(shape, fitted, p, weights)
    return (base + per_unit * value - p.t_draft_ms) / p.t_step_ms


def draft_errors(
    shape: ModelShape, fitted: Fit, points: list[Drafted], weights: str = "bf16", everything: float | None = None
) -> list[tuple[Drafted, float, float]]:
    """Per point: the error of the constant fitted on every point, and of the one fitted without it
    (NaN where it is the only point); each as a share of the measured step."""
    everything = fit_draft(shape, fitted, points, weights) if everything is None else everything
    out = []
    for i, p in enumerate(points):
        rest = points[:i] + points[i + 1 :]
        held = _draft_error(shape, fitted, fit_draft(shape, fitted, rest, weights), p, weights) if rest else math.nan
        out.append((p, _draft_error(shape, fitted, everything, p, weights), held))
    return out
