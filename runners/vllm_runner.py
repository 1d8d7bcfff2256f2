"""`runner=vllm` (the default): vLLM in this process, one engine per pass (runners/vllm_engine.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.config import EngineConfig, RunConfig
from runners.engine import Engine, EngineFactory


@dataclass
class VllmRunnerConfig:
    """runner=vllm: vLLM in-process, stepped one engine step at a time; `engine.*` sets its arguments."""


def engine_args(engine: EngineConfig, seed: int) -> dict[str, Any]:
    """vLLM engine arguments from `engine.*`."""
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


def engine_factory(cfg: RunConfig, d: int | None) -> EngineFactory:
    def start(model_dir: Path, spec: dict[str, Any] | None) -> Engine:
        # vllm is imported only when an engine starts: light commands never load it.
        from runners.vllm_engine import VllmEngine

        return VllmEngine(model=str(model_dir), speculative_config=spec, engine_args=engine_args(cfg.engine, cfg.seed),
                          cpu_kvcache_space_gib=cfg.engine.cpu_kvcache_space_gib)

    return start


def encoder(cfg: RunConfig, target_dir: Path) -> Any:
    """The target's own chat tokenizer (transformers, imported on use)."""
    from runners.chat import ChatTokenizer

    return ChatTokenizer(target_dir)


def prepare_process(cfg: RunConfig) -> None:
    from runners.vllm_engine import set_process_env

    set_process_env(cfg.engine.cpu_kvcache_space_gib)
