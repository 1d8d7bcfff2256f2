"""The step-cost model fitted to a machine's own step costs (`evals.whatif calibrate=<dir>`,
`gpu=measured`): the bandwidth, the compute throughput and the per-pass overhead that make the
model's T_verif closest to the measured ones, in log space (each point weighs by its relative
error), and how far each point is then off, both fitted on all points and held out.

The fit stands for the machine as `Gpu(hbm_tb_s=bandwidth, bf16_tflops=throughput)` with every
efficiency 1: what is fitted is what the machine reaches, not its datasheet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from speclens.errors import ConfigError
from speclens.gpu_model.gpus import GPUS, Gpu
from speclens.gpu_model.model_shape import ModelShape
from speclens.gpu_model.step_cost import TILE_ROWS, Efficiency, Hardware, verify_step

MIN_POINTS = 3  # three numbers are fitted
# A held-out error past this and the fit does not predict the points it was not given: its
# predictions for this machine are not to be bet on (the 4-point CPU calibration of docs/whatif.md
# is off by 26 % held out at most).
HELD_OUT_BOUND = 0.30


@dataclass(frozen=True)
class Measured:
    """One measured T_verif: B requests, q = 1 + D query tokens each over `context` cached tokens."""

    batch_size: int
    d: int
    context: int
    t_ms: float


@dataclass(frozen=True)
class Fit:
    hbm_tb_s: float
    tflops: float
    overhead_ms: float
    tile_rows: int | None = TILE_ROWS  # the attention kernels' tiles the fit found closer (None: none)

    def hardware(self, weights: str = "bf16", tp: int = 1, expert_weights: str | None = None) -> Hardware:
        gpu = Gpu("measured", self.tflops, self.tflops, self.hbm_tb_s, memory_gb=math.inf, nvlink_gb_s=None)
        # three parameters fitted: a cost per token would be the compute term's to carry, one per
        # MoE layer the fitted overhead's
        eff = Efficiency(mem=1.0, compute=1.0, overhead_ms=self.overhead_ms, token_us=0.0, moe_layer_us=0.0)
        return Hardware(gpu, tp=tp, weights=weights, eff=eff, tile_rows=self.tile_rows, expert_weights=expert_weights)

    def predict(self, shape: ModelShape, point: Measured, weights: str = "bf16") -> float:
        return verify_step(shape, point.batch_size, point.d, point.context, self.hardware(weights)).total_ms


LOG_BOUND = 30.0  # e^±30: far past any machine; a minimiser wandering beyond has lost the points


def _loss(shape: ModelShape, points: list[Measured], weights: str, tile_rows: int | None, x: np.ndarray) -> float:
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


def fit(shape: ModelShape, points: list[Measured], weights: str = "bf16") -> Fit:
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
    shape: ModelShape, points: list[Measured], weights: str = "bf16", everything: Fit | None = None
) -> list[tuple[Measured, float, float]]:
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
