"""What a figure is travels with it (issue 56): the provenance record, the requests a pass held in
flight as its batch size, and the labels that carry both to the ranking, serve.json and wandb."""

from __future__ import annotations

import json

import pytest

from reports.runs import find_runs
from reports.serve import serve_plan
from reports.speedup_ranking import rank_runs
from reports.table import result_table
from reports.wandb_log import run_tags
from speclens.errors import CorruptRecord
from speclens.file_formats.summary_file import read_summary
from speclens.provenance import Provenance, differences, mark, of_stamp, source_of
from tests.unit.test_length_reports import measure
from tests.unit.test_long_context import smollm2  # noqa: F401 (the embedded target, shared)


def test_the_source_says_set_rates_before_the_engine_and_a_replay_its_kind():
    assert source_of("vllm", synthetic=False) == "measured"
    assert source_of("server", synthetic=False) == "measured"
    assert source_of("fake", synthetic=False) == "fake"
    # set rates are set whatever engine drew them: never the fake engine's "measured" or "fake"
    assert source_of("fake", synthetic=True) == source_of("vllm", synthetic=True) == "synthetic"
    assert source_of("vllm", synthetic=False, replay_kind="exact") == "replayed"
    assert source_of("vllm", synthetic=False, replay_kind="estimated") == "estimated"
    with pytest.raises(ValueError, match="source 'guessed' is not one of"):
        Provenance(source="guessed", runner="vllm")


def test_differences_name_every_identity_field_with_both_values_and_a_stamp_gives_the_setting():
    stamp = {
        "config": {"engine": {"dtype": "float32", "kv_cache_dtype": "fp8", "model_runner": "auto"}},
        "versions": {"vllm": "0.32.0"},
        "quantization": {"target": None, "draft": "w8a8"},
    }
    real = of_stamp(stamp, runner="vllm", model_runner="v1", batch_sizes=[4, 1], lengths=[3000, 1000])
    assert real == Provenance(
        source="measured",
        runner="vllm",
        engine="vllm",
        engine_version="0.32.0",
        dtype="float32",
        model_runner="v1",
        setting="kv_cache_dtype=fp8, drafter.quantization=w8a8",
        batch_sizes=[1, 4],
        lengths=[1000, 3000],
    )
    fake = of_stamp({"config": {"engine": {"dtype": "bfloat16"}}}, runner="fake")
    assert differences(fake, real) == [
        "source: fake vs measured",
        "runner: fake vs vllm",
        "engine.dtype: bfloat16 vs float32",
        "engine.model_runner: null vs v1",
        "setting: defaults vs kv_cache_dtype=fp8, drafter.quantization=w8a8",
    ]
    assert real.label() == "measured (vllm 0.32.0, float32, v1, kv_cache_dtype=fp8, drafter.quantization=w8a8)"
    assert fake.engine_version is None and fake.label() == "fake (scripted engine, runner=fake)"
    assert (mark("measured"), mark("synthetic")) == ("", " [synthetic]")


def test_a_summary_with_an_unknown_source_is_a_corrupt_record(tmp_path, smollm2):  # noqa: F811
    out = measure(tmp_path, smollm2, tmp_path / "sweep" / "ngram", {"300": 2, "1k": 1}, 3, "baseline=true")
    data = json.loads((out / "summary.json").read_text())
    data["provenance"]["source"] = "guessed"
    (out / "summary.json").write_text(json.dumps(data))
    with pytest.raises(CorruptRecord, match="source 'guessed' is not one of"):
        read_summary(out)


