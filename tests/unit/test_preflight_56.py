"""Issue 56's pre-flight cases: each refused in one `speclens: error:` line (exit 2, no run dir)
before any engine starts, whatever the runner, or said in one note where it is not refused."""

from __future__ import annotations

import json

import pytest

from evals.pipeline import plan
from evals.pipeline.compose import to_run_config
from evals.pipeline.run_job import run
from evals.run import main as run_main
from speclens.errors import ConfigError
from tests.unit.conftest import compose_run, fake_overrides

GIB = 1024**3
ROWS = [{"question_id": "q1", "category": "coding", "turns": ["write code"]}]
EXTENDED = "+engine.rope_scaling={rope_type:yarn,factor:4}"


def refused_in_a_job(tmp_path, capsys, *overrides: str) -> str:
    """evals.run's main in-process on a fake target: the job's exit status is 2, it leaves no run
    dir, and its last stderr line (the refusal) is returned."""
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as ended:  # a Hydra job reports its failure, then exits with its status
        run_main([*fake_overrides(tmp_path, ROWS), *overrides, f"hydra.run.dir={out}"])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and not out.exists(), err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


def test_a_kv_cache_above_the_machines_memory_is_refused_on_any_runner(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(plan, "memory_total", lambda: 16 * GIB + GIB // 2)
    line = refused_in_a_job(tmp_path, capsys, "engine.cpu_kvcache_space_gib=100000")
    assert line == (
        "speclens: error: engine.cpu_kvcache_space_gib=100000 is more than this machine's memory (16.5 GiB); "
        "give at most 16 (less, to leave room for the weights), or leave it unset to fit it to the prompts."
    )


def test_the_environments_kv_space_is_held_to_the_machines_memory_too(monkeypatch):
    cfg = to_run_config(compose_run("runner=fake"))
    monkeypatch.setattr(plan.capacity, "env_kv_space", lambda: 64)
    with pytest.raises(ConfigError) as refused:
        plan.check_kv_space_fits(cfg, 32 * GIB)
    assert str(refused.value) == (
        "engine.cpu_kvcache_space_gib=64 (VLLM_CPU_KVCACHE_SPACE) is more than this machine's memory (32.0 GiB); "
        "give at most 32 (less, to leave room for the weights), or unset VLLM_CPU_KVCACHE_SPACE to fit it to the "
        "prompts."
    )


def test_a_kv_cache_within_the_machines_memory_or_an_unknown_memory_passes(monkeypatch):
    cfg = to_run_config(compose_run("runner=fake", "engine.cpu_kvcache_space_gib=32"))
    monkeypatch.setattr(plan.capacity, "env_kv_space", lambda: None)
    plan.check_kv_space_fits(cfg, 32 * GIB)  # exactly the machine's memory: not refused here
    plan.check_kv_space_fits(cfg, None)
    with pytest.raises(ConfigError, match=r"^engine\.cpu_kvcache_space_gib=32 is more than this machine's memory"):
        plan.check_kv_space_fits(cfg, 32 * GIB - 1)


def test_d_above_vllms_limit_is_refused_on_any_runner(tmp_path, capsys):
    line = refused_in_a_job(tmp_path, capsys, "drafter=ngram", "d=129")
    assert line == (
        "speclens: error: d=129: must be at most 128, vLLM's limit on num_speculative_tokens (its rejection "
        "sampler verifies at most 128 draft tokens a step)."
    )


def test_d_at_vllms_limit_passes_the_scalar_checks():
    cfg = to_run_config(compose_run("runner=fake", "d=128"))
    plan.check_scalars(cfg)  # raises nothing


def test_a_schedule_drafting_more_than_vllms_limit_is_refused(tmp_path):
    schedule = tmp_path / "schedule.json"
    schedule.write_text(json.dumps([[1, 4, 200]]))
    cfg = compose_run(*fake_overrides(tmp_path, ROWS), "drafter=ngram", "d=3", f"drafter.schedule={schedule}")
    with pytest.raises(ConfigError) as refused:
        run(cfg, tmp_path / "run", progress=lambda label: None)
    assert str(refused.value) == (
        f"drafter.schedule={schedule}: its largest k is 200, above 128 (vLLM's limit on num_speculative_tokens); "
        "keep every k <= 128."
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "override, said",
    [
        (
            "drafter.prompt_lookup_maxx=3",
            "drafter.prompt_lookup_maxx: no such key in NgramConfig; did you mean drafter.prompt_lookup_max? "
            "(its keys: schedule, prompt_lookup_min, prompt_lookup_max).",
        ),
        ("engin.dtype=float32", "engin: no such key in RunConfig; did you mean engine.dtype? (its keys: target, "),
        (
            "dataset.num_requets=3",
            "dataset.num_requets: no such key in SampleConfig; did you mean dataset.num_requests? "
            "(its keys: path, num_requests, categories).",
        ),
        (
            "+sampling.max_tokenz=5",
            "unknown key sampling.max_tokenz (not a key of SamplingConfig; did you mean sampling.max_tokens? "
            "its keys: temperature, top_p, max_tokens, ignore_eos).",
        ),
    ],
)
def test_an_unknown_key_names_the_nearest_one_in_one_line(tmp_path, capsys, monkeypatch, override, said):
    monkeypatch.chdir(tmp_path)
    status = run_main(["runner=fake", "drafter=ngram", override])
    lines = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"speclens: error: {said}")
    assert not (tmp_path / "outputs").exists()  # refused when composed: no run dir


def test_an_unknown_key_with_no_near_name_suggests_none(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_main(["runner=fake", "drafter=ngram", "drafter.name=suffix"]) == 2
    line = capsys.readouterr().err.strip()
    assert line == (
        "speclens: error: drafter.name: no such key in NgramConfig (its keys: schedule, prompt_lookup_min, "
        "prompt_lookup_max)."
    )


NOTE = (
    "speclens: note: engine.rope_scaling (yarn x4 from 512) is applied though no prompt needs it: every prompt "
    "with its answer fits target.model's own window of 512 tokens (the longest needs "
)


def planned(tmp_path, *overrides: str):
    cfg = compose_run(*fake_overrides(tmp_path, ROWS, max_position_embeddings=512), "drafter=ngram", *overrides)
    return plan.make_plan(to_run_config(cfg))


def test_an_extension_no_prompt_needs_is_applied_with_a_note(tmp_path, capsys):
    made = planned(tmp_path, EXTENDED)
    err = capsys.readouterr().err
    assert made.context_window.extension == "yarn x4 from 512"  # applied, not refused
    assert NOTE in err
    assert (
        "); figures measured under it are labelled with it (drop engine.rope_scaling to measure the target as "
        "it ships)." in err
    )


@pytest.mark.parametrize(
    "overrides",
    [
        [],  # no extension
        [EXTENDED, "sampling.max_tokens=600"],  # every answer needs more than the own window of 512
        [EXTENDED, "engine.max_model_len=1024"],  # the engine's limit the user set needs it
    ],
)
def test_no_note_where_no_extension_or_where_one_is_needed(tmp_path, capsys, overrides):
    planned(tmp_path, *overrides)
    assert "speclens: note:" not in capsys.readouterr().err
