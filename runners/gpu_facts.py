"""What a GPU run's numbers were computed on, as far as it moves them: the device and its count,
the driver, CUDA and torch versions, the attention backend vLLM chose and whether CUDA graphs ran
(greedy bf16 outputs move with kernels and batch shapes, as they move with threads on a CPU)."""

from __future__ import annotations

from typing import Any


def gpu_facts(vllm_config: Any, model_runner: Any) -> dict[str, Any] | None:
    """None where torch sees no CUDA device (the CPU build)."""
    import torch

    if not torch.cuda.is_available():
        return None
    compilation = getattr(vllm_config, "compilation_config", None)
    cudagraph_mode = getattr(compilation, "cudagraph_mode", None)
    return {
        "name": torch.cuda.get_device_name(0),
        "count": torch.cuda.device_count(),
        "driver": driver_version(),
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "attention_backend": attention_backends(model_runner),
        "cuda_graphs": getattr(cudagraph_mode, "name", None) if cudagraph_mode is not None else None,
    }


def attention_backends(model_runner: Any) -> str | None:
    """The attention backend(s) the model runner's layers run, by vLLM's names ("FLASH_ATTN")."""
    names = set()
    for groups in getattr(model_runner, "attn_groups", None) or []:
        for group in groups:
            backend = getattr(group, "backend", None)
            if backend is not None and hasattr(backend, "get_name"):
                names.add(backend.get_name())
    return ", ".join(sorted(names)) or None


def driver_version() -> str | None:
    """The NVIDIA driver's version, through the NVML binding vLLM ships (None where it cannot tell)."""
    try:
        from vllm.third_party import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML (another vendor, a container without it): unknown
        return None
    return version.decode() if isinstance(version, bytes) else str(version)
