"""engine.kv_cache_dtype, checked before any engine starts: one of the formats speclens measures,
given once (not also as engine.extra_args.kv_cache_dtype), and where the engine is vLLM's CPU
build, one it can keep: an FP8 cache needs x86 with AVX-512 or AMX and attention heads whose size
divides by 32 (vllm/v1/attention/backends/cpu_attn.py _get_attn_isa)."""

from __future__ import annotations

from speclens.config import RunConfig
from speclens.errors import ConfigError
from speclens.gpu_model.model_shape import shape_of
from speclens.machine import cpu_label, fp8_kv_cache_isa
from speclens.model_facts import ModelFacts

KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
CPU_HEAD_MULTIPLE = 32


def is_fp8(cfg: RunConfig) -> bool:
    return str(cfg.engine.kv_cache_dtype).startswith("fp8")


def check_kv_cache_dtype(cfg: RunConfig, target: ModelFacts, draft: ModelFacts | None, device: str | None) -> None:
    """`device`: where the engine keeps its cache ("cpu": vLLM's CPU build here; None: no engine of
    this machine's, as with the fake engine or an attached server)."""
    value = str(cfg.engine.kv_cache_dtype)
    if value not in KV_CACHE_DTYPES:
        raise ConfigError(f"engine.kv_cache_dtype={value}: choose one of {', '.join(KV_CACHE_DTYPES)}.")
    if "kv_cache_dtype" in cfg.engine.extra_args:
        raise ConfigError(
            "give the KV cache's dtype as engine.kv_cache_dtype=…, not engine.extra_args.kv_cache_dtype: "
            "runs are told apart by it."
        )
    if value == "auto" or device != "cpu":
        return
    if not fp8_kv_cache_isa():
        raise ConfigError(
            f"engine.kv_cache_dtype={value}: vLLM's CPU build keeps an FP8 KV cache only on x86 with AVX-512 or "
            f"AMX, and this CPU is {cpu_label()}; run it on such a machine or a GPU (engine=gpu), or leave "
            "engine.kv_cache_dtype=auto."
        )
    for facts, key in ((target, "target.model"), (draft, "drafter.model")):
        if facts is None:
            continue
        try:
            head = shape_of(facts.raw, key).head_dim
        except ConfigError:  # a head whose config names no shape: it attends as the target does
            continue
        if head % CPU_HEAD_MULTIPLE:
            raise ConfigError(
                f"engine.kv_cache_dtype={value}: vLLM's CPU build keeps an FP8 KV cache only for attention heads "
                f"whose size divides by {CPU_HEAD_MULTIPLE}, and {key}'s heads are {head} wide; run it on a GPU "
                "(engine=gpu), or leave engine.kv_cache_dtype=auto."
            )
