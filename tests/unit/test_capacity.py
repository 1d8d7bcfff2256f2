"""What long prompts ask of the engine, settled before it starts (evals/pipeline/capacity.py): the window and
a named extension, max_model_len fitted to the longest prompt, the KV cache B requests need."""

from __future__ import annotations

import pytest

from evals.pipeline import capacity
from evals.pipeline.compose import to_run_config
from evals.pipeline.plan import make_plan
from evals.pipeline.run_job import run
from runners.vllm_runner import engine_args
from speclens.errors import ConfigError
from speclens.model_facts import ModelFacts
from tests.unit.conftest import compose_run
from tests.unit.test_errors import one_line_error, run_cli
from tests.unit.test_long_context import smollm2  # noqa: F401 (the embedded target, shared)

GIB = 1024**3


@pytest.fixture
def no_engine(monkeypatch):
    def never_called(*args, **kwargs):
        raise AssertionError("an engine was started")

    monkeypatch.setattr("runners.vllm_engine.VllmEngine.__init__", never_called)


def long_context(smollm2, *overrides: str):  # noqa: F811
    return compose_run(
        "target=custom", f"target.model={smollm2}", "dataset=long_context", "engine.dtype=float32", *overrides
    )


def test_a_length_past_the_window_is_refused_before_any_prompt_is_built_naming_the_extension(tmp_path, smollm2):  # noqa: F811
    out = tmp_path / "run"
    line = one_line_error(
        run_cli(
            "evals.run",
            "target=custom",
            f"target.model={smollm2}",
            "dataset=long_context",
            "dataset.input_tokens=[1000,32000]",
            f"hydra.run.dir={out}",
        )
    )
    assert (
        "dataset.input_tokens=[1000,32000]: a 32000-token prompt and its sampling.max_tokens=128 need 32128 tokens, "
        "above target.model's window of 8192 (config.json's max_position_embeddings); drop 32000, or extend the "
        "window with '+engine.rope_scaling={rope_type:yarn,factor:4}'" in line
    )
    assert not out.exists()


def test_a_set_longer_than_max_model_len_is_refused_with_the_numbers(tmp_path, smollm2, no_engine):  # noqa: F811
    cfg = long_context(
        smollm2,
        "dataset.input_tokens=5000",
        "dataset.num_requests=1",
        "engine.max_model_len=4096",
        "sampling.max_tokens=100",
    )
    with pytest.raises(
        ConfigError,
        match=r"dataset.input_tokens=5000: a 5000-token prompt and its sampling.max_tokens=100 need 5100 tokens, "
        r"above engine.max_model_len=4096; raise engine.max_model_len to at least 5100 \(the window holds 8192\)",
    ):
        run(cfg, tmp_path / "run", progress=lambda label: None)
    assert not (tmp_path / "run").exists()


def test_max_model_len_left_unset_is_raised_to_the_longest_prompt_with_its_answer(smollm2):  # noqa: F811
    asked = to_run_config(
        long_context(smollm2, "dataset.input_tokens=[300,5000]", "dataset.num_requests=1", "runner=fake")
    )
    plan = make_plan(asked)
    assert plan.config.engine.max_model_len == 5000 + 128
    # the plan's config carries the fitted values; the config asked is left as it was
    assert asked.engine.max_model_len is None and plan.config is not asked
    assert plan.fitted["engine.max_model_len"]["why"] == (
        "the longest prompt with its sampling.max_tokens answer (5128 tokens)"
    )
    assert plan.context_window.window == 8192 and not plan.context_window.extended
    assert sorted({p.input_tokens for p in plan.prompts}) == [300, 5000]


