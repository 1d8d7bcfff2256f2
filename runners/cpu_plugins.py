"""What speclens's vLLM plugins for the CPU build (runners/cpu_expand_fix.py,
runners/cpu_synthetic_fix.py) share: which builds they act on and whether vLLM will load them."""

from __future__ import annotations

import os
from importlib.metadata import entry_points

AFFECTED_VLLM_PREFIX = "0.32."


def is_cpu_build_without_triton() -> bool:
    """This process's vLLM is a 0.32 CPU build running the C++ stand-ins of its Triton kernels."""
    # vllm is loaded only where an engine or its code is needed: light commands never pay for it.
    import vllm
    from vllm.platforms import current_platform
    from vllm.triton_utils import HAS_TRITON

    return vllm.__version__.startswith(AFFECTED_VLLM_PREFIX) and current_platform.is_cpu() and not HAS_TRITON


def disabled(env: str) -> bool:
    """The user turned the plugin off (`env`=0)."""
    return os.environ.get(env, "1") == "0"


def will_load(module: str, env: str) -> bool:
    """vLLM will load `module`'s register() in its processes (entry point installed, not disabled)."""
    if disabled(env):
        return False
    return any(ep.value == f"{module}:register" for ep in entry_points(group="vllm.general_plugins"))
