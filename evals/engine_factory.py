"""Builds the vLLM engine for a run plan: the engine arguments that `engine.*` sets."""

from __future__ import annotations

from typing import Any

from evals.config import EngineConfig


def engine_args(engine: EngineConfig, seed: int) -> dict[str, Any]:
    args: dict[str, Any] = {
        "max_model_len": engine.max_model_len,
        "dtype": engine.dtype,
        "enforce_eager": engine.enforce_eager,
        "max_num_seqs": engine.max_num_seqs,
        "tensor_parallel_size": engine.tensor_parallel_size,
        "pipeline_parallel_size": engine.pipeline_parallel_size,
        "gpu_memory_utilization": engine.gpu_memory_utilization,
        "seed": seed,
    }
    if engine.max_num_batched_tokens is not None:
        args["max_num_batched_tokens"] = engine.max_num_batched_tokens
    return args | dict(engine.extra_args)


def vllm_factory(plan, spec):
    from runners.vllm_engine import VllmEngine

    cfg = plan.config
    return VllmEngine(
        model=str(plan.target_dir),
        speculative_config=spec,
        engine_args=engine_args(cfg.engine, cfg.seed),
        cpu_kvcache_space_gib=cfg.engine.cpu_kvcache_space_gib,
    )
