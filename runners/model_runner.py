"""Which of vLLM's two model runners computes a run (`engine.model_runner`), and which ran.

vLLM 0.32 on CUDA runs Model Runner V2 wherever Triton is present, falling back to V1 for the
speculative methods V2 lacks (vllm/config/vllm.py `_get_v2_model_runner_unsupported_features`);
the CPU build has no Triton, so always V1. A run's passes (speculative, plain, zero-cost verify)
all run on one runner, set per engine through vLLM's own switch (VLLM_USE_V2_MODEL_RUNNER), so
their step times and acceptance compare one engine with itself. n-gram drafts differently on each
(drafters/ngram.py)."""

from __future__ import annotations

from typing import Any

from speclens.errors import ConfigError

MODEL_RUNNERS = ("auto", "v1", "v2")
# Speculative methods Model Runner V2 does not run (vLLM 0.32).
V1_ONLY_METHODS = frozenset({"suffix", "medusa", "mlp_speculator", "custom_class"})


def check_requested(requested: str, method: str | None) -> None:
    """Refuse an unknown `engine.model_runner`, or v2 for a method only V1 runs (no engine needed)."""
    if requested not in MODEL_RUNNERS:
        raise ConfigError(f"engine.model_runner={requested}: choose one of {', '.join(MODEL_RUNNERS)}.")
    if requested == "v2" and method in V1_ONLY_METHODS:
        raise ConfigError(
            f"engine.model_runner=v2: vLLM's Model Runner V2 has no speculative method {method!r} (it runs "
            "on V1 only); use engine.model_runner=v1 or auto, or another drafter."
        )


NO_V2_HERE = (
    "engine.model_runner=v2: vLLM's Model Runner V2 needs Triton with a driver for this device, "
    "and this vLLM has none (the CPU build always runs V1); use engine.model_runner=auto or v1."
)


def check_v2_runs_here(requested: str) -> None:
    """Refuse engine.model_runner=v2 in pre-flight, before a run dir is claimed, where this vLLM
    cannot run it (the CPU build is asked first: its Triton probe prints warnings)."""
    if requested != "v2":
        return
    from vllm.platforms import current_platform

    if current_platform.is_cpu() or not triton_available():
        raise ConfigError(NO_V2_HERE)


def choose(requested: str, method: str | None, has_triton: bool) -> str:
    """ "v1" or "v2" for a run whose speculative pass uses `method` (None: plain decoding only)."""
    check_requested(requested, method)
    if requested == "v2" and not has_triton:
        raise ConfigError(NO_V2_HERE)
    if requested != "auto":
        return requested
    return "v2" if has_triton and method not in V1_ONLY_METHODS else "v1"


def triton_available() -> bool:
    """vLLM's own answer (vllm.triton_utils.HAS_TRITON): Triton installed with one active driver."""
    from vllm.triton_utils import HAS_TRITON

    return bool(HAS_TRITON)


def runner_in_use(model_runner: Any) -> str | None:
    """Which runner a started worker's model runner object is (V2's lives in vllm/v1/worker/gpu/);
    None where there is none to see."""
    if model_runner is None:
        return None
    return "v2" if type(model_runner).__module__.startswith("vllm.v1.worker.gpu.") else "v1"


def check_shared(chosen: str, method: str | None) -> None:
    """Refuse, before its engine starts, a pass that cannot run on the run's runner."""
    if chosen == "v2" and method in V1_ONLY_METHODS:
        raise ConfigError(
            f"this run's passes run on vLLM's Model Runner V2, which has no speculative method {method!r}; "
            "set engine.model_runner=v1 to run every pass on V1."
        )
