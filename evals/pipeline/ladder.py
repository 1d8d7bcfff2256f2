"""A request-rate ladder through one engine per arm (`python -m evals.load`, issue 67).

Each arm (plain decoding; the drafter at each D; then the schedule arm) gets its own engine (a
launched server, or an attached one), warmed up once; at each rate, `repeats` times, a stage sends
`stage.warmup_requests + stage.requests` requests open loop (seeded arrivals, the same prompts at
the same times for every arm) and is recorded when it ends: its row in load.json and its requests
in load_requests.parquet (the requests first; the row is what marks the stage done). A ladder that
dies keeps its finished stages, and the same command resumes from the first unfinished one.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from evals.pipeline.passes import keep_server_log, warm_up
from evals.pipeline.plan import RunPlan, first_messages
from reports.load_ladder import arm_label
from runners.engine import Engine, EngineFactory
from speclens.arrivals import arrival_offsets
from speclens.console import console
from speclens.errors import ConfigError, CorruptRecord, MeasurementError
from speclens.figures import metrics
from speclens.figures.load_ladder import ServedRequest, StageFigures, stage_figures
from speclens.file_formats.load_file import (
    LOAD_FILE,
    LOAD_REQUESTS_FILE,
    LoadStage,
    Spread,
    read_load_file,
    write_load_file,
)
from speclens.file_formats.records import write_parquet
from speclens.generation import TurnRequest, TurnResult
from speclens.load_config import DEFAULT_STAGE_REQUESTS, LoadConfig
from speclens.provenance import Provenance

# The per-request columns of load_requests.parquet (one row per measured request of a stage).
REQUEST_COLUMNS = (
    "arm",
    "drafter",
    "d",
    "request_rate",
    "repeat",
    "request_id",
    "domain",
    "prompt_tokens",
    "sent_s",
    "latency_s",
    "ttft_s",
    "tpot_s",
    "output_tokens",
    "stage_seconds",
    "stage_requests",
)


@dataclass(frozen=True)
class Arm:
    """One arm of the ladder: plain decoding, the drafter at a static D, or a draft-length schedule."""

    kind: str  # "plain", "static", "schedule"
    drafter: str
    d: int | None
    spec: dict[str, Any] | None

    @property
    def label(self) -> str:
        return arm_label(self.kind, self.drafter, self.d)

    def owns(self, row: LoadStage) -> bool:
        return row.arm == self.kind and row.drafter == self.drafter and row.d == self.d


def static_arms(plan: RunPlan, cfg: LoadConfig) -> list[Arm]:
    """Plain decoding, then the drafter at each D (each D checked against the drafter first)."""
    arms = [Arm("plain", "none", None, None)]
    if not plan.drafter.speculative:
        return arms
    for d in cfg.arm_lengths:
        plan.drafter.validate(d, plan.target, plan.draft)
        at_d = replace(plan, config=replace(plan.config, d=d), schedule=None)
        arms.append(Arm("static", plan.drafter.name, d, at_d.speculative_config()))
    return arms


def schedule_arm(static: Arm, schedule: list[list[int]]) -> Arm:
    assert static.spec is not None
    return Arm("schedule", static.drafter, static.d, static.spec | {"num_speculative_tokens_per_batch_size": schedule})


def stage_seed(seed: int, rate_index: int, repeat: int) -> int:
    """Every arm's stage at one rung and repeat sends at the same seeded times."""
    return seed * 1_000_003 + rate_index * 101 + repeat


def stage_size(cfg: LoadConfig, rate: float) -> int:
    """Requests measured at `rate` (the warm-up ones not counted)."""
    if cfg.stage.seconds is not None:
        return max(2, math.ceil(cfg.stage.seconds * rate))
    return cfg.stage.requests if cfg.stage.requests is not None else DEFAULT_STAGE_REQUESTS


# How often a stage reads the server's gauges (requests in flight, KV cache use).
GAUGE_INTERVAL_S = 0.5


