"""engine.kv_cache_dtype (issue 49, part 1): an FP8 KV cache is one key, passed to the engine,
recorded with the run, and refused before any engine where vLLM's CPU build cannot keep it."""

from __future__ import annotations

import json

import pytest

from evals.pipeline import kv_cache, plan
from evals.pipeline.compose import to_run_config
from evals.pipeline.run_job import run
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
    monkeypatch.setattr(plan, "engine_device", lambda runner, cfg: "cpu")
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
    monkeypatch.setattr(plan, "engine_device", lambda runner, cfg: "gpu")
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


# Scripted acceptance per request (d=3): the default cache accepts 19 of 27 drafted tokens over 9
# steps, the FP8 cache 9 over 9 (AL 1 + 19/9 against 2).
AUTO_SCRIPT = {"q0#0": [3, 3, 3], "q1#0": [3, 2], "q2#0": [1, 1], "q3#0": [0, 3]}
FP8_SCRIPT = {"q0#0": [2, 2], "q1#0": [3, 0, 1], "q2#0": [1, 0], "q3#0": [0, 0]}


def test_two_caches_are_an_axis_paired_in_the_report_and_compared_across_dirs(tmp_path):
    """A sweep over engine.kv_cache_dtype: one curve point, one ranking table and one serve plan
    per cache; the report pairs the FP8 run with the default's (AL, difference, tokens per step,
    plain decoding's parting); reports.compare pairs a default dir with an FP8 dir."""
    from reports.build import build_sections
    from reports.compare import compare
    from reports.curves import collect
    from reports.runs import find_runs
    from reports.serve import serve_plan
    from reports.settings import settings_table
    from reports.speedup_ranking import rank_runs

    sweep = tmp_path / "sweep"
    for name, script, more in (("auto", AUTO_SCRIPT, []), ("fp8", FP8_SCRIPT, ["engine.kv_cache_dtype=fp8"])):
        overrides = fake_overrides(tmp_path / name, ROWS, script, **SMOLLM2)
        cfg = compose_run(*overrides, "drafter=ngram", "d=3", "baseline=true", "batch_sizes=[1]", *more)
        run(cfg, sweep / name, progress=lambda label: None)
    curves = collect(sweep)
    whole = curves[curves.domain == "all"].set_index("setting").al
    assert whole.to_dict() == pytest.approx({"": 1 + 19 / 9, "kv_cache_dtype=fp8": 2.0})
    runs = find_runs(sweep)
    ranking = rank_runs(runs)
    # each cache its own table: ngram and plain decoding ranked within it
    assert ranking.groupby("setting").drafter.apply(sorted).to_dict() == {
        "": ["ngram", "ngram", "none", "none"],
        "kv_cache_dtype=fp8": ["ngram", "ngram", "none", "none"],
    }  # (all prompts and the one domain, chat)
    plans = serve_plan(ranking, runs)["by_temperature"]
    assert [(p["setting"], p["kv_cache_dtype"]) for p in plans] == [("", "auto"), ("kv_cache_dtype=fp8", "fp8")]

    table, notes = settings_table(runs)
    assert notes == [] and len(table) == 1
    row = table.iloc[0]
    assert row.setting == "kv_cache_dtype=fp8" and row.n_requests == 4
    assert (row.baseline_al, row.candidate_al) == pytest.approx((1 + 19 / 9, 2.0))
    assert row.al_diff == pytest.approx(2.0 - (1 + 19 / 9))
    assert row.diff_ci95_hi < 0 and row.significant  # every prompt accepts less under this script
    assert row.baseline_per_position == "0.89/0.67/0.56" and row.candidate_per_position == "0.56/0.33/0.11"
    # the fake's plain decoding is as long as its scripted speculative answer (tokens 100, 101, …, then
    # the stop token): q0, q2 and q3 stop sooner under FP8's script (7, 4 and 3 tokens against 13, 5
    # and 6: parting at 6, 3 and 2, median 3), q1 alike (8 tokens)
    assert (row.plain_turns_parted, row.plain_turns, row.plain_first_parting_median) == (3, 4, 3)
    (section,) = [s for s in build_sections(sweep) if s.title == "Settings, paired"]
    assert section.tables[0][1][0][2:5] == ["kv_cache_dtype=fp8", "4", "3.111"]

    # two dirs, one cache each: paired across the caches, the setting shown as a change
    compared, _ = compare(sweep / "auto", sweep / "fp8")
    pooled = compared[(compared.domain == "all") & (compared.segment == "all")].iloc[0]
    assert (pooled.baseline_setting, pooled.setting) == ("", "kv_cache_dtype=fp8")
    assert pooled.al_diff == pytest.approx(row.al_diff)


# Two turns per conversation (as MT-Bench's): the first answers agree under both caches, three of
# the four second answers do not (the FP8 script accepts less there, so they stop sooner).
TWO_TURN_ROWS = [
    {"question_id": f"q{i}", "category": "chat", "turns": [f"say something about {i} " * 4, "and then?"]}
    for i in range(4)
]
AUTO_TWO_TURNS = {**{f"q{i}#0": [3, 3] for i in range(4)}, **{f"q{i}#1": [2, 2] for i in range(4)}}
FP8_TWO_TURNS = {**AUTO_TWO_TURNS, **{f"q{i}#1": [2, 1] for i in range(3)}}


def test_plain_decodings_parting_counts_turns_not_conversations(tmp_path):
    """The pairing's plain-decoding comparison on multi-turn prompts, on every host (the real-engine
    twin, test_an_fp8_kv_cache_is_measured_and_paired_with_the_default_cache, runs only on CPUs that
    keep an FP8 cache): 4 conversations of 2 turns compare 8 answers."""
    from reports.runs import find_runs
    from reports.settings import settings_table

    sweep = tmp_path / "sweep"
    for name, script, more in (
        ("auto", AUTO_TWO_TURNS, []),
        ("fp8", FP8_TWO_TURNS, ["engine.kv_cache_dtype=fp8"]),
    ):
        overrides = fake_overrides(tmp_path / name, TWO_TURN_ROWS, script, **SMOLLM2)
        cfg = compose_run(*overrides, "drafter=ngram", "d=3", "baseline=true", "batch_sizes=[1]", *more)
        run(cfg, sweep / name, progress=lambda label: None)
    table, notes = settings_table(find_runs(sweep))
    assert notes == [] and list(table.setting) == ["kv_cache_dtype=fp8"]
    row = table.iloc[0]
    assert row.n_requests == 4
    assert (row.plain_turns_parted, row.plain_turns) == (3, 8)
