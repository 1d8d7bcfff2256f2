"""engine.kv_cache_dtype (issue 49, part 1): an FP8 KV cache is one key, passed to the engine,
recorded with the run, and refused before any engine where vLLM's CPU build cannot keep it."""

from __future__ import annotations

import json

import pytest

from evals import kv_cache, plan
from evals.compose import to_run_config
from evals.run import run
from runners.server_runner import server_flags
from runners.vllm_runner import engine_args
from speclens.config import config_fingerprint
from speclens.errors import ConfigError
from tests.unit.conftest import compose_run, fake_overrides

ROWS = [{"question_id": f"q{i}", "category": "chat", "turns": [f"say something about {i} " * 4]} for i in range(4)]
# SmolLM2-135M's attention: 9 heads over 576 (64 wide), 3 KV heads
SMOLLM2 = {"hidden_size": 576, "num_attention_heads": 9, "num_key_value_heads": 3, "intermediate_size": 1536}


def test_an_fp8_cache_is_passed_to_the_engine_and_said_with_the_run_that_used_it(tmp_path, capsys):
    base = [*fake_overrides(tmp_path, ROWS, **SMOLLM2), "drafter=ngram", "d=3"]
    fp8 = compose_run(*base, "engine.kv_cache_dtype=fp8")
    summary = run(fp8, tmp_path / "fp8", progress=lambda label: None)
    assert summary.numerics.kv_cache_dtype == "fp8"
    assert "KV cache fp8" in capsys.readouterr().out.splitlines()[0]
    auto = run(compose_run(*base), tmp_path / "auto", progress=lambda label: None)
    assert auto.numerics.kv_cache_dtype is None
    written = json.loads((tmp_path / "auto" / "summary.json").read_text())["numerics"]
    assert "kv_cache_dtype" not in written  # a run on the model's own dtype writes what it always did
    stamps = [json.loads((tmp_path / name / "stamp.json").read_text()) for name in ("fp8", "auto")]
    assert stamps[0]["config_fingerprint"] != stamps[1]["config_fingerprint"]
    # the engine gets it in process and as a launched server's flag; auto leaves vLLM's default
    cfg = to_run_config(fp8)
    assert engine_args(cfg.engine, 0)["kv_cache_dtype"] == "fp8"
    flags = server_flags(cfg)
    assert flags[flags.index("--kv-cache-dtype") + 1] == "fp8"
    assert "kv_cache_dtype" not in engine_args(to_run_config(compose_run(*base)).engine, 0)


def test_the_key_enters_the_fingerprint_only_when_set():
    base = {"d": 3, "engine": {"dtype": "bfloat16"}}
    names = {"drafter": "ngram"}
    old = config_fingerprint(base, names)
    assert config_fingerprint({**base, "engine": {"dtype": "bfloat16", "kv_cache_dtype": "auto"}}, names) == old
    assert config_fingerprint({**base, "engine": {"dtype": "bfloat16", "kv_cache_dtype": "fp8"}}, names) != old


@pytest.mark.parametrize(
    "overrides, said",
    [
        (
            ["engine.kv_cache_dtype=int8"],
            r"^engine\.kv_cache_dtype=int8: choose one of auto, fp8, fp8_e4m3, fp8_e5m2\.$",
        ),
        (
            ["+engine.extra_args.kv_cache_dtype=fp8"],
            r"^give the KV cache's dtype as engine\.kv_cache_dtype=…, not engine\.extra_args\.kv_cache_dtype",
        ),
    ],
)
def test_a_bad_value_is_one_line_before_any_engine(tmp_path, overrides, said):
    cfg = to_run_config(compose_run(*fake_overrides(tmp_path, ROWS), "drafter=ngram", *overrides))
    with pytest.raises(ConfigError, match=said):
        plan.make_plan(cfg)
    assert not (tmp_path / "run").exists()


def test_vllms_cpu_build_is_asked_only_for_what_it_can_keep(tmp_path, monkeypatch):
    """The CPU build keeps FP8 only with AVX-512 or AMX and heads a multiple of 32 wide
    (vllm/v1/attention/backends/cpu_attn.py): refused in one line naming the CPU or the head size."""
    monkeypatch.setattr(plan, "engine_device", lambda cfg: "cpu")
    smollm2 = to_run_config(
        compose_run(*fake_overrides(tmp_path, ROWS, **SMOLLM2), "drafter=ngram", "engine.kv_cache_dtype=fp8")
    )
    monkeypatch.setattr(kv_cache, "fp8_kv_cache_isa", lambda: False)
    monkeypatch.setattr(kv_cache, "cpu_label", lambda: "AMD EPYC (avx2)")
    with pytest.raises(ConfigError, match=r"only on x86 with AVX-512 or AMX, and this CPU is AMD EPYC \(avx2\);"):
        plan.make_plan(smollm2)
    monkeypatch.setattr(kv_cache, "fp8_kv_cache_isa", lambda: True)
    plan.make_plan(smollm2)  # 64-wide heads on an AVX-512 CPU: kept
    narrow = to_run_config(
        compose_run(
            *fake_overrides(tmp_path / "narrow", ROWS, **{**SMOLLM2, "num_attention_heads": 12}),
            "drafter=ngram",
            "engine.kv_cache_dtype=fp8_e5m2",
        )
    )
    with pytest.raises(ConfigError, match=r"divides by 32, and target\.model's heads are 48 wide; run it on a GPU"):
        plan.make_plan(narrow)
    monkeypatch.setattr(plan, "engine_device", lambda cfg: "gpu")
    plan.make_plan(narrow)  # a GPU keeps it


def test_an_attached_servers_cache_is_its_own_and_not_claimed(tmp_path):
    from runners.server_runner import check_support

    attached = to_run_config(
        compose_run(
            *fake_overrides(tmp_path, ROWS),
            "runner=server",
            "runner.url=http://127.0.0.1:9",
            "engine.kv_cache_dtype=fp8",
        )
    )
    with pytest.raises(ConfigError, match=r"^engine\.kv_cache_dtype=fp8 with runner\.url: an attached server's KV"):
        check_support(attached, speculative=True)


def test_curves_refuse_to_pool_two_caches_naming_the_key_and_compare_pairs_them(tmp_path):
    """Until the cache dtype is an axis of curves and rankings, runs that mix it are refused in one
    line naming the key and each run's value; reports.compare pairs such runs (its point)."""
    from reports.compare import compare
    from reports.curves import collect
    from speclens.errors import SpeclensError

    base = [*fake_overrides(tmp_path, ROWS, **SMOLLM2), "drafter=ngram", "d=3"]
    sweep = tmp_path / "sweep"
    run(compose_run(*base), sweep / "auto", progress=lambda label: None)
    run(compose_run(*base, "engine.kv_cache_dtype=fp8"), sweep / "fp8", progress=lambda label: None)
    with pytest.raises(SpeclensError, match=r'config\.engine\.kv_cache_dtype differs \("auto" in auto; "fp8" in fp8\)'):
        collect(sweep)
    table, _ = compare(sweep / "auto", sweep / "fp8")  # paired across the two caches: not refused
    assert not table.empty
