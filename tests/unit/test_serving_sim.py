"""Simulated continuous batching (speclens/gpu_model/serving_sim.py) against hand-computed timelines, and the
ladder `evals.whatif request_rates=` predicts from it against the step-cost model it is built on."""

from __future__ import annotations

import json

import pytest

from speclens.file_formats.whatif_file import read_whatif_file
from speclens.gpu_model.serving_sim import SimulatedEngine, simulate


def constant(ms: float):
    return lambda decoding, prefill: ms


def test_a_lone_request_prefills_then_decodes_its_tokens_per_step():
    engine = SimulatedEngine(constant(10.0), tokens_per_step=2.0, max_num_seqs=4, max_batched_tokens=64, kv_capacity=4)
    (served,) = simulate([0.0], input_tokens=16, output_tokens=9, engine=engine)
    # one prefill step samples the first token (10 ms), then 4 steps of 2 tokens reach 9
    assert served.ttft_s == pytest.approx(0.010) and served.latency_s == pytest.approx(0.050)
    assert served.tpot_s == pytest.approx(0.040 / 8) and served.chunk_gaps_s == pytest.approx((0.01,) * 4)


def test_a_full_engine_queues_and_a_long_prompt_is_prefilled_in_chunks():
    one_slot = SimulatedEngine(constant(10.0), 1.0, max_num_seqs=1, max_batched_tokens=64, kv_capacity=8)
    first, second = simulate([0.0, 0.0], 16, 3, one_slot)
    assert first.latency_s == pytest.approx(0.030) and second.latency_s == pytest.approx(0.060)
    # the KV cache holding one request at a time queues just the same
    by_memory = SimulatedEngine(constant(10.0), 1.0, max_num_seqs=8, max_batched_tokens=64, kv_capacity=1)
    assert [r.latency_s for r in simulate([0.0, 0.0], 16, 3, by_memory)] == pytest.approx([0.030, 0.060])
    # 100 prompt tokens through 64 a step: two prefill steps before the first token
    chunked = SimulatedEngine(constant(10.0), 1.0, max_num_seqs=8, max_batched_tokens=64, kv_capacity=8)
    (alone,) = simulate([0.5], 100, 2, chunked)
    assert alone.sent_s == 0.5 and alone.ttft_s == pytest.approx(0.020) and alone.latency_s == pytest.approx(0.030)


def test_the_step_time_follows_the_batch_it_carries():
    seen = []

    def cost(decoding, prefill):
        seen.append((decoding, prefill))
        return 10.0 + decoding + prefill / 10

    engine = SimulatedEngine(cost, 1.0, max_num_seqs=8, max_batched_tokens=64, kv_capacity=8)
    simulate([0.0, 0.0], 20, 2, engine)
    # both prefill together (40 tokens), then both decode their second token in one step
    assert seen == [(0, 40), (2, 0)]


def test_whatif_predicts_a_ladder_whose_lone_requests_step_as_the_model_says(tmp_path, capsys):
    from evals.whatif import main
    from speclens.gpu_model.gpus import gpu_named
    from speclens.gpu_model.model_shape import shape_of
    from speclens.gpu_model.step_cost import Hardware, verify_step
    from tests.unit.test_whatif import SMALL, write_config

    config = {**SMALL, "num_hidden_layers": 16}
    target = write_config(tmp_path / "target", config)
    args = [f"target.model={target}", "gpu=h200_sxm", "drafter=eagle3", "acceptance=[0.8,0.6,0.5]", "d=3"]
    rates = "request_rates=[0.01,2000]"
    assert main([*args, rates, "input_tokens=256", "output_tokens=64", f"out={tmp_path / 'out'}"]) == 0
    result = read_whatif_file(tmp_path / "out")
    rows = {(s["arm"], s["request_rate"]): s for s in result["ladder"]}
    assert len(result["ladder"]) == 4 and {s["provenance"]["source"] for s in result["ladder"]} == {"predicted"}
    # one request at a time: plain decoding's TPOT is the model's plain step at B=1
    hw = Hardware(gpu_named("h200_sxm"))
    plain_step = verify_step(shape_of(config, "target.model"), 1, 0, 256 + 32, hw).total_ms
    assert rows[("plain", 0.01)]["tpot_ms"]["p50"] == pytest.approx(plain_step, rel=1e-6)
    point = next(p for p in result["points"] if p["d"] == 3 and p["batch_size"] == 1)
    spec = rows[("static", 0.01)]
    assert spec["al"] == pytest.approx(point["tokens_per_step"])
    # 2,000 requests/s is far past what one GPU serves of these: both arms saturate
    assert rows[("plain", 2000.0)]["saturated"] and rows[("static", 2000.0)]["saturated"]
    (crossover,) = result["crossover"]
    assert crossover["drafter"] == "eagle3" and crossover["d"] == 3
    printed = capsys.readouterr().out
    assert "predicted ladder on h200_sxm x1 (256 input, 64 output tokens, poisson arrivals" in printed
    assert json.loads((tmp_path / "out" / "whatif.json").read_text())["ladder_setting"]["request_rates"] == [
        0.01,
        2000.0,
    ]


@pytest.mark.parametrize(
    "override, said",
    [
        ("request_rates=[4,1]", "give the rates in increasing order"),
        ("request_rates=2", "a list of rates in requests per second"),
        ("input_tokens=0", "input_tokens=0: a whole number >= 1"),
        ("stage.requests=100000", "stage.requests=100000: at most 10000 requests a stage"),
        ("arrivals=bursty", "arrivals=bursty: one of poisson, constant"),
    ],
)
def test_a_bad_predicted_ladder_is_one_line(tmp_path, capsys, override, said):
    from evals.whatif import main
    from tests.unit.test_whatif import SMALL, write_config

    target = write_config(tmp_path / "target", {**SMALL, "num_hidden_layers": 16})
    args = [f"target.model={target}", "gpu=h200_sxm", "drafter=eagle3", "al=2.0", "d=3", "request_rates=[1,2]"]
    assert main([*args, override, f"out={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("speclens: error: ") and said in err[0]
    assert not (tmp_path / "out").exists()
