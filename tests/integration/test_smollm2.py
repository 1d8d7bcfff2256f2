"""The embedded default target, SmolLM2-135M-Instruct, through real vLLM on CPU."""

from __future__ import annotations

import pytest

from tests.integration.conftest import measure, requests_of, steps_of

D = 3


def test_ngram_on_the_sample_set_reports_every_domain_and_is_lossless(tmp_path):
    out = tmp_path / "smollm2"
    summary = measure(
        out, "drafter=ngram", f"d={D}", "dataset.num_requests=8", "sampling.max_tokens=64",
        "baseline=true", "engine.dtype=float32",
    )
    requests = requests_of(out)
    assert set(summary["by_domain"]) == set(requests.domain)
    assert len(summary["by_domain"]) == 8  # one prompt from each of the sample set's domains
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
