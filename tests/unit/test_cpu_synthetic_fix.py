"""Synthetic rejection sampling on the CPU build (runners/cpu_synthetic_fix.py): the Triton
kernels' semantics, pass-through outside synthetic mode, and its gating."""

import pytest

torch = pytest.importorskip("torch", reason="the CPU extra (torch) is not installed")

from runners import cpu_synthetic_fix  # noqa: E402
from runners.cpu_plugins import is_cpu_build_without_triton  # noqa: E402

# three requests: 3 drafts, 2 drafts, 3 drafts (the last with a padded -1 at its second position)
CU = torch.tensor([3, 5, 8], dtype=torch.int32)
DRAFTS = torch.tensor([11, 12, 13, 21, 22, 31, -1, 33], dtype=torch.int32)
TARGET = torch.tensor([91, 92, 93, 94, 95, 96, 97, 98], dtype=torch.int64)
BONUS = torch.tensor([[101], [102], [103]], dtype=torch.int64)
RATES = torch.tensor([0.9, 0.5, 0.25], dtype=torch.float32)  # conditional, per position


def greedy(uniform, is_greedy=None, original=None):
    out = torch.full((3, 4), -1, dtype=torch.int32)
    kernel = cpu_synthetic_fix.greedy_kernel(original or (lambda *a: pytest.fail("called vLLM's kernel")))
    kernel(out, CU, DRAFTS, TARGET, BONUS, is_greedy, 3, uniform, RATES, True)
    return out.tolist()


def test_a_position_is_accepted_below_its_rate_and_emits_the_draft_token_whatever_the_target_says():
    # request 0: 0.1 < 0.9, 0.4 < 0.5, 0.2 < 0.25: all accepted, the bonus follows
    # request 1: 0.95 >= 0.9 rejected at once: the target's argmax, the row ends
    # request 2: 0.0 < 0.9 accepted, then the padded -1 is rejected whatever its sample
    uniform = torch.tensor([0.1, 0.4, 0.2, 0.95, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    assert greedy(uniform) == [[11, 12, 13, 101], [94, -1, -1, -1], [31, 97, -1, -1]]


def test_the_uniform_sample_is_compared_strictly_with_the_float32_rate():
    at_rate = torch.tensor([float(RATES[0])] * 8, dtype=torch.float64)  # u == rate: rejected (u < rate)
    assert [row[0] for row in greedy(at_rate)] == [91, 94, 96]


def test_the_greedy_kernel_leaves_sampling_requests_and_the_random_one_greedy_requests():
    uniform = torch.zeros(8, dtype=torch.float64)
    flags = torch.tensor([True, False, True])
    assert greedy(uniform, flags)[1] == [-1, -1, -1, -1]
    out = torch.full((3, 4), -1, dtype=torch.int32)
    recovered = torch.tensor([81, 82, 83, 84, 85, 86, 87, 88], dtype=torch.int32)
    kernel = cpu_synthetic_fix.random_kernel(lambda *a: pytest.fail("called vLLM's kernel"))
    uniform = torch.tensor([0, 0, 0, 0.1, 0.7, 0, 0, 0], dtype=torch.float64)
    kernel(out, CU, DRAFTS, None, None, BONUS, recovered, uniform, flags, 3, 10, RATES, True, True)
    # only request 1 samples: 0.1 < 0.9 accepted, 0.7 >= 0.5 rejected with its recovered token
    assert out.tolist() == [[-1] * 4, [21, 85, -1, -1], [-1] * 4]


def test_outside_synthetic_mode_vllms_own_kernel_runs_with_every_argument():
    calls = []
    kernel = cpu_synthetic_fix.greedy_kernel(lambda *args: calls.append(args))
    out = torch.full((3, 4), -1, dtype=torch.int32)
    kernel(out, CU, DRAFTS, TARGET, BONUS, None, 3)
    kernel(out, CU, DRAFTS, TARGET, BONUS, None, 3, None, None, False)
    assert len(calls) == 2 and calls[0][0] is out and calls[0][6:] == (3,) and calls[1][6:] == (3, None, None, False)
    assert out.tolist() == [[-1] * 4] * 3


def test_the_probe_tells_a_refusing_kernel_from_one_that_runs():
    def refusing(*args):
        assert not args[-1], "Synthetic acceptance not supported with CPU sampling"

    assert cpu_synthetic_fix.refuses_synthetic(refusing)
    assert not cpu_synthetic_fix.refuses_synthetic(cpu_synthetic_fix.greedy_kernel(refusing))


def test_the_installed_cpu_build_refuses_synthetic_mode_and_the_plugin_is_registered():
    pytest.importorskip("vllm", reason="vLLM is not installed")
    if not is_cpu_build_without_triton():  # CUDA builds run the Triton kernels, which have synthetic mode
        pytest.skip("this vLLM is not the 0.32 CPU build the plugin acts on")
    assert cpu_synthetic_fix.build_is_affected()
    assert cpu_synthetic_fix.fix_is_active()


def test_disabling_env_turns_the_fix_off(monkeypatch):
    monkeypatch.setenv(cpu_synthetic_fix.DISABLE_ENV, "0")
    assert not cpu_synthetic_fix.fix_is_active()
