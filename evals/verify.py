"""verify.method, checked before any engine starts. Block verification (vLLM's
rejection_sample_method="block") lives only in Model Runner V2's rejection sampler
(vllm/v1/worker/gpu/spec_decode/rejection_sampler.py); V1's sampler ignores the method and verifies
token by token, so a run on V1 would measure standard verification under block's name: refused."""

from __future__ import annotations

from drafters import Drafter
from speclens.config import RunConfig
from speclens.errors import ConfigError

VERIFY_METHODS = ("standard", "block")
BLOCK_SAMPLER = "vllm/v1/worker/gpu/spec_decode/rejection_sampler.py"


def check_verify(cfg: RunConfig, drafter: Drafter, synthetic: object | None, runner: str) -> None:
    """`runner`: the runner's name (the fake engine verifies as it is scripted)."""
    method = cfg.verify.method
    if method not in VERIFY_METHODS:
        raise ConfigError(f"verify.method={method}: choose one of {', '.join(VERIFY_METHODS)}.")
    if method == "standard":
        return
    if not drafter.speculative:
        raise ConfigError(f"verify.method={method} verifies drafts, and drafter={drafter.name} drafts none.")
    if synthetic is not None:
        raise ConfigError(
            f"verify.method={method} with acceptance.synthetic: synthetic acceptance is its own rejection method "
            "(vLLM's rejection_sample_method=synthetic); give one of them."
        )
    if runner == "fake" or getattr(cfg.runner, "url", None) is not None:
        return  # the fake engine verifies as scripted; an attached server: check_support in runners/server_runner.py
    import vllm

    from runners.model_runner import choose, triton_available
    from runners.vllm_runner import on_cpu

    spec_method = drafter.speculative_config(cfg.d)["method"]
    has_triton = not on_cpu() and triton_available()  # the CPU build's Triton probe prints a warning
    if choose(cfg.engine.model_runner, spec_method, has_triton) == "v2":
        return
    if cfg.engine.model_runner == "v1":
        why = "engine.model_runner=v1 asks for V1"
    elif not has_triton:
        why = "this build has no Triton, so every pass runs on V1 (the CPU build always does)"
    else:
        why = f"the drafter's method {spec_method!r} runs on V1 only"
    raise ConfigError(
        f"verify.method={method}: vLLM {vllm.__version__} verifies blocks only in Model Runner V2's rejection sampler "
        f"({BLOCK_SAMPLER}), and {why}; V1 would verify token by token under block's name. Run it where V2 runs "
        "(a GPU build with Triton, engine.model_runner=auto or v2), or use verify.method=standard."
    )
