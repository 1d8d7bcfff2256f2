"""`python -m evals.load` through real vLLM servers on CPU (SmolLM2, float32, n-gram d=3): a
two-rung ladder, each arm on a server speclens launches and stops (issue 67)."""

from __future__ import annotations

import json

import pandas as pd

from evals.load import main as load_main
from speclens.file_formats.load_file import LOAD_REQUESTS_FILE, read_load_file
from tests.integration.test_server import servers_launched_here

RATES = [0.5, 2.0]
LADDER = [
    "runner=server",
    "drafter=ngram",
    "d=3",
    f"request_rates=[{','.join(map(str, RATES))}]",
    "stage.requests=4",
    "stage.warmup_requests=1",
    "dataset=mt_bench",
    "dataset.num_requests=4",
    "sampling.max_tokens=32",
    "engine.max_model_len=1024",
    "engine.cpu_kvcache_space_gib=1",
    "engine.dtype=float32",
    # a third server start for the schedule arm is left to the fake engine's tests
    "schedule_arm=false",
]


def test_a_real_ladder_measures_each_arm_at_each_rate_through_its_own_server(tmp_path, capsys):
    assert servers_launched_here() == []
    out = tmp_path / "ladder"
    assert load_main([*LADDER, f"hydra.run.dir={out}"]) == 0
    assert servers_launched_here() == []  # every server it launched is stopped
    found = read_load_file(out)
    assert found.complete
    assert sorted((s.arm, s.request_rate) for s in found.stages) == sorted(
        (arm, rate) for arm in ("plain", "static") for rate in RATES
    )
    for stage in found.stages:
        assert stage.n_requests == 4 and stage.achieved_rate > 0 and stage.output_tokens_per_s > 0
        assert 0 < stage.ttft_ms.p50 < stage.latency_s.p50 * 1000 and stage.tpot_ms.p50 > 0
        provenance = stage.provenance
        assert (provenance.source, provenance.runner, provenance.engine, provenance.dtype) == (
            "measured",
            "server",
            "vllm",
            "float32",
        )
        assert provenance.engine_version  # the server's own, from /version
        # the server's gauges, read through the stage: its KV cache's use and the requests it held
        assert stage.kv_cache_usage is not None and 0 <= stage.kv_cache_usage <= 1 and stage.mean_in_flight >= 0
    for stage in (s for s in found.stages if s.arm == "static"):
        # AL from the server's per-request metrics: between no draft accepted and all D
        assert 1.0 <= stage.al <= 4.0 and stage.tokens_per_step >= 1.0
    requests = pd.read_parquet(out / LOAD_REQUESTS_FILE)
    # the same prompts at the same seeded times on both arms
    by_arm = {arm: rows.sort_values(["request_rate", "sent_s"]) for arm, rows in requests.groupby("arm")}
    assert list(by_arm["plain"].sent_s) == list(by_arm["static"].sent_s)
    assert list(by_arm["plain"].request_id) == list(by_arm["static"].request_id)
    # greedy float32: speculation is lossless, so both arms generate the same number of tokens
    assert list(by_arm["plain"].output_tokens) == list(by_arm["static"].output_tokens)
    overall = next(row for row in found.crossover if row.domain == "all")
    assert overall.reached or overall.throughput_lead_at_top != 0
    policy = json.loads((out / "serve.json").read_text())["load_policy"]
    assert policy["drafter"] == "ngram" and policy["d"] == 3
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("load policy (measured, poisson arrivals): ")
    # each arm's server log is kept in the ladder's dir
    log = (out / "server.log").read_text()
    assert (
        "the server of the ladder's plain decoding pass" in log and "the server of the ladder's ngram d=3 pass" in log
    )
