"""A load ladder predicted on a GPU (`evals.whatif ... request_rates=[...] input_tokens= output_tokens=`,
issue 67): each arm (plain decoding; each drafter at each D) served by simulated continuous batching
(speclens/gpu_model/serving_sim.py) with the step-cost model's step times and the acceptance measured or given;
the same stage rows and crossover rows as a measured ladder (`source: predicted`), each figure with
its range from simulating the step times at the model's held-out error on absolute throughput
(TOKENS_PER_S_BOUND: step times x (1 - b) and x (1 + b))."""

from __future__ import annotations

import functools
from typing import Any, Callable

import pandas as pd

from evals.pipeline.ladder import Arm, stage_record
from reports.load_ladder import crossover_rows
from speclens.arrivals import arrival_offsets
from speclens.errors import ConfigError
from speclens.figures.load_ladder import stage_figures
from speclens.file_formats.load_file import LoadStage
from speclens.gpu_model.model_error import TOKENS_PER_S_BOUND
from speclens.gpu_model.model_shape import ModelShape
from speclens.gpu_model.serving_sim import SimulatedEngine, simulate
from speclens.gpu_model.step_cost import Hardware, memory_needed_gb, verify_step
from speclens.gpu_model.whatif import MEMORY_HEADROOM, Drafting, point
from speclens.provenance import PREDICTED, Provenance
from speclens.schema import to_plain

# The simulated engine's limits where the user sets none (vLLM's GPU defaults).
MAX_NUM_SEQS = 256
MAX_BATCHED_TOKENS = 8192
# Requests per simulated stage: enough that a stage's figures are steady.
STAGE_REQUESTS = 200
SEED = 0


def prefill_ms(target: ModelShape, tokens: int, context: int, hw: Hardware) -> float:
    """What `tokens` prompt tokens add to a step: one request's forward over them, less the weights'
    read a decode step pays already."""
    if tokens <= 0:
        return 0.0
    alone = verify_step(target, 1, tokens - 1, context, hw).total_ms
    return alone - verify_step(target, 1, 0, context, hw).total_ms


def kv_capacity(target: ModelShape, context: int, d: int, hw: Hardware, limit: int) -> int:
    """How many requests of `context` tokens the GPU holds at once beside the weights (at most `limit`)."""
    budget = MEMORY_HEADROOM * hw.gpu.memory_gb
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if memory_needed_gb(target, mid, context, d, hw) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def arm_engine(
    drafting: Drafting | None,
    d: int,
    target: ModelShape,
    hw: Hardware,
    input_tokens: int,
    output_tokens: int,
    scale: float,
) -> SimulatedEngine:
    """The simulated engine of one arm: its step time per (decoding requests, prefill tokens), at
    the mean context of a request's decode (input + half the output), scaled by `scale`."""
    context = input_tokens + output_tokens // 2
    full = input_tokens + output_tokens

    @functools.lru_cache(maxsize=None)
    def decode_ms(batch: int) -> float:
        if batch == 0:
            return verify_step(target, 1, 0, context, hw).total_ms
        if drafting is None:
            return verify_step(target, batch, 0, context, hw).total_ms
        return point(drafting, d, batch, context, target, hw)["t_step_ms"]

    @functools.lru_cache(maxsize=None)
    def step_ms(batch: int, prefill: int) -> float:
        return scale * (decode_ms(batch) + prefill_ms(target, prefill, input_tokens, hw))

    tokens_per_step = 1.0 if drafting is None else point(drafting, d, 1, context, target, hw)["tokens_per_step"]
    capacity = kv_capacity(target, full, d if drafting else 0, hw, MAX_NUM_SEQS)
    if capacity < 1:
        raise ConfigError(
            f"input_tokens={input_tokens} output_tokens={output_tokens}: one request does not fit beside the "
            f"weights on {hw.gpu.name} x{hw.tp}; shorten them, or add GPUs (tp=)."
        )
    return SimulatedEngine(
        step_ms, tokens_per_step, MAX_NUM_SEQS, MAX_BATCHED_TOKENS, capacity, 1 + (d if drafting else 0)
    )