def test_a_length_pass_of_fewer_prompts_than_b_is_ranked_and_served_at_the_requests_it_held(
    tmp_path,
    smollm2,  # noqa: F811
):
    """Two lengths of two prompts each at B = 4: each length's pass holds 2 requests in flight, so its
    figures are of B = 2, its plain step time is found at 2, and the ranking and serve.json say B = 2."""
    out = measure(tmp_path, smollm2, tmp_path / "sweep" / "ngram", {"300": 2, "1k": 1}, 3, "baseline=true")
    summary = read_summary(out)
    (point,) = summary.operating_points
    assert (point.batch_size, point.batch_size_held, point.held) == (4, 2, 2)
    assert point.t_verif is not None and point.t_verif.n > 0  # steady steps at the 2 it held
    assert {label: (g.batch_size_held, g.t_verif is not None) for label, g in point.by_length.items()} == {
        "300": (2, True),
        "1k": (2, True),
    }
    assert summary.provenance is not None and summary.provenance.batch_sizes == [2]
    assert summary.provenance.lengths == [300, 1000] and summary.provenance.source == "fake"
    assert "B=2 in flight (batch_sizes asked 4):" in result_table(summary)
    runs = find_runs(out.parent)
    ranking = rank_runs(runs)
    assert set(ranking.batch_size) == {2}
    # each domain is one length, whose own pass measured it: the fake engine's, said so
    assert set(ranking.source) == set(ranking.speedup_source) == {"fake"}
    plan = serve_plan(ranking, runs)
    assert {w["batch_size"] for w in plan["winners"]} == {2}
    assert [w["speedup_source"] for w in plan["winners"] if w["domain"] == "all"] == ["fake"]
    assert all(w["speedup_source"].endswith("fake") for w in plan["winners"])
    assert [p["source"] for p in plan["provenance"]] == ["fake"]
    stamp = json.loads((out / "stamp.json").read_text())
    assert run_tags(summary, stamp)[0] == "source=fake"


def test_a_one_length_domain_is_ranked_by_its_lengths_own_steps_so_serve_json_agrees_with_itself(
    tmp_path,
    smollm2,  # noqa: F811
):
    """`mixed@300` holds exactly the 300-token prompts, which their own pass measured: its ranking
    row is that length's (measured speedup, step costs), and serve.json's winner for the domain is
    its winner for the length."""
    out = measure(tmp_path, smollm2, tmp_path / "sweep" / "ngram", {"300": 3, "1k": 0}, 3, "baseline=true")
    runs = find_runs(out.parent)
    ranking = rank_runs(runs)
    (point,) = runs[0].summary.operating_points
    for label in ("300", "1k"):
        row = ranking[(ranking.domain == f"mixed@{label}") & (ranking.drafter == "ngram")].iloc[0]
        length = point.by_length[label]
        assert (row.speedup, row.measured_speedup, row.speedup_source) == (length.speedup, length.speedup, "fake")
        assert row.t_step_ms == length.t_step.median_ms and row.batch_size == 2
    plan = serve_plan(ranking, runs)
    by_domain = {w["domain"]: (w["batch_size"], w["drafter"], w["d"], w["speedup"]) for w in plan["winners"]}
    for bucket in plan["by_length"]:
        (winner,) = bucket["winners"]
        assert by_domain[f"mixed@{bucket['length']}"] == (
            winner["batch_size"],
            winner["drafter"],
            winner["d"],
            winner["speedup"],
        )
    assert {by_domain["mixed@300"][1], by_domain["mixed@1k"][1]} == {"ngram", "none"}  # they differ by length


def test_two_batch_sizes_that_held_the_same_requests_are_one_operating_point_in_the_ranking(
    tmp_path,
    smollm2,  # noqa: F811
):
    """B = 2 and B = 4 over lengths of two prompts each both held 2 requests: one operating point,
    ranked once (not a tie of a run with itself), the smaller B asked standing for it."""
    out = measure(
        tmp_path, smollm2, tmp_path / "sweep" / "ngram", {"300": 2, "1k": 1}, 3, "baseline=true", "batch_sizes=[2,4]"
    )
    summary = read_summary(out)
    assert [(p.batch_size, p.held) for p in summary.operating_points] == [(2, 2), (4, 2)]
    ranking = rank_runs(find_runs(out.parent))
    whole = ranking[ranking.domain == "all"]
    assert sorted(zip(whole.drafter, whole.batch_size)) == [("ngram", 2), ("none", 2)]
    assert not whole.tie.any()
