"""What the prompts ask of the engine, settled before it starts.

- The window: the target's own (config.json's max_position_embeddings), or a context extension the
  user names (`engine.rope_scaling`, YaRN through vLLM's hf_overrides; or their own
  `engine.extra_args.hf_overrides`), which every figure measured with it states (summary.json's
  `context_window`, the table, the report). A length the window cannot hold is refused before any
  prompt is built.
- `engine.max_model_len`, where the user left it unset, raised to the longest prompt with its answer
  (within the window).
- The KV cache B requests of prompt + max_tokens need, against what the engine will have:
  `engine.cpu_kvcache_space_gib` on vLLM's CPU build (fitted where unset, refused where set too
  small), the GPU memory `engine.gpu_memory_utilization` leaves after the weights on a GPU.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from evals.pipeline import kv_cache
from speclens.config import RunConfig
from speclens.errors import ConfigError
from speclens.figures.summary import ContextWindow
from speclens.gpu_model.model_shape import shape_of
from speclens.model_facts import ModelFacts, text_config

GIB = 1024**3
# vLLM's CPU build allocates the KV cache in blocks of this many tokens (a request's last block is
# whole); GPU blocks are smaller, so rounding to it over-counts there by at most one block a request.
KV_BLOCK_TOKENS = 128
# engine.cpu_kvcache_space_gib where it is fitted: never below the old default, and with headroom
# over the need (vLLM keeps a few blocks aside; a drafter's lookahead slots).
MIN_CPU_KVCACHE_GIB = 4
KV_HEADROOM = 1.15
# The most of a GPU's memory vLLM can be given and still start (its own CUDA graphs and workspace).
MAX_GPU_MEMORY_UTILIZATION = 0.95
# The YaRN fields vLLM's rotary embedding reads (vllm/model_executor/layers/rotary_embedding).
YARN_FIELDS = {
    "rope_type",
    "factor",
    "original_max_position_embeddings",
    "beta_fast",
    "beta_slow",
    "mscale",
    "mscale_all_dim",
    "attention_factor",
    "truncate",
}
WINDOW_OVERRIDES = ("max_position_embeddings", "rope_parameters", "rope_scaling", "model_max_length")


def _rope_parameters(target: ModelFacts) -> dict[str, Any]:
    text = text_config(target.raw)
    rope = text.get("rope_parameters") or text.get("rope_scaling") or {}
    rope = dict(rope) if isinstance(rope, dict) else {}
    if "rope_theta" not in rope and "rope_theta" in text:
        rope["rope_theta"] = text["rope_theta"]
    return rope


def resolve_rope_scaling(cfg: RunConfig, target: ModelFacts) -> dict[str, Any] | None:
    """engine.rope_scaling checked and completed against the target (its rope_theta, and its own
    window as original_max_position_embeddings), in `cfg`; None where none is asked for."""
    asked = cfg.engine.rope_scaling
    if not asked:
        return None
    key = "engine.rope_scaling"
    if not isinstance(asked, dict):
        raise ConfigError(f"{key}={asked!r}: give a mapping, e.g. '+{key}={{rope_type:yarn,factor:4.0}}'.")
    asked = dict(asked)
    if str(asked.get("rope_type")) != "yarn":
        raise ConfigError(
            f"{key}.rope_type={asked.get('rope_type')!r}: speclens extends a window with yarn only "
            f"(e.g. '+{key}={{rope_type:yarn,factor:4.0}}'); other extensions go in engine.extra_args.hf_overrides."
        )
    unknown = sorted(set(asked) - YARN_FIELDS - {"rope_theta"})
    if unknown:
        raise ConfigError(f"{key}: {', '.join(unknown)} is not a YaRN field; use {', '.join(sorted(YARN_FIELDS))}.")
    factor = asked.get("factor")
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor) or factor <= 1:
        raise ConfigError(f"{key}.factor={factor!r}: give the window's multiple, a number above 1 (e.g. 4.0).")
    native = target.max_position_embeddings
    if not native:
        raise ConfigError(
            f"{key}: target.model's config.json has no max_position_embeddings, so there is no window to extend."
        )
    own = _rope_parameters(target)
    if own.get("rope_type", own.get("type", "default")) not in ("default", None):
        raise ConfigError(
            f"{key}: target.model already scales its rotary embedding (rope_type={own.get('rope_type')!r}, "
            f"window {native}); drop {key}, or describe the whole rope in engine.extra_args.hf_overrides."
        )
    if "hf_overrides" in cfg.engine.extra_args:
        raise ConfigError(
            f"{key} and engine.extra_args.hf_overrides both change the target's config; give one of them."
        )
    original = asked.get("original_max_position_embeddings", native)
    if original != native:
        raise ConfigError(
            f"{key}.original_max_position_embeddings={original}: the target's own window is {native}; "
            "leave it out (speclens fills it in)."
        )
    resolved = {"rope_type": "yarn", "rope_theta": own.get("rope_theta", 10000.0)} | asked
    resolved |= {"factor": float(factor), "original_max_position_embeddings": native}
    cfg.engine.rope_scaling = resolved
    return resolved


def context_window(cfg: RunConfig, target: ModelFacts) -> ContextWindow:
    """The window the target runs with, and the extension where one is named (call after
    resolve_rope_scaling; max_model_len is filled in once it is fitted)."""
    native = target.max_position_embeddings
    rope = cfg.engine.rope_scaling
    if rope:
        window = int(rope["original_max_position_embeddings"] * rope["factor"])
        extension = f"yarn x{rope['factor']:g} from {native}"
        return ContextWindow(native, window, cfg.engine.max_model_len or window, extension)
    overrides = cfg.engine.extra_args.get("hf_overrides")
    if isinstance(overrides, dict) and any(k in overrides for k in WINDOW_OVERRIDES):
        window = overrides.get("max_position_embeddings", native)
        if not isinstance(window, int) or isinstance(window, bool):
            window = native
        named = ", ".join(f"{k}" for k in WINDOW_OVERRIDES if k in overrides)
        extension = f"engine.extra_args.hf_overrides ({named})" + (f" from {native}" if window != native else "")
        return ContextWindow(native, window, cfg.engine.max_model_len or window or 0, extension)
    return ContextWindow(native, native, cfg.engine.max_model_len or native or 0)


def _suggest_factor(need: int, native: int) -> float:
    return float(2 ** math.ceil(math.log2(need / native)))


def check_declared_lengths(cfg: RunConfig, window: ContextWindow, lengths: list[int], max_model_len_set: bool) -> None:
    """Each length the prompt set declares, with its answer, against the window (and against
    engine.max_model_len where the user set it), before any prompt is built."""
    if not lengths:
        return
    max_tokens = cfg.sampling.max_tokens
    longest = max(lengths)
    need = longest + max_tokens
    key = _lengths_key(cfg, lengths)
    limit = window.window
    if limit is not None and need > limit:
        if window.extension is None and window.native:
            fix = (
                f"drop {longest}, or extend the window with '+engine.rope_scaling={{rope_type:yarn,factor:"
                f"{_suggest_factor(need, window.native):g}}}' (its figures are then marked extended)"
            )
        else:
            fix = f"drop {longest}, or extend the window further"
        where = f"window of {limit}" + (
            f" ({window.extension})" if window.extension else " (config.json's max_position_embeddings)"
        )
        raise ConfigError(
            f"{key}: a {longest}-token prompt and its sampling.max_tokens={max_tokens} need {need} tokens, above "
            f"target.model's {where}; {fix}."
        )
    if max_model_len_set and need > cfg.engine.max_model_len:
        raise ConfigError(
            f"{key}: a {longest}-token prompt and its sampling.max_tokens={max_tokens} need {need} tokens, above "
            f"engine.max_model_len={cfg.engine.max_model_len}; raise engine.max_model_len to at least {need}"
            + (f" (the window holds {limit})" if limit else "")
            + ", or leave it unset to fit it."
        )


def _lengths_shown(lengths: list[int]) -> str:
    return str(lengths[0]) if len(lengths) == 1 else "[" + ",".join(map(str, lengths)) + "]"


def _lengths_key(cfg: RunConfig, lengths: list[int]) -> str:
    """The key the lengths came from, as the user gave it (long_context's lengths, SPEED-Bench's splits)."""
    if hasattr(cfg.dataset, "input_tokens"):
        return f"dataset.input_tokens={_lengths_shown(lengths)}"
    splits = getattr(cfg.dataset, "config", None)
    if splits is not None:
        shown = ",".join(map(str, splits)) if isinstance(splits, (list, tuple)) else str(splits)
        return f"dataset.config={shown if not isinstance(splits, (list, tuple)) else '[' + shown + ']'}"
    return "dataset"


def fit_max_model_len(cfg: RunConfig, fitted: dict[str, dict[str, Any]], longest_need: int, window: int | None) -> None:
    """engine.max_model_len, where it was fitted, raised to the longest prompt with its answer (not
    past the window; a longer prompt is then refused by the prompt-length check with the numbers)."""
    entry = fitted.get("engine.max_model_len")
    if entry is None or longest_need <= cfg.engine.max_model_len:
        return
    value = min(longest_need, window) if window else longest_need
    if value <= cfg.engine.max_model_len:
        return
    cfg.engine.max_model_len = value
    entry |= {"value": value, "why": f"the longest prompt with its sampling.max_tokens answer ({longest_need} tokens)"}


def kv_bytes_per_token(cfg: RunConfig, target: ModelFacts, draft: ModelFacts | None) -> int | None:
    """The KV cache one token of context holds over every layer of the target (and of a draft
    model with its own cache); None where the config does not say enough."""
    if kv_cache.is_fp8(cfg):
        size = 1
    else:
        size = 4 if str(cfg.engine.dtype) in ("float32", "float") else 2
    try:
        shape = shape_of(target.raw)
        total = shape.layers * shape.kv_bytes_per_layer_token(size)
        if draft is not None:
            try:
                own = shape_of(draft.raw, "the draft")
                total += own.layers * own.kv_bytes_per_layer_token(size)
            except ConfigError:  # a head whose config names no shape: one layer of the target's
                total += shape.kv_bytes_per_layer_token(size)
    except (ConfigError, TypeError, KeyError):
        return None
    return total


def kv_tokens_needed(needs: list[int], batch_size: int, max_model_len: int, lookahead: int) -> int:
    """Tokens of KV cache the engine must hold: the `batch_size` longest requests at once (prompt,
    answer and the drafter's lookahead, each to whole blocks), and at least one max_model_len request
    (vLLM refuses to start with less)."""
    blocks = lambda n: math.ceil(n / KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS  # noqa: E731
    longest = sorted(needs, reverse=True)[:batch_size]
    return max(sum(blocks(n + lookahead) for n in longest), blocks(max_model_len))


def _gib(n_bytes: float) -> str:
    return f"{n_bytes / GIB:.2f} GiB"


def check_cpu_kv_cache(
    cfg: RunConfig,
    fitted: dict[str, dict[str, Any]],
    need_bytes: int,
    what: str,
    available_bytes: int | None,
) -> None:
    """engine.cpu_kvcache_space_gib against the need: fitted where unset (never past the memory
    this machine has free), refused in one line where set too small."""
    gib = cfg.engine.cpu_kvcache_space_gib
    if gib is not None:
        if gib * GIB < need_bytes:
            source = " (VLLM_CPU_KVCACHE_SPACE)" if "engine.cpu_kvcache_space_gib" in fitted else ""
            raise ConfigError(
                f"engine.cpu_kvcache_space_gib={gib}{source} holds {_gib(gib * GIB)} of KV cache; {what} need "
                f"{_gib(need_bytes)}: set engine.cpu_kvcache_space_gib={math.ceil(need_bytes * KV_HEADROOM / GIB)}, "
                "or leave it unset to fit it."
            )
        return
    value = max(MIN_CPU_KVCACHE_GIB, math.ceil(need_bytes * KV_HEADROOM / GIB))
    if available_bytes is not None and value * GIB > available_bytes and value > MIN_CPU_KVCACHE_GIB:
        raise ConfigError(
            f"{what} need {_gib(need_bytes)} of KV cache (engine.cpu_kvcache_space_gib={value}), and this machine "
            f"has {_gib(available_bytes)} of memory free; lower batch_sizes, the longest length or "
            "sampling.max_tokens."
        )
    cfg.engine.cpu_kvcache_space_gib = value
    fitted["engine.cpu_kvcache_space_gib"] = {
        "value": value,
        "default": MIN_CPU_KVCACHE_GIB,
        "why": f"{what} need {_gib(need_bytes)} of KV cache" if value > MIN_CPU_KVCACHE_GIB else "the default",
    }


def check_gpu_kv_cache(cfg: RunConfig, need_bytes: int, what: str, gpu_bytes: int, weight_bytes: int) -> None:
    """The KV cache per GPU against what engine.gpu_memory_utilization leaves after the weights
    (tensor parallelism splits both): refused in one line, naming the utilization that would hold it."""
    shards = cfg.engine.tensor_parallel_size * cfg.engine.pipeline_parallel_size
    need, weights = need_bytes / shards, weight_bytes / shards
    utilization = cfg.engine.gpu_memory_utilization
    left = gpu_bytes * utilization - weights
    if need <= left:
        return
    wanted = (need + weights) / gpu_bytes + 0.01
    fix = (
        f"raise engine.gpu_memory_utilization to {math.ceil(wanted * 100) / 100:.2f}"
        if wanted <= MAX_GPU_MEMORY_UTILIZATION
        else "lower batch_sizes, the longest length or sampling.max_tokens, or shard the model "
        "(engine.tensor_parallel_size)"
    )
    raise ConfigError(
        f"engine.gpu_memory_utilization={utilization} of this GPU's {_gib(gpu_bytes)} leaves {_gib(max(left, 0))} "
        f"for the KV cache after {_gib(weights)} of weights; {what} need {_gib(need)} per GPU: {fix}."
    )


def memory_available() -> int | None:
    """This machine's free memory (MemAvailable), or None where /proc/meminfo is not there."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def gpu_memory() -> int | None:
    """The first GPU's memory in bytes (nvidia-smi), or None where there is none."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
        return int(out.split()[0]) * 1024**2
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def weight_bytes(*folders: Path | None) -> int:
    """The checkpoints' weights on disk (what the GPU holds at their stored precision)."""
    total = 0
    for folder in folders:
        if folder is None:
            continue
        for pattern in ("*.safetensors", "*.bin", "*.pt"):
            total += sum(p.stat().st_size for p in folder.glob(pattern) if p.is_file())
    return total


def requests_shown(batch_size: int, longest_need: int) -> str:
    return f"{batch_size} request{'s' if batch_size > 1 else ''} of up to {longest_need} tokens at once"


# The environment's VLLM_CPU_KVCACHE_SPACE as this process started: every engine start sets it to
# the run's value, which must not become the next run's (a Hydra multirun's jobs share a process).
_ENV_KV_SPACE = os.environ.get("VLLM_CPU_KVCACHE_SPACE")


def env_kv_space() -> int | None:
    """VLLM_CPU_KVCACHE_SPACE from the user's environment, as engine.cpu_kvcache_space_gib takes it."""
    value = _ENV_KV_SPACE
    try:
        return int(value) if value else None
    except ValueError:
        return None


def check_kv_cache(
    cfg: RunConfig,
    fitted: dict[str, dict[str, Any]],
    device: str | None,
    per_token: int | None,
    needs: list[int],
    batch_size: int,
    lookahead: int,
    folders: tuple[Path | None, ...],
) -> None:
    """The KV cache the run needs against the engine's, on `device` ("cpu": vLLM's CPU build here;
    "gpu"; None: no engine of this machine's, e.g. the fake engine or an attached server);
    `lookahead`: the slots a drafter reserves per request beyond its tokens (d + 1; 0 without one).
    engine.cpu_kvcache_space_gib, where unset, is the environment's VLLM_CPU_KVCACHE_SPACE (then
    checked as if set), else fitted."""
    if cfg.engine.cpu_kvcache_space_gib is None and env_kv_space() is not None:
        cfg.engine.cpu_kvcache_space_gib = env_kv_space()
        fitted["engine.cpu_kvcache_space_gib"] = {
            "value": cfg.engine.cpu_kvcache_space_gib,
            "default": MIN_CPU_KVCACHE_GIB,
            "why": "VLLM_CPU_KVCACHE_SPACE in the environment",
        }
    measurable = per_token is not None and bool(needs)
    if device == "cpu" and measurable:
        tokens = kv_tokens_needed(needs, batch_size, cfg.engine.max_model_len, lookahead)
        what = requests_shown(min(batch_size, len(needs)), max(needs))
        check_cpu_kv_cache(cfg, fitted, tokens * per_token, what, memory_available())
        return
    if cfg.engine.cpu_kvcache_space_gib is None:
        cfg.engine.cpu_kvcache_space_gib = MIN_CPU_KVCACHE_GIB
        fitted["engine.cpu_kvcache_space_gib"] = {
            "value": MIN_CPU_KVCACHE_GIB,
            "default": MIN_CPU_KVCACHE_GIB,
            "why": "the default",
        }
    gpu = gpu_memory() if device == "gpu" and measurable else None
    if gpu is not None:
        tokens = kv_tokens_needed(needs, batch_size, cfg.engine.max_model_len, lookahead)
        what = requests_shown(min(batch_size, len(needs)), max(needs))
        check_gpu_kv_cache(cfg, tokens * per_token, what, gpu, weight_bytes(*folders))