def _stage(
    arm: tuple[str, int | None, str],
    rate: float,
    engine: SimulatedEngine,
    arrivals: list[float],
    input_tokens: int,
    output_tokens: int,
    provenance: Provenance,
    process: str,
) -> tuple[LoadStage, pd.DataFrame]:
    served = simulate(arrivals, input_tokens, output_tokens, engine)
    figures = stage_figures(served)
    drafter, d, kind = arm
    tokens_per_step = engine.tokens_per_step
    al = None if kind == "plain" else tokens_per_step
    row = stage_record(
        figures, Arm(kind, drafter, d, None), rate, process, provenance, al=al, tokens_per_step=tokens_per_step
    )
    requests = pd.DataFrame(
        {
            "arm": kind,
            "drafter": drafter,
            "d": pd.array([d] * len(served), dtype="Int64"),
            "request_rate": rate,
            "repeat": 0,
            "request_id": [f"sim{i}" for i in range(len(served))],
            "domain": "all",
            "output_tokens": [r.output_tokens for r in served],
            "tpot_s": pd.array([r.tpot_s for r in served], dtype="Float64"),
            "stage_seconds": figures.seconds,
            "stage_requests": figures.n_requests,
        }
    )
    return row, requests


def predicted_ladder(
    draftings: list[Drafting],
    ds: Callable[[Drafting], list[int]],
    target: ModelShape,
    hw: Hardware,
    rates: list[float],
    input_tokens: int,
    output_tokens: int,
    process: str = "poisson",
    n_requests: int = STAGE_REQUESTS,
) -> dict[str, Any]:
    """whatif.json's `ladder` (stage rows, with `low`/`high` figures at the step model's error) and
    `crossover` (rows with `range`): the same keys a measured ladder's load.json holds."""
    provenance = Provenance(source=PREDICTED, runner="whatif", engine=hw.engine.name if hw.engine else "vllm")
    arms: list[tuple[tuple[str, int | None, str], Drafting | None, int]] = [(("none", None, "plain"), None, 0)]
    arms += [((dr.drafter, d, "static"), dr, d) for dr in draftings for d in ds(dr)]
    results: dict[float, tuple[list[LoadStage], pd.DataFrame]] = {}
    for scale in (1.0, 1.0 - TOKENS_PER_S_BOUND, 1.0 + TOKENS_PER_S_BOUND):
        stages, frames = [], []
        for arm, drafting, d in arms:
            engine = arm_engine(drafting, d, target, hw, input_tokens, output_tokens, scale)
            for i, rate in enumerate(rates):
                arrivals = arrival_offsets(rate, n_requests, process, SEED + i)
                row, requests = _stage(arm, rate, engine, arrivals, input_tokens, output_tokens, provenance, process)
                stages.append(row)
                frames.append(requests)
        results[scale] = (stages, pd.concat(frames, ignore_index=True))
    point_stages, point_requests = results[1.0]
    fast, slow = results[1.0 - TOKENS_PER_S_BOUND], results[1.0 + TOKENS_PER_S_BOUND]
    ladder = []
    for row, quick, slow_row in zip(point_stages, fast[0], slow[0]):
        plain = to_plain(row)
        plain["output_tokens_per_s_range"] = sorted([slow_row.output_tokens_per_s, quick.output_tokens_per_s])
        if row.tpot_ms is not None:
            plain["tpot_ms_range"] = sorted([quick.tpot_ms.p50, slow_row.tpot_ms.p50])
        ladder.append(plain)
    crossover = []
    rows = crossover_rows(point_stages, point_requests, rates, SEED)
    quick_rows = {(r.drafter, r.d): r for r in crossover_rows(fast[0], fast[1], rates, SEED)}
    slow_rows = {(r.drafter, r.d): r for r in crossover_rows(slow[0], slow[1], rates, SEED)}
    for row in rows:
        out = to_plain(row)
        open_ends = []
        for key in ("throughput_rate", "tpot_rate"):
            ends = [getattr(row, key)] + [getattr(at[(row.drafter, row.d)], key) for at in (quick_rows, slow_rows)]
            if all(e is None for e in ends):
                continue
            if any(e is None for e in ends):
                open_ends.append(key)
            out[f"{key}_range"] = [
                min(e for e in ends if e is not None),
                max(rates[-1] if e is None else e for e in ends),
            ]
        if open_ends:
            out["range_note"] = (
                f"{' and '.join(open_ends)}: not reached within the rates at one end of the step model's error; "
                f"the range ends at the top rate ({rates[-1]:g})"
            )
        crossover.append(out)
    return {
        "ladder": ladder,
        "crossover": crossover,
        "ladder_setting": {
            "request_rates": rates,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "arrivals": process,
            "requests_per_stage": n_requests,
            "max_num_seqs": MAX_NUM_SEQS,
            "max_num_batched_tokens": MAX_BATCHED_TOKENS,
            "range": f"step times x (1 -/+ {TOKENS_PER_S_BOUND}), the step model's held-out error on absolute throughput",
        },
    }
