"""verify.method and verify.draft_sampling, checked before any engine starts.

Block verification (vLLM's rejection_sample_method="block") lives only in Model Runner V2's
rejection sampler (vllm/v1/worker/gpu/spec_decode/rejection_sampler.py); V1's sampler ignores the
method and verifies token by token, so a run on V1 would measure standard verification under
block's name: refused.

verify.draft_sampling is vLLM's draft_sample_method, which model drafters (the EAGLE family, draft
models: vllm/v1/spec_decode/llm_base_proposer.py) honour. It is the documented spelling of the
older drafter.sample_method and is folded into it when composed, so both spellings give one run
(one fingerprint, one run dir)."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from drafters import REGISTRY, Drafter
from speclens.config import RunConfig
from speclens.errors import ConfigError

VERIFY_METHODS = ("standard", "block")
DRAFT_SAMPLING = ("greedy", "probabilistic")


def fold_draft_sampling(cfg: DictConfig) -> None:
    """Move a composed config's verify.draft_sampling into drafter.sample_method (in place)."""
    verify = cfg.get("verify")
    value = verify.get("draft_sampling") if verify is not None else None
    if value is None:
        return
    if value not in DRAFT_SAMPLING:
        raise ConfigError(f"verify.draft_sampling={value}: choose one of {', '.join(DRAFT_SAMPLING)}.")
    drafter = cfg.drafter
    if "sample_method" not in drafter:
        if value == "probabilistic":
            kind = next(n for n, cls in REGISTRY.items() if cls.config_class is OmegaConf.get_type(drafter))
            raise ConfigError(
                f"verify.draft_sampling=probabilistic: drafter={kind} proposes tokens without a distribution to "
                "sample from; draft sampling applies to model drafters (draft_model, eagle, eagle3, mtp, dflash)."
            )
        verify.draft_sampling = None  # greedy is what a drafter without probabilities does
        return
    current = str(drafter.sample_method)
    if current not in ("greedy", value):
        raise ConfigError(
            f"verify.draft_sampling={value} and drafter.sample_method={current} disagree; give one "
            "(drafter.sample_method is the older spelling of verify.draft_sampling)."
        )
    drafter.sample_method = value
    verify.draft_sampling = None


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
