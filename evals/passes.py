"""Passes: the prompts run once at one batch size in one mode, on one engine per mode."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from evals.conversation import run_conversations
from evals.plan import RunPlan
from runners.engine import Engine, EngineStep, ProgressFn, SpecCounters, TurnResult

# Called with a label when a pass starts; gives the per-step progress callback.
ProgressFactory = Callable[[str], "ProgressFn | None"]
# Builds an engine for the plan's target with this speculative config (None = plain decoding).
EngineFactory = Callable[[RunPlan, "dict[str, Any] | None"], Engine]


@dataclass
class Pass:
    """The prompts run once at one batch size in one mode (see evals/costs.py for the modes)."""

    mode: str
    batch_size: int
    results: list[TurnResult]
    counters: SpecCounters | None
    # Wall time of the pass, start to end (includes the harness between engine steps).
    elapsed_s: float
    engine_steps: list[EngineStep]

    @property
    def generate_s(self) -> float:
        """Time the engine spent generating: the sum of its step times, which is what throughput
        and the speedup are measured over (so the fake engine's scripted times carry through)."""
        return sum(s.wall_s for s in self.engine_steps)

    @property
    def output_tokens_per_s(self) -> float:
        tokens = sum(len(r.output_token_ids) for r in self.results)
        return tokens / self.generate_s if self.generate_s > 0 else 0.0


def run_passes(
    plan: RunPlan, factory: EngineFactory, spec: dict[str, Any] | None, mode: str, progress: ProgressFactory
) -> tuple[list[Pass], float]:
    """One engine, the prompts once per batch size; also gives the engine's load time."""
    start = time.perf_counter()
    engine = factory(plan, spec)
    load_s = time.perf_counter() - start
    passes = []
    try:
        for batch_size in plan.batch_sizes:
            show = progress(f"{mode} B={batch_size}")
            steps_before, counters_before = len(engine.step_log()), engine.counters()
            began = time.perf_counter()
            try:
                results = run_conversations(engine, plan.prompts, plan.sampling, show, batch_size)
            finally:
                if hasattr(show, "close"):
                    show.close()
            elapsed_s = time.perf_counter() - began
            counters = engine.counters()
            if counters is not None and counters_before is not None:
                counters = counters.since(counters_before)
            passes.append(Pass(mode, batch_size, results, counters, elapsed_s, engine.step_log()[steps_before:]))
    finally:
        engine.close()
    return passes, load_s


def zero_cost_spec(d: int) -> dict[str, Any]:
    """vLLM's speculative config for the verify pass: D free proposals per request and step."""
    from runners.zero_cost_proposer import CLASS_PATH

    return {"method": "custom_class", "model": CLASS_PATH, "num_speculative_tokens": d}


def total_counters(counters: list[SpecCounters | None]) -> SpecCounters:
    total = SpecCounters()
    for c in counters:
        if c is None:
            continue
        per_pos = total.num_accepted_tokens_per_pos or [0] * len(c.num_accepted_tokens_per_pos)
        total = SpecCounters(
            total.num_drafts + c.num_drafts,
            total.num_draft_tokens + c.num_draft_tokens,
            total.num_accepted_tokens + c.num_accepted_tokens,
            [a + b for a, b in zip(per_pos, c.num_accepted_tokens_per_pos)],
        )
    return total
