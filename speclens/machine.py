"""The CPU a run's numbers were computed on, as far as it moves them.

Float kernels are chosen by instruction set: the same float32 (or bf16) model gives other
roundings on an AVX2 machine than on an AVX-512 one, and bf16 matrix products run natively only
with AVX512_BF16 or AMX (elsewhere several times slower, in a fallback). So equality between two
machines is claimed only between machines of the same `cpu_label()`.
"""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path

__all__ = ["cpu_label", "fp8_kv_cache_isa", "memory_total", "native_bf16"]

# The instruction sets that pick the float kernels, most capable first.
ISA_FLAGS = ("amx_bf16", "avx512_bf16", "avx512f", "avx2")


@functools.lru_cache(maxsize=1)
def cpu_label() -> str:
    """`<model name> (<its float instruction sets>)`, e.g. `AMD EPYC (avx2)`."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                model = value.strip()
            elif key.strip() in ("flags", "Features"):
                flags = set(value.split())
            if flags and model:
                break
    except OSError:
        pass
    isa = [flag for flag in ISA_FLAGS if flag in flags]
    return f"{model} ({', '.join(isa) or platform.machine()})"


def native_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices natively (AVX512_BF16 or AMX)."""
    return any(isa in cpu_label() for isa in ("amx_bf16", "avx512_bf16"))


def fp8_kv_cache_isa() -> bool:
    """Whether vLLM's CPU build can keep an FP8 KV cache here: x86 with AVX-512 or AMX
    (vllm/v1/attention/backends/cpu_attn.py _get_attn_isa)."""
    return any(isa in cpu_label() for isa in ("amx_bf16", "avx512f"))


def memory_total() -> int | None:
    """This machine's total memory in bytes (/proc/meminfo MemTotal, else the physical pages the
    OS reports), or None where neither says."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None
