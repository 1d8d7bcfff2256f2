"""The embedded default target, SmolLM2-135M-Instruct, through real vLLM on CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reports.explain import explain
from speclens.file_formats.run_files import read_outputs
from tests.integration.conftest import measure, requests_of, steps_of

D = 3


def test_ngram_on_the_sample_set_reports_every_domain_and_is_lossless(smollm2_ngram):
    out, summary = smollm2_ngram.out, smollm2_ngram.summary
    requests = requests_of(out)
    assert set(summary["by_domain"]) == set(requests.domain)
    # one prompt from each of the 9 source categories; MT-Bench coding and HumanEval share `coding`
    assert set(requests.category) == {
        "coding",
        "extraction",
        "humaneval",
        "humanities",
        "math",
        "reasoning",
        "roleplay",
        "stem",
        "writing",
    }
    assert summary["by_domain"]["coding"]["n_requests"] == 2 and len(summary["by_domain"]) == 8
    assert 1 < summary["al"] < 1 + D
    lo, hi = summary["al_ci95"]
    assert lo <= summary["al"] <= hi
    counters = summary["vllm_counters"]
    assert summary["al"] == pytest.approx(1 + counters["num_accepted_tokens"] / counters["num_drafts"])
    assert int(steps_of(out).num_accepted.sum()) == counters["num_accepted_tokens"]
    # n-gram leaves steps undrafted, so tokens per target step is below AL
    assert 1 < summary["tokens_per_step"] < summary["al"]
    assert summary["lossless"]["identical"] is True
    assert summary["speedup"] > 0


def test_the_outputs_say_why_they_ended_and_the_figures_beside_al_follow_from_the_counters(smollm2_ngram):
    out, summary = smollm2_ngram.out, smollm2_ngram.summary
    eos = json.loads((Path(json.loads((out / "stamp.json").read_text())["target_dir"]) / "config.json").read_text())[
        "eos_token_id"
    ]
    rows = read_outputs(out / "outputs.jsonl")
    assert {r["finish_reason"] for r in rows} <= {"stop", "length"} and len(rows) > 9
    for r in rows:  # vLLM keeps the EOS it stopped at; max_tokens=64 cuts the rest
        assert r["token_ids"][-1] == eos if r["finish_reason"] == "stop" else len(r["token_ids"]) == 64
        assert len(r["prompt_digest"]) == 16
    requests = requests_of(out)
    assert sorted(requests.finish_reason) == sorted(r["finish_reason"] for r in rows)
    counters = summary["vllm_counters"]
    al = 1 + counters["num_accepted_tokens"] / counters["num_drafts"]
    peers = summary["peer_figures"]
    assert peers["vllm_bench_serve"]["spec_decode_acceptance_length"] == pytest.approx(al)
    assert peers["aiperf"]["spec_decode_token_weighted_acceptance_length"] == pytest.approx(al)
    # every token a turn's passes made past its output was an accepted draft or the last step's bonus
    made_past = int((requests.target_steps + requests.num_accepted - requests.output_tokens).sum())
    cut = summary["accepted_tokens_cut"]
    assert made_past - len(requests) <= cut <= made_past
    assert summary["al_emitted"] == pytest.approx(1 + (counters["num_accepted_tokens"] - cut) / counters["num_drafts"])
    # specdec_bench's figure counts the prefill and the undrafted steps: below AL on n-gram's sparse drafts
    assert 1 < peers["specdec_bench"]["Average_AL"] < summary["al"]


def test_ngram_over_a_2k_long_context_set_reports_its_domain(tmp_path):
    out = tmp_path / "long"
    summary = measure(
        out,
        "drafter=ngram",
        f"d={D}",
        "dataset=long_context",
        "dataset.input_tokens=2000",
        "dataset.tier=low_entropy",
        "dataset.num_requests=2",
        "sampling.max_tokens=64",
        "engine.max_model_len=4096",
    )
    assert set(summary["by_domain"]) == {"low_entropy@2k"}
    figures = summary["by_domain"]["low_entropy@2k"]
    assert figures["n_requests"] == 2 and figures["n_steps"] > 0 and figures["al"] == summary["al"] > 1
    requests = requests_of(out)
    assert list(requests.prompt_tokens) == [2000, 2000]
    # every drafted step starts past the 2,000-token prompt
    assert (steps_of(out).position > 2000).all()


def test_a_default_run_shows_its_progress_and_table_and_keeps_vllms_output_in_engine_log(tmp_path, smollm2_ngram):
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    out = tmp_path / "quiet"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "evals.run",
            "drafter=ngram",
            f"d={D}",
            "dataset.num_requests=2",
            "sampling.max_tokens=16",
            "engine.cpu_kvcache_space_gib=1",
            f"hydra.run.dir={out}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(repo)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = proc.stdout + proc.stderr
    assert "speclens: drafter=ngram d=3" in proc.stdout and f"results: {out}" in proc.stdout
    for noise in ("WARNING", "INFO", "FutureWarning", "Traceback", "Triton"):
        assert noise not in shown, f"{noise!r} reached the terminal:\n{shown[-2000:]}"
    assert "vllm" in (out / "engine.log").read_text().lower()
    # reports.explain on this run and the shared one (float32, more prompts and tokens): parts that sum
    report = explain(out, smollm2_ngram.out)
    assert report["difference"] == pytest.approx(report["al_b"] - report["al_a"])
    assert sum(report["parts"].values()) == pytest.approx(report["difference"], abs=1e-12)
    assert report["prompts"]["only_in_a"] == 0 and report["prompts"]["only_in_b"] > 0
    differ = set(report["settings_differ"])
    assert "config.sampling.max_tokens" in differ
    # the default dtype is fitted to the CPU (float32 where it lacks AVX-512 BF16): a row exactly when they differ
    dtypes = [json.loads((run / "summary.json").read_text())["numerics"]["dtype"] for run in (out, smollm2_ngram.out)]
    assert ("numerics.dtype" in differ) == (dtypes[0] != dtypes[1])