class GaugeSampler:
    """Reads the engine's gauges every GAUGE_INTERVAL_S on a thread while a stage runs, each sample
    with its time from the stage's start; nothing where the engine reports none."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> GaugeSampler:
        self._began = time.perf_counter()
        if self.engine.load_gauges() is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(GAUGE_INTERVAL_S):
            found = self.engine.load_gauges()
            if found:
                self.samples.append((time.perf_counter() - self._began, found))

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def series(self, key: str, after_s: float) -> list[float]:
        """One gauge's samples taken from `after_s` on (the measured requests' part of the stage)."""
        return [found[key] for at, found in self.samples if at >= after_s and key in found]


@dataclass
class LadderState:
    """What the ladder has finished: its stage rows and their requests."""

    stages: list[LoadStage]
    requests: pd.DataFrame

    def done(self, arm: Arm, rate: float, repeat: int) -> bool:
        return any(arm.owns(row) and row.request_rate == rate and row.repeat == repeat for row in self.stages)


def empty_requests() -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series(dtype="object") for name in REQUEST_COLUMNS})


def resumed(out_dir: Path, fingerprint: str, force: bool) -> LadderState:
    """The stages a killed ladder of this configuration finished in `out_dir` (none with force=true
    or where none ran); a ladder of another configuration there is refused."""
    if force or not (out_dir / LOAD_FILE).is_file():
        return LadderState([], empty_requests())
    try:
        found = read_load_file(out_dir)
    except CorruptRecord as exc:
        print(f"speclens: {exc}; the ladder is measured again from its first stage.", file=sys.stderr)
        return LadderState([], empty_requests())
    if found.config_fingerprint != fingerprint:
        raise ConfigError(
            f"{out_dir} holds a load ladder of another configuration; force=true measures this one over it, "
            "or choose another hydra.run.dir."
        )
    requests_path = out_dir / LOAD_REQUESTS_FILE
    requests = pd.read_parquet(requests_path) if requests_path.is_file() else empty_requests()
    return LadderState(list(found.stages), requests)


def spread(values_s: Sequence[float], scale: float = 1.0) -> Spread | None:
    if not values_s:
        return None
    p50, p90, p99 = np.percentile(np.asarray(values_s, dtype=float) * scale, [50, 90, 99])
    return Spread(float(p50), float(p90), float(p99))


def stage_record(
    figures: StageFigures,
    arm: Arm,
    rate: float,
    arrivals: str,
    provenance: Provenance,
    repeat: int = 0,
    al: float | None = None,
    tokens_per_step: float | None = None,
) -> LoadStage:
    """load.json's row of one arm at one rate, from the stage's figures (measured or simulated)."""
    ttft, latency = spread(figures.ttft_s, 1000.0), spread(figures.latency_s)
    assert ttft is not None and latency is not None
    return LoadStage(
        drafter=arm.drafter,
        d=arm.d,
        arm=arm.kind,
        request_rate=rate,
        arrivals=arrivals,
        repeat=repeat,
        n_requests=figures.n_requests,
        achieved_rate=figures.achieved_rate,
        ttft_ms=ttft,
        tpot_ms=spread(figures.tpot_s, 1000.0),
        itl_ms=spread(figures.itl_s, 1000.0),
        latency_s=latency,
        output_tokens_per_s=figures.output_tokens_per_s,
        goodput_rps=figures.goodput_rps,
        mean_in_flight=figures.mean_in_flight,
        littles_law_gap=figures.littles_law_gap,
        al=al,
        tokens_per_step=tokens_per_step,
        saturated=figures.saturated,
        seconds=figures.seconds,
        provenance=provenance,
    )


def acceptance(results: Sequence[TurnResult], speculative: bool) -> tuple[float | None, float | None]:
    """AL (speculative arms) and tokens per target step of a stage's requests, as the engine
    reported them (the definitions of speclens/figures/metrics.py)."""
    requests = pd.DataFrame(
        {
            "request_id": [r.request_id for r in results],
            "output_tokens": [len(r.output_token_ids) for r in results],
            "target_steps": [r.target_steps for r in results],
            "num_accepted": [r.totals.num_accepted if r.totals else np.nan for r in results],
            "drafted_steps": [r.totals.num_drafts if r.totals else np.nan for r in results],
        }
    )
    tokens_per_step = metrics.tokens_per_step(requests)
    if not speculative:
        return None, tokens_per_step
    steps = pd.DataFrame(
        {
            "request_id": [r.request_id for r in results for _ in r.steps],
            "num_accepted": [s.num_accepted for r in results for s in r.steps],
        }
    )
    with_totals = any(r.totals is not None for r in results)
    return metrics.acceptance_length(steps, requests if with_totals else None), tokens_per_step


def served(results: Sequence[TurnResult], offsets: Sequence[float]) -> list[ServedRequest]:
    return [
        ServedRequest(
            sent_s=offset,
            latency_s=r.latency_s,
            ttft_s=r.ttft_s,
            output_tokens=len(r.output_token_ids),
            chunk_gaps_s=tuple(r.chunk_gaps_s),
        )
        for r, offset in zip(results, offsets)
    ]


class Ladder:
    """Runs the ladder's stages for each arm, recording each as it ends."""

    def __init__(
        self,
        plan: RunPlan,
        cfg: LoadConfig,
        out_dir: Path,
        factory: EngineFactory,
        identity: Provenance,
        fingerprint: str,
        state: LadderState,
        say: Callable[[str], None] = lambda line: print(line, file=console(), flush=True),
    ) -> None:
        self.plan, self.cfg, self.out_dir, self.factory = plan, cfg, out_dir, factory
        self.identity, self.fingerprint, self.state, self.say = identity, fingerprint, state, say

    def pending(self, arm: Arm) -> list[tuple[int, float, int]]:
        return [
            (i, rate, repeat)
            for repeat in range(self.cfg.ladder_repeats)
            for i, rate in enumerate(self.cfg.request_rates)
            if not self.state.done(arm, rate, repeat)
        ]

    def run_arm(self, arm: Arm) -> None:
        todo = self.pending(arm)
        if not todo:
            return
        self.say(f"speclens: {arm.label}: starting its engine ({len(todo)} stage(s) to measure)")
        engine = self.factory(self.plan.target_dir, arm.spec)
        try:
            warm_up(engine, self.plan.sampling)
            prompts = [tuple(engine.chat_token_ids(first_messages(p))) for p in self.plan.prompts]
            for rate_index, rate, repeat in todo:
                self.run_stage(engine, arm, prompts, rate_index, rate, repeat)
        except (ConfigError, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - any loss of the engine mid-ladder: keep what finished
            finished = len(self.state.stages)
            raise MeasurementError(
                f"the ladder stopped in arm {arm.label}: {type(exc).__name__}: {exc}; its {finished} finished "
                f"stage(s) are kept in {self.out_dir / LOAD_FILE}, and the same command resumes from the first "
                "unfinished one."
            ) from exc
        finally:
            engine.close()
            keep_server_log(engine, self.out_dir, f"ladder's {arm.label}")

    def run_stage(
        self, engine: Engine, arm: Arm, prompts: list[tuple[int, ...]], rate_index: int, rate: float, repeat: int
    ) -> None:
        cfg = self.cfg
        warmup = cfg.stage.warmup_requests
        n = warmup + stage_size(cfg, rate)
        chosen = [self.plan.prompts[i % len(self.plan.prompts)] for i in range(n)]
        requests = [TurnRequest(f"{p.request_id}.{i}", 0, prompts[i % len(prompts)]) for i, p in enumerate(chosen)]
        offsets = arrival_offsets(rate, n, cfg.arrivals, stage_seed(cfg.seed, rate_index, repeat))
        with GaugeSampler(engine) as gauges:
            results = engine.generate(requests, self.plan.sampling, offsets_s=offsets)
        measured_from = offsets[warmup] if warmup < len(offsets) else 0.0
        figures = stage_figures(
            served(results, offsets),
            warmup,
            slo_ttft_ms=cfg.slo.ttft_ms,
            slo_tpot_ms=cfg.slo.tpot_ms,
            server_in_flight=gauges.series("in_flight", measured_from) or None,
        )
        kv_use = gauges.series("kv_cache_usage", measured_from)
        measured = results[warmup:]
        al, tokens_per_step = acceptance(measured, arm.spec is not None)
        row = stage_record(
            figures,
            arm,
            rate,
            cfg.arrivals,
            self.identity.but(engine=engine.engine_name, engine_version=engine.engine_version),
            repeat=repeat,
            al=al,
            tokens_per_step=tokens_per_step,
        )
        if kv_use:
            row = replace(row, kv_cache_usage=min(1.0, float(np.mean(kv_use))))
        rows = self.request_rows(arm, rate, repeat, chosen[warmup:], measured, offsets[warmup:], figures)
        self.state.requests = (
            pd.concat([self.state.requests, rows], ignore_index=True) if len(self.state.requests) else rows
        )
        write_parquet(self.state.requests, self.out_dir / LOAD_REQUESTS_FILE)
        self.state.stages.append(row)
        self.write(complete=False)
        self.say(
            f"speclens: {arm.label} at {rate:g} req/s{f' (repeat {repeat + 1})' if cfg.ladder_repeats > 1 else ''}: "
            f"{figures.output_tokens_per_s:.1f} tok/s, TPOT p50 "
            f"{'-' if row.tpot_ms is None else f'{row.tpot_ms.p50:.1f} ms'}, achieved {figures.achieved_rate:.2f} req/s"
            + (" (saturated)" if figures.saturated else "")
        )

    def request_rows(
        self,
        arm: Arm,
        rate: float,
        repeat: int,
        prompts: Sequence[Any],
        results: Sequence[TurnResult],
        offsets: Sequence[float],
        figures: StageFigures,
    ) -> pd.DataFrame:
        requests = served(results, offsets)
        return pd.DataFrame(
            {
                "arm": arm.kind,
                "drafter": arm.drafter,
                "d": pd.array([arm.d] * len(requests), dtype="Int64"),
                "request_rate": rate,
                "repeat": repeat,
                "request_id": [p.request_id for p in prompts],
                "domain": [p.domain for p in prompts],
                "prompt_tokens": [r.prompt_tokens for r in results],
                "sent_s": [r.sent_s for r in requests],
                "latency_s": [r.latency_s for r in requests],
                "ttft_s": pd.array([r.ttft_s for r in requests], dtype="Float64"),
                "tpot_s": pd.array([r.tpot_s for r in requests], dtype="Float64"),
                "output_tokens": [r.output_tokens for r in requests],
                "stage_seconds": figures.seconds,
                "stage_requests": figures.n_requests,
            }
        )

    def write(self, complete: bool, crossover: list | None = None) -> Path:
        return write_load_file(self.state.stages, crossover or [], self.out_dir, self.fingerprint, complete)
