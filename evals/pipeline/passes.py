"""Passes: the prompts run once at one batch size in one mode, on one engine per mode."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from itertools import groupby
from pathlib import Path
from typing import Any, Callable

from evals.pipeline.conversation import run_conversations
from evals.pipeline.plan import RunPlan
from runners.engine import Engine, EngineFactory, EngineFailed, ProgressFn
from runners.zero_cost_proposer import CLASS_PATH, IDLE_CLASS_PATH
from speclens.figures.costs import PassMode
from speclens.generation import (
    COUNTER_NAMES,
    EngineStep,
    Prompt,
    RecordGranularity,
    SamplingSpec,
    SpecCounters,
    TurnRequest,
    TurnResult,
)
from speclens.lossless import first_divergence

# A launched server's log, every pass's appended under a header line.
SERVER_LOG = "server.log"

# Called with a label when a pass starts; gives the per-step progress callback.
ProgressFactory = Callable[[str], "ProgressFn | None"]


@dataclass
class Pass:
    """The prompts run once at one batch size in one mode, with the engine's counters and step
    log for this pass alone."""

    mode: PassMode
    batch_size: int
    results: list[TurnResult]
    counters: SpecCounters | None
    load_s: float
    # Wall time of the pass, start to end (includes the harness between engine steps).
    elapsed_s: float
    engine_steps: list[EngineStep]
    record_granularity: RecordGranularity = RecordGranularity.step
    # The counters the engine keeps (speclens.generation.COUNTER_NAMES, or fewer).
    counted: tuple[str, ...] = COUNTER_NAMES
    # Domain granularity: each domain's counter deltas (its requests ran on their own).
    domain_counters: dict[str, SpecCounters] | None = None
    # The untimed warm-up request before the pass (evals/pipeline/passes.py warm_up).
    warmup_s: float = 0.0
    # The engine's thread count (Engine.threads).
    threads: int | None = None
    # vLLM's model runner that computed it (Engine.model_runner).
    model_runner: str | None = None
    # The GPU it computed on (Engine.gpu).
    gpu: dict[str, Any] | None = None
    # The serving engine and its version (Engine.engine_name, .engine_version).
    served_by: dict[str, str | None] | None = None

    @property
    def generate_s(self) -> float:
        """Time the engine spent generating: the sum of its step times, which is what throughput
        and the speedup are measured over (so the fake engine's scripted times carry through); the
        pass's wall time where the engine shows no steps (a server)."""
        return sum(s.wall_s for s in self.engine_steps) if self.engine_steps else self.elapsed_s

    @property
    def output_tokens(self) -> int:
        return sum(len(r.output_token_ids) for r in self.results)

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.generate_s if self.generate_s > 0 else 0.0


def run_passes(
    plan: RunPlan,
    factory: EngineFactory,
    spec: dict[str, Any] | None,
    mode: PassMode,
    progress: ProgressFactory,
    logs_dir: Path | None = None,
) -> list[Pass]:
    """The prompts once per batch size, each on a freshly started engine: nothing cached in one
    pass (vLLM's prefix cache, a suffix tree built from earlier outputs) may help the next. An
    engine's own log (a launched server's) is appended to `logs_dir`/server.log.

    An engine that reports only counters (domain granularity) gets one domain at a time, its
    counters read between them. If the engine fails mid-pass, the EngineFailed raised carries in
    `passes` the passes finished so far and the failed one's finished requests."""
    passes: list[Pass] = []
    for batch_size in plan.batch_sizes:
        start = time.perf_counter()
        engine = factory(plan.target_dir, spec)
        load_s = time.perf_counter() - start
        show = progress(f"{mode} B={batch_size}")
        results: list[TurnResult] = []
        try:
            warmup_s, counted_before, steps_before = warm_up(engine, plan.sampling)
            began = time.perf_counter()
            domain_counters = None
            if engine.record_granularity == RecordGranularity.domain and spec is not None:
                domain_counters = _by_domain(engine, plan, show, batch_size, results)
                engine_steps = engine.step_log()[steps_before:]
            else:
                engine_steps = _by_length(engine, plan, show, batch_size, results, steps_before)
            counters = engine.counters()
            passes.append(
                Pass(
                    mode,
                    batch_size,
                    results,
                    counters.since(counted_before) if counters is not None else None,
                    load_s,
                    time.perf_counter() - began,
                    engine_steps,
                    engine.record_granularity,
                    engine.counted,
                    domain_counters,
                    warmup_s,
                    engine.threads,
                    engine.model_runner,
                    engine.gpu,
                    {"engine": engine.engine_name, "version": engine.engine_version},
                )
            )
        except EngineFailed as exc:
            partial = Pass(mode, batch_size, results + exc.finished, None, load_s, 0.0, [], engine.record_granularity)
            exc.passes = passes + [partial]
            raise
        finally:
            if hasattr(show, "close"):
                show.close()
            engine.close()
            keep_server_log(engine, logs_dir, f"{mode} B={batch_size}")
    return passes


# The warm-up request: a prompt of no prompt set, a few tokens (a prefill and decode steps, with
# drafting where the engine drafts) so that one-time costs (kernel compilation, allocation) are not timed.
WARMUP_MESSAGE = [{"role": "user", "content": "Say hello."}]
WARMUP_TOKENS = 4


def warm_up(engine: Engine, sampling: SamplingSpec) -> tuple[float, SpecCounters, int]:
    """Run the warm-up request; its seconds, and the counters and step count it leaves (what the
    timed pass's own are measured from)."""
    start = time.perf_counter()
    request = TurnRequest("speclens-warmup", 0, tuple(engine.chat_token_ids(WARMUP_MESSAGE)))
    engine.generate([request], replace(sampling, max_tokens=min(WARMUP_TOKENS, sampling.max_tokens)))
    engine.forget_finished()
    return time.perf_counter() - start, engine.counters() or SpecCounters(), len(engine.step_log())


def length_groups(prompts: list[Prompt]) -> list[tuple[int | None, list[Prompt]]]:
    """The prompts of each length bucket, shortest first (one group, None, where they state no length)."""
    ordered = sorted(prompts, key=lambda p: -1 if p.input_tokens is None else p.input_tokens)
    return [(length, list(group)) for length, group in groupby(ordered, key=lambda p: p.input_tokens)]


def _by_length(
    engine: Engine,
    plan: RunPlan,
    show: ProgressFn | None,
    batch_size: int,
    results: list[TurnResult],
    steps_before: int,
) -> list[EngineStep]:
    """Each length bucket's prompts on their own (up to B in flight, never two lengths in one step), so
    that each length's step costs and throughput are its own; the engine steps from `steps_before`
    on, each tagged with the length it ran."""
    tagged: list[EngineStep] = []
    for length, prompts in length_groups(plan.prompts):
        results += run_conversations(engine, prompts, plan.sampling, show, batch_size)
        steps = engine.step_log()[steps_before + len(tagged) :]
        tagged += [replace(step, input_tokens=length) for step in steps]
    return tagged


def _by_domain(
    engine: Engine, plan: RunPlan, show: ProgressFn | None, batch_size: int, results: list[TurnResult]
) -> dict[str, SpecCounters]:
    """Each domain's prompts on their own (up to B in flight), its counter deltas attributed to it."""
    counters: dict[str, SpecCounters] = {}
    for domain in sorted({p.domain for p in plan.prompts}):
        before = engine.counters()
        results += run_conversations(
            engine, [p for p in plan.prompts if p.domain == domain], plan.sampling, show, batch_size
        )
        counters[domain] = engine.counters().since(before)
    return counters


def keep_server_log(engine: Engine, logs_dir: Path | None, label: str) -> None:
    log = engine.log_file()
    if log is None or logs_dir is None or not log.is_file():
        return
    with open(logs_dir / SERVER_LOG, "a", encoding="utf-8") as out:
        out.write(f"===== speclens: the server of the {label} pass =====\n")
        out.write(log.read_text(errors="replace"))
    log.unlink()


def top2_margins(
    plan: RunPlan, factory: EngineFactory, mismatched: dict[int, list[tuple[TurnResult, TurnResult]]]
) -> dict[tuple[str, int, int], float | None]:
    """For each (speculative, plain) mismatch at each batch size, plain decoding's top-2 log-probability
    margin where the outputs first differ: on a plain engine, the turn's prompt followed by plain
    decoding's own output up to that token, asking for one token and its top-2 log-probabilities
    (the exact context, whatever trajectory another batch shape would have taken; None where the
    runner gives none)."""
    keys, requests = [], []
    for batch_size, pairs in mismatched.items():
        for spec, base in pairs:
            if spec.prompt_token_ids != base.prompt_token_ids:
                continue  # an earlier turn's answer parted: that turn's mismatch explains this one
            at = first_divergence(spec.output_token_ids, base.output_token_ids)
            keys.append((spec.request_id, spec.turn, batch_size))
            requests.append(
                TurnRequest(
                    spec.request_id, spec.turn, tuple(base.prompt_token_ids) + tuple(base.output_token_ids[:at])
                )
            )
    if not requests:
        return {}
    engine = factory(plan.target_dir, None)
    try:
        results = engine.generate(requests, replace(plan.sampling, max_tokens=1, top2=True))
    finally:
        engine.close()
    return {key: (result.top2_margins or [None])[0] for key, result in zip(keys, results)}


def zero_cost_spec(d: int, model_runner: str | None = None) -> dict[str, Any]:
    """vLLM's speculative config for the verify pass: D free proposals per request and step, on the
    run's model runner. V1: speclens's proposer (a custom class, which V2 does not load); V2: its
    n-gram speculator, which drafts D tokens at every step whatever it finds (two small kernels)."""
    if model_runner == "v2":
        return {"method": "ngram", "num_speculative_tokens": d, "prompt_lookup_min": 1, "prompt_lookup_max": 1}
    return {"method": "custom_class", "model": CLASS_PATH, "num_speculative_tokens": d}


# Why an operating point has no K=0 tax though its baseline ran (OperatingPoint.k0_tax_note).
IDLE_NEEDS_STEPS = "the engine shows no engine steps (a server): the idle pass has nothing to time"
IDLE_NOT_ON_V2 = (
    "vLLM's Model Runner V2 loads no custom proposer and its n-gram speculator always proposes D: "
    "no pass with speculation on and nothing drafted runs on it"
)


def idle_spec(d: int, model_runner: str | None = None) -> dict[str, Any] | None:
    """vLLM's speculative config for the idle pass: speculation on at D (vLLM refuses D = 0) with
    speclens's proposer that proposes nothing at any step (runners/zero_cost_proposer.py), so every
    step takes the speculative path with no drafts; None on Model Runner V2 (IDLE_NOT_ON_V2)."""
    if model_runner == "v2":
        return None
    return {"method": "custom_class", "model": IDLE_CLASS_PATH, "num_speculative_tokens": d}
