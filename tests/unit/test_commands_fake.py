"""evals.run end to end with the scripted fake engine: records, summary, golden files."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from evals.pipeline.run_job import run
from reports.table import result_table
from speclens.errors import ConfigError, CorruptRecord, MeasurementError, exit_status
from speclens.file_formats.records import read_parquet
from speclens.file_formats.summary_file import read_summary
from tests.unit.conftest import compose_run, fake_overrides, write_checkpoint

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
D = 3
# request q1 (coding, two turns) and q2 (writing, one turn); None = undrafted step.
SCRIPT = {"q1#0": [3, 1, None, 0], "q1#1": [2, (2, 1)], "q2#0": [None, 3, 3]}
ROWS = [
    {"question_id": "q1", "category": "coding", "turns": ["write code", "now test it"]},
    {"question_id": "q2", "category": "writing", "turns": ["a short poem please"]},
]
VOLATILE = ("timing", "versions", "fingerprints", "git_sha", "target", "config_fingerprint")


def fake_run(tmp_path: Path, *overrides: str, script=SCRIPT, counter_error: int = 0):
    """One run with the fake runner: (summary as a dict, run dir, speculative configs of the
    engines it started)."""
    from runners import fake_engine

    engines = []
    original = fake_engine.fake_factory

    def recording(*args, **kwargs):
        inner = original(*args, **kwargs)
        return lambda model_dir, spec: engines.append(spec) or inner(model_dir, spec)

    fake_engine.fake_factory = recording
    try:
        cfg = compose_run(
            *fake_overrides(tmp_path, ROWS, script),
            "drafter=ngram",
            f"d={D}",
            f"runner.counter_error={counter_error}",
            *overrides,
        )
        out = tmp_path / "run"
        summary = run(cfg, out, progress=lambda label: None)
    finally:
        fake_engine.fake_factory = original
    return summary.to_dict(), out, engines


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("SPECLENS_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from the golden file (SPECLENS_UPDATE_GOLDEN=1 rewrites it)"


def test_summary_figures_match_hand_computation(tmp_path):
    summary, out, _ = fake_run(tmp_path)
    # drafted steps accept 3,1,0 | 2,1 (of 2 drafted) | 3,3 -> 7 steps, 13 accepted, 20 drafted
    assert summary["al"] == pytest.approx(1 + 13 / 7)
    assert summary["acceptance_histogram"] == [1, 2, 1, 3]
    assert summary["per_position_acceptance"] == pytest.approx([6 / 7, 4 / 7, 3 / 7])
    # output tokens: q1#0 1+4+2+1+1=9, q1#1 1+3+2=6, q2#0 1+1+4+4=10; passes 5+3+4
    assert summary["tokens_per_step"] == pytest.approx(25 / 12)
    assert summary["by_domain"]["coding"]["al"] == pytest.approx(1 + 7 / 5)
    assert summary["by_domain"]["writing"]["n_steps"] == 2
    assert summary["vllm_counters"] == {
        "num_drafts": 7,
        "num_draft_tokens": 20,
        "num_accepted_tokens": 13,
        "num_accepted_tokens_per_pos": [6, 4, 3],
    }
    assert summary["n_requests"] == 2 and summary["d"] == D and summary["drafter"] == "ngram"


def test_step_records_hold_positions_and_sum_to_counters(tmp_path):
    summary, out, _ = fake_run(tmp_path)
    steps = read_parquet(out / "steps.parquet")
    q1 = steps[(steps.request_id == "q1") & (steps.turn == 0)]
    prompt = read_parquet(out / "requests.parquet").set_index(["request_id", "turn"]).loc[("q1", 0), "prompt_tokens"]
    # first drafted step starts after the prefill token; the undrafted step adds one token
    assert list(q1.position - prompt) == [1, 5, 8]
    assert int(steps.num_accepted.sum()) == summary["vllm_counters"]["num_accepted_tokens"]
    requests = read_parquet(out / "requests.parquet")
    assert list(requests.columns[:5]) == ["batch_size", "request_id", "domain", "category", "turn"]
    assert requests.set_index(["request_id", "turn"]).loc[("q2", 0), "al"] == pytest.approx(4.0)
    engine_steps = read_parquet(out / "engine_steps.parquet")
    assert list(engine_steps.columns) == [
        "mode",
        "batch_size",
        "step",
        "wall_s",
        "num_requests",
        "num_tokens",
        "num_draft_tokens",
    ]
    assert int(engine_steps.num_draft_tokens.sum()) == summary["vllm_counters"]["num_draft_tokens"]


def test_summary_keys_and_types(tmp_path):
    summary, out, _ = fake_run(tmp_path)
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk == json.loads(json.dumps(summary))
    expected = {
        "schema_version": int,
        "drafter": str,
        "d": int,
        "target": str,
        "dataset": str,
        "n_requests": int,
        "al": float,
        "al_ci95": list,
        "al_request_weighted": float,
        "tokens_per_step": float,
        "per_position_acceptance": list,
        "acceptance_histogram": list,
        "by_domain": dict,
        "vllm_counters": dict,
        "timing": dict,
        "versions": dict,
        "fingerprints": dict,
        "al_emitted": float,
        "accepted_tokens_cut": int,
        "al_by_output_position": list,
        "peer_figures": dict,
        "draft_share": float,
    }
    for key, kind in expected.items():
        assert isinstance(on_disk[key], kind), key
    assert set(on_disk["timing"]) >= {"load_s", "generate_s", "output_tokens_per_s"}
    assert set(on_disk["versions"]) == {"speclens", "vllm", "torch", "transformers"}
    assert set(on_disk["fingerprints"]) == {"target", "draft", "dataset"}
    assert set(on_disk["by_domain"]["coding"]) == {
        "al",
        "al_ci95",
        "tokens_per_step",
        "n_requests",
        "n_steps",
        "al_per_request",
        "al_by_output_position",
        "draft_share",
    }
    # one request in the domain: its spread is its own AL
    assert on_disk["by_domain"]["coding"]["al_per_request"] == dict.fromkeys(
        ("p10", "p50", "p90", "min", "max"), on_disk["by_domain"]["coding"]["al"]
    ) | {"std": 0.0}
    assert (out / "stamp.json").is_file()


def test_golden_summary_and_table(tmp_path):
    summary, _, _ = fake_run(tmp_path)
    stable = {k: v for k, v in summary.items() if k not in VOLATILE}
    # a pass's wall time is real time; its engine-step time (generate_s) is the fake's scripted cost
    stable["operating_points"] = [{k: v for k, v in p.items() if k != "elapsed_s"} for p in summary["operating_points"]]
    assert all(p["elapsed_s"] > 0 for p in summary["operating_points"])
    check_golden("fake_summary.json", json.dumps(stable, indent=2, sort_keys=True) + "\n")
    typed = read_summary(tmp_path / "run")
    timing = replace(typed.timing, load_s=1.0, generate_s=2.0, output_tokens_per_s=12.5)
    typed = replace(typed, timing=timing)
    check_golden("fake_table.txt", result_table(typed) + "\n")


def test_plain_decoding_has_null_al_and_one_token_per_step(tmp_path):
    summary, _, engines = fake_run(tmp_path, "drafter=none")
    assert engines == [None]
    assert summary["al"] is None and summary["al_ci95"] is None and summary["d"] is None
    assert summary["tokens_per_step"] == 1.0


def test_baseline_reports_lossless_and_speedup(tmp_path):
    summary, out, engines = fake_run(tmp_path, "baseline=true")
    assert engines[0]["method"] == "ngram" and engines[1] is None
    loss = summary["lossless"]
    assert (loss["checked"], loss["identical"], loss["n_compared"], loss["n_identical"]) == (True, True, 3, 3)
    assert loss["mismatches"] == [] and (loss["dtype"], loss["near_tie_bound"]) == ("bfloat16", 0.5)
    assert summary["speedup"] is not None and (out / "baseline_outputs.jsonl").is_file()


def test_a_near_tie_is_reported_and_a_divergence_fails_the_lossless_check(tmp_path, capsys):
    """Plain decoding's answer to q1's second turn differs in its last token. With a top-2 margin of
    0.01 there it is a bfloat16 near-tie (bound 0.5): reported, the run stands. With a margin of 5
    it is a divergence: the run fails (exit 3) and keeps its summary."""
    summary, out, engines = fake_run(tmp_path, "baseline=true", "runner.diverge=['q1#1']", "runner.near_ties=['q1#1']")
    outputs = {
        (r["request_id"], r["turn"]): r["token_ids"]
        for r in map(json.loads, (out / "outputs.jsonl").read_text().splitlines())
    }
    last = len(outputs[("q1", 1)]) - 1
    loss = summary["lossless"]
    assert (loss["identical"], loss["n_near_ties"], loss["n_divergences"], loss["mismatched"]) == (
        False,
        1,
        0,
        ["q1#1"],
    )
    assert loss["mismatches"] == [
        {
            "request_id": "q1",
            "turn": 1,
            "batch_size": 2,
            "first_divergence": last,
            "top2_margin": 0.01,
            "classification": "near_tie",
        }
    ]
    # the margins come from a plain engine asked for top-2 log-probabilities up to that token
    assert engines[-1] is None
    assert "1 numerical near-tie(s)" in capsys.readouterr().out
    with pytest.raises(
        MeasurementError,
        match=r"lossless check failed: 1 greedy output\(s\) diverge from plain "
        rf"decoding beyond a bfloat16 near-tie \(e.g. q1 turn 1 at output token {last}, "
        r"top-2 margin 5, bound 0.5\)",
    ) as failure:
        fake_run(tmp_path, "baseline=true", "force=true", "runner.diverge=['q1#1']")
    assert exit_status(failure.value) == 3
    kept = json.loads((out / "summary.json").read_text())["lossless"]
    assert kept["n_divergences"] == 1 and kept["mismatches"][0]["classification"] == "divergence"


def test_counter_mismatch_fails_the_run_and_keeps_records(tmp_path):
    with pytest.raises(MeasurementError, match="do not sum to the engine's speculative counters"):
        fake_run(tmp_path, counter_error=1)
    out = tmp_path / "run"
    assert (out / "steps.parquet").is_file() and not (out / "summary.json").exists()


def test_a_finished_run_is_skipped_and_a_killed_one_rerun(tmp_path):
    first, out, engines = fake_run(tmp_path)
    again, _, engines_again = fake_run(tmp_path)
    assert engines_again == [] and again == json.loads((out / "summary.json").read_text())
    # killed before summary.json was written: the job runs again
    (out / "summary.json").unlink()
    _, _, engines_after_kill = fake_run(tmp_path)
    assert len(engines_after_kill) == 1 and (out / "summary.json").is_file()
    _, _, forced = fake_run(tmp_path, "force=true")
    assert len(forced) == 1


def test_a_forced_rerun_that_fails_leaves_the_earlier_result_whole(tmp_path):
    fake_run(tmp_path)
    out = tmp_path / "run"
    before = {name: (out / name).read_bytes() for name in ("summary.json", "steps.parquet", "stamp.json")}
    # records that do not add up, and an engine that dies at its first request
    with pytest.raises(MeasurementError, match="do not sum to the engine's speculative counters"):
        fake_run(tmp_path, "force=true", counter_error=1)
    with pytest.raises(MeasurementError, match="the measurement failed: RuntimeError: fake engine: scripted failure"):
        fake_run(tmp_path, "force=true", "runner.fail_on=q1")
    assert {name: (out / name).read_bytes() for name in before} == before
    # the failed attempt's files are kept beside it, for inspection
    assert (out / "failed_attempt" / "error.log").is_file() and not (out / "failed_attempt" / "summary.json").exists()


def test_a_corrupt_summary_is_measured_again_and_said_so(tmp_path, capsys):
    _, out, _ = fake_run(tmp_path)
    (out / "summary.json").write_text('{"schema_version": 3, "al": ')
    _, _, engines = fake_run(tmp_path)
    assert len(engines) == 1 and "summary.json is unreadable" in capsys.readouterr().err
    assert read_summary(out).al == pytest.approx(1 + 13 / 7)


def test_a_target_changed_in_place_is_measured_again(tmp_path, capsys):
    fake_run(tmp_path)
    # new weights under the same path, as a nightly's target.model=/models/target-latest gets them
    (tmp_path / "target" / "model.safetensors").write_bytes(b"fine-tuned weights")
    _, _, engines = fake_run(tmp_path)
    assert len(engines) == 1 and "measured on other content (target changed since)" in capsys.readouterr().err
    _, _, engines = fake_run(tmp_path)
    assert engines == []


def test_a_second_process_is_refused_naming_the_holder(tmp_path):
    from evals.pipeline.run_dir import claimed

    with claimed(tmp_path / "run"):
        with pytest.raises(ConfigError, match=rf"run is being measured by another process \(pid {os.getpid()}\)"):
            fake_run(tmp_path)


def test_a_run_refused_before_measuring_leaves_no_dir(tmp_path):
    with pytest.raises(ConfigError, match="d=0"):
        fake_run(tmp_path, "d=0")
    assert not (tmp_path / "run").exists()


def test_a_run_dir_holding_another_configuration_is_not_overwritten(tmp_path):
    fake_run(tmp_path)
    with pytest.raises(ConfigError, match="already holds a finished run of a different configuration; force=true"):
        fake_run(tmp_path, "d=2")


def test_a_run_writes_its_acceptance_profile_for_vllms_synthetic_sampler(tmp_path):
    from reports.profile import profile

    summary, out, _ = fake_run(tmp_path)
    profiles = {p["domain"]: p for p in json.loads((out / "speculation_profile.json").read_text())["profiles"]}
    assert set(profiles) == {"all", *summary["by_domain"]}
    whole = profiles["all"]
    assert (whole["drafter"], whole["d"], whole["al"]) == ("ngram", D, pytest.approx(summary["al"]))
    assert whole["marginal"] == pytest.approx(summary["per_position_acceptance"])
    assert whole["conditional"] == pytest.approx(summary["conditional_acceptance"])
    for domain, p in profiles.items():
        assert 1 + sum(p["marginal"]) == pytest.approx(p["al"])
        assert p["al"] == pytest.approx(summary["al"] if domain == "all" else summary["by_domain"][domain]["al"])
        assert p["vllm_speculative_config"] | {"synthetic_acceptance_rates": None} == {
            "method": "custom_class",
            "model": "runners.zero_cost_proposer.ZeroCostProposer",
            "num_speculative_tokens": D,
            "rejection_sample_method": "synthetic",
            "synthetic_acceptance_rates": None,
        }
        assert p["vllm_speculative_config"]["synthetic_acceptance_rates"] == p["marginal"]
        # the keys of Model-Optimizer's proposed speculation_profile.json
        assert (p["num_speculative_tokens"], p["mean_accept_length"]) == (p["d"], p["al"])
        assert p["marginal_accept_rates"] == p["marginal"]
        assert p["conditional_accept_rates"] == [c or 0.0 for c in p["conditional"]]
    # step records that accept more than they drafted are no profile
    bad = pd.DataFrame({"request_id": ["a", "a"], "num_accepted": [4, 1], "num_drafted": [3, 3]})
    with pytest.raises(CorruptRecord, match="is not a profile of AL"):
        profile("ngram", 3, "all", bad)


def test_unset_engine_keys_are_fitted_to_the_target_and_said_so(tmp_path, capsys):
    """A 2,048-token target runs without engine.max_model_len (the default 4096 does not fit it), in
    the dtype it was saved in; the stamp and the terminal say so."""
    write_checkpoint(tmp_path / "target", max_position_embeddings=2048, torch_dtype="float16")
    rows = [{"question_id": "q0", "category": "coding", "turns": ["task"]}]
    summary = run(
        compose_run(*fake_overrides(tmp_path, rows), "drafter=ngram"), tmp_path / "run", progress=lambda label: None
    )
    fitted = json.loads((tmp_path / "run" / "stamp.json").read_text())["fitted_defaults"]
    assert (
        fitted["engine.max_model_len"]["value"] == 2048
        and "max_position_embeddings=2048" in fitted["engine.max_model_len"]["why"]
    )
    assert fitted["engine.dtype"] == {
        "value": "float16",
        "default": "bfloat16",
        "why": "the dtype target.model was saved in",
    }
    err = capsys.readouterr().err
    assert "engine.max_model_len=2048: the target's context window" in err and "engine.dtype=float16" in err
    assert summary.lossless is None and summary.n_requests == 1
    # engine=gpu's larger default window is fitted the same way, not imposed on a shorter target
    cfg = compose_run(*fake_overrides(tmp_path, rows), "drafter=ngram", "engine=gpu")
    run(cfg, tmp_path / "gpu", progress=lambda label: None)
    fitted = json.loads((tmp_path / "gpu" / "stamp.json").read_text())["fitted_defaults"]["engine.max_model_len"]
    assert (fitted["value"], fitted["default"]) == (2048, 8192)