def test_a_yarn_extension_is_completed_from_the_target_and_passed_to_vllm_as_hf_overrides(smollm2):  # noqa: F811
    plan = make_plan(
        to_run_config(
            compose_run(
                "target=custom",
                f"target.model={smollm2}",
                "runner=fake",
                "+engine.rope_scaling={rope_type:yarn,factor:4}",
            )
        )
    )
    window = plan.context_window
    assert (window.native, window.window, window.extension) == (8192, 32768, "yarn x4 from 8192")
    assert window.label() == "window 32768 (extended: yarn x4 from 8192)"
    overrides = engine_args(plan.config.engine, 0)["hf_overrides"]
    assert overrides == {
        "rope_parameters": {
            "rope_type": "yarn",
            "rope_theta": 100000,
            "factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        "max_position_embeddings": 32768,
        "model_max_length": 32768,
    }


def facts(**text) -> ModelFacts:
    return ModelFacts.from_config("t", {"max_position_embeddings": 2048, **text})


@pytest.mark.parametrize(
    "asked, target, message",
    [
        ({"rope_type": "linear", "factor": 2.0}, {}, "rope_type='linear': speclens extends a window with yarn only"),
        ({"rope_type": "yarn", "factor": 1.0}, {}, "factor=1.0: give the window's multiple, a number above 1"),
        ({"rope_type": "yarn", "factor": "big"}, {}, "factor='big': give the window's multiple"),
        ({"rope_type": "yarn", "factor": 2.0, "alpha": 1}, {}, "alpha is not a YaRN field"),
        (
            {"rope_type": "yarn", "factor": 2.0},
            {"rope_parameters": {"rope_type": "llama3", "factor": 8.0}},
            "already scales its rotary embedding (rope_type='llama3', window 2048)",
        ),
        (
            {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 4096},
            {},
            "original_max_position_embeddings=4096: the target's own window is 2048",
        ),
    ],
)
def test_a_bad_extension_is_named(asked, target, message):
    cfg = to_run_config(compose_run("runner=fake"))
    cfg.engine.rope_scaling = asked
    with pytest.raises(
        ConfigError, match="engine.rope_scaling" + ".*" + message.replace("(", r"\(").replace(")", r"\)")
    ):
        capacity.resolve_rope_scaling(cfg, facts(**target))


def test_an_extension_and_own_hf_overrides_are_not_mixed_and_own_overrides_are_labelled():
    cfg = to_run_config(compose_run("runner=fake"))
    cfg.engine.rope_scaling = {"rope_type": "yarn", "factor": 2.0}
    cfg.engine.extra_args = {"hf_overrides": {"max_position_embeddings": 8192}}
    with pytest.raises(ConfigError, match="engine.rope_scaling and engine.extra_args.hf_overrides both change"):
        capacity.resolve_rope_scaling(cfg, facts())
    cfg.engine.rope_scaling = {}
    window = capacity.context_window(cfg, facts())
    assert (window.window, window.extension) == (
        8192,
        "engine.extra_args.hf_overrides (max_position_embeddings) from 2048",
    )


def test_the_kv_need_is_the_b_longest_requests_in_whole_blocks_and_one_full_window_at_least():
    # 128-token blocks: 1000+4 -> 1024, 5000+4 -> 5120, 300+4 -> 384
    assert capacity.kv_tokens_needed([1000, 5000, 300], 2, 2048, 4) == 5120 + 1024
    assert capacity.kv_tokens_needed([1000, 5000, 300], 3, 2048, 0) == 1024 + 5120 + 384
    assert capacity.kv_tokens_needed([100], 1, 8192, 0) == 8192


def test_kv_bytes_per_token_count_every_layer_at_the_engine_dtype_and_fp8_kv(smollm2):  # noqa: F811
    cfg = to_run_config(long_context(smollm2))
    plan_target = ModelFacts.from_config(
        "t",
        {
            "hidden_size": 576,
            "num_hidden_layers": 30,
            "num_attention_heads": 9,
            "num_key_value_heads": 3,
            "vocab_size": 49152,
        },
    )
    # SmolLM2-135M: 30 layers x (K and V) x 3 KV heads x 64 dims
    assert capacity.kv_bytes_per_token(cfg, plan_target, None) == 30 * 2 * 3 * 64 * 4
    cfg.engine.kv_cache_dtype = "fp8_e4m3"
    assert capacity.kv_bytes_per_token(cfg, plan_target, None) == 30 * 2 * 3 * 64 * 1


def test_a_kv_cache_set_too_small_is_refused_naming_both_numbers_and_the_key(tmp_path, smollm2, no_engine, monkeypatch):  # noqa: F811
    """On vLLM's CPU build, named as the device whichever vLLM this venv holds (make gpu-check runs
    the unit suite under the CUDA build, which keeps the KV cache on a GPU)."""
    from evals.pipeline import plan

    monkeypatch.setattr(plan, "engine_device", lambda runner, cfg: "cpu")
    cfg = long_context(
        smollm2,
        "dataset.input_tokens=7000",
        "dataset.num_requests=4",
        "batch_sizes=[4]",
        "engine.cpu_kvcache_space_gib=1",
        "sampling.max_tokens=128",
        "d=3",
    )
    per_token = 30 * 2 * 3 * 64 * 4
    need = 4 * 7168 * per_token  # 7000 + 128 + lookahead 4 = 7132 tokens, in 128-token blocks
    with pytest.raises(ConfigError) as refused:
        run(cfg, tmp_path / "run", progress=lambda label: None)
    assert str(refused.value) == (
        f"engine.cpu_kvcache_space_gib=1 holds 1.00 GiB of KV cache; 4 requests of up to 7128 tokens at once need "
        f"{need / GIB:.2f} GiB: set engine.cpu_kvcache_space_gib={-(-need * 1.15 // GIB):.0f}, or leave it unset to fit it."
    )
    assert not (tmp_path / "run").exists()


def test_a_kv_cache_left_unset_is_fitted_with_headroom_unless_the_machine_lacks_it():
    cfg = to_run_config(compose_run("runner=fake"))
    fitted: dict = {}
    capacity.check_cpu_kv_cache(cfg, fitted, 10 * GIB, "4 requests", available_bytes=64 * GIB)
    assert cfg.engine.cpu_kvcache_space_gib == 12  # ceil(10 x 1.15)
    assert fitted["engine.cpu_kvcache_space_gib"]["why"] == "4 requests need 10.00 GiB of KV cache"
    cfg.engine.cpu_kvcache_space_gib = None
    capacity.check_cpu_kv_cache(cfg, {}, 1 * GIB, "1 request", available_bytes=64 * GIB)
    assert cfg.engine.cpu_kvcache_space_gib == 4  # never below the old default
    cfg.engine.cpu_kvcache_space_gib = None
    with pytest.raises(
        ConfigError,
        match=r"4 requests need 30.00 GiB of KV cache \(engine.cpu_kvcache_space_gib=35\), and "
        r"this machine has 16.00 GiB of memory free",
    ):
        capacity.check_cpu_kv_cache(cfg, {}, 30 * GIB, "4 requests", available_bytes=16 * GIB)


def test_a_gpu_too_small_for_the_kv_cache_names_the_utilization_that_would_hold_it():
    cfg = to_run_config(compose_run("runner=fake"))
    capacity.check_gpu_kv_cache(cfg, 50 * GIB, "8 requests", gpu_bytes=141 * GIB, weight_bytes=16 * GIB)  # fits
    with pytest.raises(ConfigError) as refused:
        capacity.check_gpu_kv_cache(cfg, 130 * GIB, "8 requests", gpu_bytes=141 * GIB, weight_bytes=16 * GIB)
    assert str(refused.value) == (
        "engine.gpu_memory_utilization=0.9 of this GPU's 141.00 GiB leaves 110.90 GiB for the KV cache after "
        "16.00 GiB of weights; 8 requests need 130.00 GiB per GPU: lower batch_sizes, the longest length or "
        "sampling.max_tokens, or shard the model (engine.tensor_parallel_size)."
    )
    with pytest.raises(ConfigError, match=r"raise engine.gpu_memory_utilization to 0.92\."):
        capacity.check_gpu_kv_cache(cfg, 112 * GIB, "8 requests", gpu_bytes=141 * GIB, weight_bytes=16 * GIB)


def test_a_speed_bench_split_past_the_window_is_refused_naming_the_split_key(tmp_path, smollm2):  # noqa: F811
    cfg = compose_run(
        "target=custom",
        f"target.model={smollm2}",
        "runner=fake",
        "dataset=speed_bench",
        "dataset.config=[throughput_1k,throughput_32k]",
        f"dataset.path={tmp_path}",
    )
    with pytest.raises(ConfigError) as refused:
        make_plan(to_run_config(cfg))
    assert str(refused.value).startswith(
        "dataset.config=[throughput_1k,throughput_32k]: a 32000-token prompt and its sampling.max_tokens=128 need "
        "32128 tokens, above target.model's window of 8192"
    )
