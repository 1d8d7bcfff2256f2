"""What a run records of its numerics, and what the result table says where they can move its figures."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from evals.pipeline.run_job import run
from reports.table import numerics_line, result_table
from speclens.config import config_fingerprint
from speclens.figures.summary import Numerics
from speclens.file_formats.summary_file import read_summary
from tests.unit.conftest import compose_run, fake_overrides

ROWS = [{"question_id": "q1", "category": "coding", "turns": ["write code"]}]


def fake_summary(tmp_path, *overrides: str):
    cfg = compose_run(*fake_overrides(tmp_path, ROWS), "drafter=ngram", "d=3", *overrides)
    return run(cfg, tmp_path / "run", progress=lambda label: None)


@pytest.mark.parametrize(
    ("dtype", "batch_invariant", "reproducible"),
    [
        ("float32", False, True),
        ("bfloat16", False, False),
        ("float16", False, False),
        ("bfloat16", True, True),
    ],
)
def test_greedy_outputs_are_reproducible_only_in_float32_or_with_batch_invariant_kernels(
    dtype, batch_invariant, reproducible
):
    assert Numerics.of(dtype, 2, batch_invariant).reproducible is reproducible


def test_the_summary_records_the_engines_dtype_and_reads_it_back(tmp_path):
    summary = fake_summary(tmp_path, "engine.dtype=float32")
    again = read_summary(tmp_path / "run")
    assert again.numerics == summary.numerics == Numerics("float32", None, False, True)
    assert numerics_line(again) is None and "numerics:" not in result_table(again)


def as_vllms(summary):
    """The fake run's summary read as vLLM's (the numerics line is about an engine's rounding; a
    script has none, and its own table says nothing of it)."""
    assert numerics_line(summary) is None
    return replace(summary, runner="vllm", provenance=replace(summary.provenance, source="measured", runner="vllm"))


def test_a_bf16_run_says_its_figures_can_move_and_what_makes_them_exact(tmp_path):
    summary = as_vllms(fake_summary(tmp_path, "engine.dtype=bfloat16"))
    line = numerics_line(summary)
    assert line.startswith("numerics: bfloat16:") and "engine.dtype=float32" in line
    assert "the draft is the target itself" not in line
    assert line in result_table(summary).splitlines()


def test_a_target_drafting_for_itself_below_one_plus_d_is_explained(tmp_path):
    summary = as_vllms(fake_summary(tmp_path, "engine.dtype=bfloat16"))
    summary = replace(summary, fingerprints=replace(summary.fingerprints, draft=summary.fingerprints.target), al=3.969)
    assert numerics_line(summary).endswith(
        "its AL 3.969 below 1 + D = 4 is such near-ties between the draft and verify passes"
    )
    summary = replace(summary, al=4.0)  # every draft accepted: nothing to explain
    assert "the draft is the target itself" not in numerics_line(summary)


def test_keys_added_later_enter_the_fingerprint_only_when_set():
    base = {"d": 3, "engine": {"dtype": "bfloat16"}}
    names = {"drafter": "ngram"}
    old = config_fingerprint(base, names)
    assert config_fingerprint({**base, "engine": {"dtype": "bfloat16", "batch_invariant": False}}, names) == old
    assert config_fingerprint({**base, "engine": {"dtype": "bfloat16", "batch_invariant": True}}, names) != old
    assert config_fingerprint({**base, "repeats": None}, names) == old
    assert config_fingerprint({**base, "repeats": 3}, names) != old


def test_batch_invariant_kernels_are_refused_on_a_cpu_build_with_the_reason(tmp_path, monkeypatch):
    from evals.pipeline.compose import to_run_config
    from runners import vllm_runner
    from speclens.errors import ConfigError

    cfg = to_run_config(compose_run(*fake_overrides(tmp_path, ROWS), "runner=vllm", "engine.batch_invariant=true"))
    monkeypatch.setattr(vllm_runner, "on_cpu", lambda: True)
    with pytest.raises(
        ConfigError,
        match=r"^engine\.batch_invariant=true sets vLLM's VLLM_BATCH_INVARIANT.*"
        r"engine\.dtype=float32 makes greedy outputs reproducible",
    ):
        vllm_runner.check_support(cfg, speculative=True)
    monkeypatch.setattr(vllm_runner, "on_cpu", lambda: False)  # a GPU build: the kernels exist
    vllm_runner.check_support(cfg, speculative=True)
    for name in ("VLLM_BATCH_INVARIANT", "VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_KVCACHE_SPACE"):
        monkeypatch.setenv(name, "unset")  # restored after the test
    vllm_runner.prepare_process(cfg)
    assert os.environ["VLLM_BATCH_INVARIANT"] == "1"


def test_a_launched_server_computes_on_the_threads_the_in_process_engine_would(tmp_path, monkeypatch):
    from evals.pipeline.compose import to_run_config
    from runners.server_runner import numerics_env, parse_cpus

    cfg = to_run_config(compose_run(*fake_overrides(tmp_path, ROWS), "runner=server"))
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3, 1, 2})
    assert numerics_env(cfg) == {"VLLM_CPU_OMP_THREADS_BIND": "1,2,3"}
    cfg.engine.batch_invariant = True
    assert numerics_env(cfg)["VLLM_BATCH_INVARIANT"] == "1"
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0-1")  # the user's own binding wins
    assert numerics_env(cfg)["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"
    assert parse_cpus("0,2-4|5") == [0, 2, 3, 4] and parse_cpus("nobind") == []


def test_batch_invariant_kernels_cannot_be_asked_of_an_attached_server(tmp_path):
    from evals.pipeline.compose import to_run_config
    from runners.server_runner import check_support
    from speclens.errors import ConfigError

    cfg = to_run_config(
        compose_run(
            *fake_overrides(tmp_path, ROWS),
            "runner=server",
            "runner.url=http://127.0.0.1:9",
            "engine.batch_invariant=true",
        )
    )
    with pytest.raises(
        ConfigError,
        match=r"^engine\.batch_invariant=true with runner\.url: an attached server's "
        r"kernels are chosen where it starts",
    ):
        check_support(cfg, speculative=True)


@pytest.mark.parametrize(
    ("runner", "native", "fitted"),
    [
        (["runner=vllm"], False, "float32"),
        (["runner=vllm"], True, "bfloat16"),
        (["runner=server"], False, "float32"),
        (["runner=server", "runner.url=http://127.0.0.1:9"], False, "bfloat16"),
        (["runner=fake"], False, "bfloat16"),
    ],
)
def test_a_bf16_target_is_fitted_to_float32_where_this_cpu_has_no_native_bf16(
    tmp_path, monkeypatch, runner, native, fitted
):
    from evals.pipeline import plan
    from evals.pipeline.compose import to_run_config
    from runners.registry import runner_of
    from speclens.model_facts import ModelFacts

    monkeypatch.setattr(plan, "native_bf16", lambda: native)
    monkeypatch.setattr(plan, "_cpu_build", lambda: True)
    monkeypatch.setattr(plan.importlib.util, "find_spec", lambda name: object())
    cfg = to_run_config(compose_run(*fake_overrides(tmp_path, ROWS), *runner))
    facts = ModelFacts.from_config(str(tmp_path), {"torch_dtype": "bfloat16", "max_position_embeddings": 8192})
    chosen = plan.fit_engine_defaults(cfg, facts, runner_of(cfg))["engine.dtype"]
    assert str(cfg.engine.dtype) == chosen["value"] == fitted
    assert ("has no native bf16" in chosen["why"]) is (fitted == "float32")


@pytest.mark.parametrize(
    "flags, native, fp8",
    [
        ("fpu avx avx2 fma", False, False),  # the kind's AVX2-only hosts
        ("avx2 avx512f avx512bw avx512_bf16 avx512_vnni", True, True),  # its AVX-512 hosts
        ("avx2 avx512f avx512bw", False, True),  # AVX-512 without bf16 (an older Xeon)
        ("avx2 avx512f avx512_bf16 amx_bf16 amx_tile", True, True),  # AMX (Sapphire Rapids)
    ],
)
def test_the_cpu_label_decides_bf16_and_the_fp8_cache_on_every_host(tmp_path, monkeypatch, flags, native, fp8):
    """What the host-conditional tests branch on (the FP8 cache measured or refused, bf16 fitted or
    not), read from a /proc/cpuinfo of each kind of host, whichever host runs this."""
    from speclens import machine

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu {flags}\n")
    real_path = machine.Path
    monkeypatch.setattr(machine, "Path", lambda p: cpuinfo if p == "/proc/cpuinfo" else real_path(p))
    machine.cpu_label.cache_clear()
    try:
        assert machine.cpu_label().startswith("AMD EPYC (")
        assert (machine.native_bf16(), machine.fp8_kv_cache_isa()) == (native, fp8)
    finally:
        machine.cpu_label.cache_clear()
