"""Work-arounds for vLLM behaviour that breaks running several engines in one process.

vLLM's CPU platform re-registers its Triton-kernel fallbacks at every worker
start, and the registration rescans every module in `sys.modules`, calling
`vars(value).get` on each attribute that has a `__dict__`. Once numba is
imported (vLLM's n-gram proposer does), llvmlite's slotted library wrapper
answers `__dict__` through `__getattr__` with a function object, and the scan
crashes (`'_lib_fn_wrapper' object has no attribute 'get'`). speclens starts a
second engine in the same process for `baseline=true` and in its tests, so
such modules are hidden from `sys.modules` while the scan runs; they hold no
Triton kernels, so nothing that should be rebound is missed.
"""

from __future__ import annotations

import functools
import sys
from types import ModuleType


def _breaks_kernel_scan(module: ModuleType) -> bool:
    namespace = getattr(module, "__dict__", None)
    if not namespace:
        return False
    for value in list(namespace.values()):
        try:
            if hasattr(value, "__dict__") and not hasattr(vars(value), "get"):
                return True
        except TypeError:
            continue
    return False


def make_kernel_registration_safe() -> None:
    """Wrap the platform's kernel-override registration (idempotent)."""
    # vllm is loaded only where an engine or its code is needed: light commands never pay for it.
    from vllm.platforms import current_platform

    platform_cls = type(current_platform)
    original = platform_cls.register_triton_kernel_overrides  # bound to the class
    if getattr(original, "_speclens_safe", False):
        return

    @functools.wraps(original)
    def register(cls):
        hidden = {name: m for name, m in list(sys.modules.items()) if _breaks_kernel_scan(m)}
        for name in hidden:
            del sys.modules[name]
        try:
            return original()
        finally:
            sys.modules.update(hidden)

    register._speclens_safe = True
    platform_cls.register_triton_kernel_overrides = classmethod(register)
