"""Passes: the prompts run once at one batch size in one mode, on one engine per mode."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from core.costs import PassMode
from core.generation import EngineStep, SpecCounters, TurnResult
from evals.conversation import run_conversations
from evals.plan import RunPlan
from runners.engine import EngineFactory, ProgressFn
from runners.zero_cost_proposer import CLASS_PATH

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

    @property
    def generate_s(self) -> float:
        """Time the engine spent generating: the sum of its step times, which is what throughput
        and the speedup are measured over (so the fake engine's scripted times carry through); the
        pass's wall time where the engine shows no steps (a server)."""
        return sum(s.wall_s for s in self.engine_steps) if self.engine_steps else self.elapsed_s

    @property
    def output_tokens_per_s(self) -> float:
        tokens = sum(len(r.output_token_ids) for r in self.results)
        return tokens / self.generate_s if self.generate_s > 0 else 0.0


def run_passes(
    plan: RunPlan, factory: EngineFactory, spec: dict[str, Any] | None, mode: PassMode, progress: ProgressFactory,
    logs_dir: Path | None = None,
) -> list[Pass]:
    """The prompts once per batch size, each on a freshly started engine: nothing cached in one
    pass (vLLM's prefix cache, a suffix tree built from earlier outputs) may help the next. An
    engine's own log (a launched server's) is moved into `logs_dir` as server-<mode>-B<b>.log."""
    passes = []
    for batch_size in plan.batch_sizes:
        start = time.perf_counter()
        engine = factory(plan.target_dir, spec)
        load_s = time.perf_counter() - start
        show = progress(f"{mode} B={batch_size}")
        try:
            began = time.perf_counter()
            results = run_conversations(engine, plan.prompts, plan.sampling, show, batch_size)
            elapsed_s = time.perf_counter() - began
            passes.append(Pass(mode, batch_size, results, engine.counters(), load_s, elapsed_s, engine.step_log()))
        finally:
            if hasattr(show, "close"):
                show.close()
            engine.close()
            log = engine.log_file()
            if log is not None and logs_dir is not None and log.is_file():
                shutil.move(log, logs_dir / f"server-{mode}-B{batch_size}.log")
    return passes


def zero_cost_spec(d: int) -> dict[str, Any]:
    """vLLM's speculative config for the verify pass: D free proposals per request and step."""
    return {"method": "custom_class", "model": CLASS_PATH, "num_speculative_tokens": d}
