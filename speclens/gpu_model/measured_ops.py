"""Measured GEMM and all-reduce times for the step-cost model (`evals.whatif cost_model=aiconfigurator`).

NVIDIA's aiconfigurator-core (Apache-2.0; the optional extra `speclens[whatif]`) ships per-operation
timings measured on each GPU with each engine's own kernels. speclens takes the target's GEMMs and
its tensor-parallel all-reduces from them; attention (the G·(1+D) query packing its tables do not
model) and drafting stay speclens's own (speclens/gpu_model/step_cost.py, speclens/gpu_model/draft_cost.py).
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

from speclens.errors import ConfigError

# speclens's GPU names (speclens/gpu_model/gpus.py) -> aiconfigurator's systems
SYSTEMS = {
    "h100_sxm": "h100_sxm",
    "h200_sxm": "h200_sxm",
    "b200": "b200_sxm",
    "gb200": "gb200",
    "l40s": "l40s",
    "a100_sxm_80gb": "a100_sxm",
}
ENGINES = ("vllm", "sglang", "trtllm")
EXTRA = "pip install 'speclens[whatif]' (aiconfigurator-core 0.12)"


class MeasuredOps(Protocol):
    """Milliseconds of one GEMM ([m, k] x [k, n]) and of one all-reduce of `elements` bf16 values."""

    label: str

    def gemm_ms(self, m: int, n: int, k: int, weights: str) -> float: ...

    def allreduce_ms(self, elements: int, tp: int) -> float: ...


class AiconfiguratorOps:
    def __init__(self, gpu: str, engine: str = "vllm") -> None:
        if engine not in ENGINES:
            raise ConfigError(f"engine={engine}: aiconfigurator has tables for {', '.join(ENGINES)}.")
        if gpu not in SYSTEMS:
            raise ConfigError(
                f"cost_model=aiconfigurator has no measured tables for gpu={gpu}; it has {', '.join(SYSTEMS)}."
            )
        try:
            from aiconfigurator_core.sdk import common
            from aiconfigurator_core.sdk.engine import EngineHandle, build_ops_json
            from aiconfigurator_core.sdk.operations import GEMM, CustomAllReduce
            from aiconfigurator_core.sdk.perf_database import get_database, get_version_slots
        except ImportError:
            raise ConfigError(f"cost_model=aiconfigurator needs aiconfigurator-core: {EXTRA}.") from None
        system = SYSTEMS[gpu]
        database = get_database(system, engine, "current")
        if database is None:
            raise ConfigError(f"aiconfigurator has no {engine} tables for {system}.")
        self._engine = EngineHandle.for_database(database)
        self._build, self._gemm, self._allreduce = build_ops_json, GEMM, CustomAllReduce
        self._quant = {"bf16": common.GEMMQuantMode.bfloat16, "fp8": common.GEMMQuantMode.fp8}
        version = (get_version_slots(system, engine) or {}).get("current", "current")
        self.label = f"aiconfigurator {engine} {version} tables on {system}"

    def _evaluate(self, op: Any, x: int) -> float:
        ((_, latency_ms, _, _),) = self._engine.evaluate_ops_json(
            self._build([op]), is_context=True, batch_size=1, s=1, x=x
        )
        return float(latency_ms)

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - one instance per command: the cache lives as long
    def gemm_ms(self, m: int, n: int, k: int, weights: str) -> float:
        return self._evaluate(self._gemm("g", 1, n, k, self._quant[weights]), m)

    @functools.lru_cache(maxsize=1024)  # noqa: B019
    def allreduce_ms(self, elements: int, tp: int) -> float:
        # the engine's own all-reduce, its message counted in elements
        return self._evaluate(self._allreduce("ar", 1, 1, tp), elements)
