"""The step-cost model's terms against hand-computed values, the properties the guidelines rest on,
and `evals.whatif` end to end (acceptance in, whatif.json out, bad input in one line)."""

from __future__ import annotations

import json
import math
from dataclasses import fields, replace
from pathlib import Path

import pytest

from speclens.errors import ConfigError
from speclens.file_formats.whatif_file import read_whatif_file
from speclens.gpu_model.draft_cost import draft_ms, head_shape
from speclens.gpu_model.gpus import gpu_named
from speclens.gpu_model.model_shape import shape_of
from speclens.gpu_model.step_cost import (
    Efficiency,
    Hardware,
    attention_term,
    communication_term,
    experts_touched,
    forward,
    gemm_term,
    memory_needed_gb,
    verify_step,
    weight_bytes,
)
from speclens.gpu_model.whatif import Drafting, best, point, schedule

# One layer of a small dense model: 8 query heads over 2 KV heads (G = 4), head_dim 128.
SMALL = {
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "num_hidden_layers": 1,
    "vocab_size": 1000,
    "head_dim": 128,
}
# 2 q/o + 2 k/v projections, the gated MLP, the LM head
EAGLE3_HEAD = "LlamaForCausalLMEagle3"  # what vLLM's EAGLE-3 heads name themselves
CAUSAL_LM = {"architectures": ["LlamaForCausalLM"]}
SMALL_PARAMS = 1024 * 1024 * 2 + 2 * 1024 * 256 + 3 * 1024 * 4096 + 1000 * 1024
# A made-up GPU: 1 TB/s, 1,000 TFLOPS (an H100's ratio of FLOPs to bytes is 295, a 128-row
# attention tile's 128), every efficiency 1, no overhead.
# The roofline alone: no overheads (fixed, per token, per MoE layer, per draft pass or lookup).
IDEAL = Efficiency(**{f.name: 0.0 for f in fields(Efficiency)} | {"mem": 1.0, "compute": 1.0, "link": 1.0})


def hardware(tp: int = 1, **eff) -> Hardware:
    gpu = gpu_named("custom", {"bf16_tflops": 1000.0, "hbm_tb_s": 1.0, "memory_gb": 80.0, "nvlink_gb_s": 400.0})
    return Hardware(gpu, tp=tp, eff=replace(IDEAL, **eff))


def test_the_gemms_read_every_weight_once_until_the_tokens_make_them_compute_bound():
    shape = shape_of(SMALL)
    assert shape.active_params() == SMALL_PARAMS == 16_228_352
    # bf16: 2 bytes a weight at 1 TB/s
    assert gemm_term(shape, 1, hardware()) == (pytest.approx(SMALL_PARAMS * 2 / 1e12 * 1e3), "weights")
    # 2 FLOPs a weight and token at 1,000 TFLOPS overtake the read above 1,000 tokens
    assert gemm_term(shape, 1000, hardware())[1] == "weights"
    assert gemm_term(shape, 2000, hardware()) == (pytest.approx(2 * SMALL_PARAMS * 2000 / 1e15 * 1e3), "compute")


def test_attention_reads_each_kv_head_once_per_128_row_tile():
    shape = shape_of(SMALL)
    # 3 requests over 1,000 cached tokens: K and V of 2 heads, 128 dims, 2 bytes, one tile while G·(1+D) <= 128
    one_tile = 3 * 2 * 1000 * 2 * 128 * 2
    assert attention_term(shape, 3, 1, 1000, hardware()) == (pytest.approx(one_tile / 1e12 * 1e3), "kv")
    assert attention_term(shape, 3, 32, 1000, hardware())[0] == pytest.approx(one_tile / 1e12 * 1e3)  # G·32 = 128
    assert attention_term(shape, 3, 33, 1000, hardware())[0] == pytest.approx(2 * one_tile / 1e12 * 1e3)


def test_verification_is_flat_in_d_inside_one_tile_and_steps_up_where_it_crosses_one():
    shape = shape_of({**SMALL, "num_hidden_layers": 4})
    hw = hardware(overhead_ms=0.1)
    plain = verify_step(shape, 1, 0, 8192, hw).total_ms
    # memory-bound: D = 1..31 keep G·(1+D) = 4·(1+D) <= 128 rows, and cost what a plain step costs
    assert [verify_step(shape, 1, d, 8192, hw).total_ms for d in (1, 7, 31)] == [pytest.approx(plain)] * 3
    # D = 32: a second tile, the KV cache read twice
    one_tile = attention_term(shape, 1, 1, 8192, hw)[0]
    assert verify_step(shape, 1, 32, 8192, hw).total_ms == pytest.approx(plain + one_tile)
    # the per-token overhead adds 15 µs for every one of the B·(1+D) tokens, inside a tile or across one
    per_token = hardware(overhead_ms=0.1, token_us=15.0)
    for b, d in ((1, 0), (1, 7), (3, 31), (1, 32), (4, 40)):
        assert verify_step(shape, b, d, 8192, per_token).total_ms == pytest.approx(
            verify_step(shape, b, d, 8192, hw).total_ms + 0.015 * b * (1 + d)
        )


def test_more_query_heads_per_kv_head_move_guideline_2s_knee_to_a_smaller_d():
    def knee(kv_heads: int) -> int:
        shape = shape_of({**SMALL, "num_attention_heads": 16, "num_key_value_heads": kv_heads})
        flat = verify_step(shape, 1, 0, 8192, hardware()).total_ms
        return next(d for d in range(1, 200) if verify_step(shape, 1, d, 8192, hardware()).total_ms > flat * 1.01)

    # G = 16/kv: the knee is the first D with G·(1+D) > 128, i.e. D = 128/G
    assert [knee(kv) for kv in (1, 2, 4, 8, 16)] == [8, 16, 32, 64, 128]


def test_a_plain_step_is_a_speedup_of_one_and_a_free_perfect_draft_of_one_plus_d():
    shape = shape_of(SMALL)
    hw = hardware(overhead_ms=0.2)
    plain = point(Drafting("ngram", {3: 2.5}), 0, 4, 512, shape, hw)
    assert plain["speedup"] == 1.0 and plain["t_verify_ms"] == plain["t_plain_ms"] and plain["t_draft_ms"] == 0.0
    free = point(
        Drafting("ngram", {3: 4.0}), 3, 1, 512, shape, replace(hw, eff=replace(hw.eff, lookup_us_per_request=0))
    )
    assert free["speedup"] == pytest.approx(4.0)  # memory-bound, one tile: verifying 4 tokens costs one
    assert free["t_step_ms"] == free["t_verify_ms"] + free["t_draft_ms"]


def test_moe_weights_read_grow_with_the_experts_the_tokens_route_to():
    assert experts_touched(8, 2, 1) == pytest.approx(2.0)
    assert experts_touched(8, 2, 2) == pytest.approx(8 * (1 - 0.75**2))
    assert experts_touched(64, 4, 10_000) == pytest.approx(64.0)
    moe = shape_of({**SMALL, "num_local_experts": 8, "num_experts_per_tok": 2})
    expert = 3 * 1024 * 4096
    assert moe.active_params() == SMALL_PARAMS - expert + 1024 * 8 + 2 * expert  # router, two experts
    one, many = gemm_term(moe, 1, hardware())[0], gemm_term(moe, 64, hardware())[0]
    assert many - one == pytest.approx((experts_touched(8, 2, 64) - 2) * expert * 2 / 1e12 * 1e3)


def test_llama4_interleaves_moe_layers_with_dense_ones_and_a_shared_expert():
    llama4 = {**SMALL, "num_hidden_layers": 4, "intermediate_size_mlp": 8192, "num_local_experts": 8}
    shape = shape_of({**llama4, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2})
    assert (shape.moe_layers, shape.dense_layers, shape.intermediate, shape.shared_intermediate) == (2, 2, 8192, 4096)
    expert = 3 * 1024 * 4096  # routed and shared experts are intermediate_size wide
    attention = 1024 * 1024 * 2 + 2 * 1024 * 256
    dense_mlp = 3 * 1024 * 8192
    per_moe_layer = expert + 1024 * 8  # the shared expert and the router
    assert shape.dense_params() == 4 * attention + 2 * dense_mlp + 2 * per_moe_layer + 1000 * 1024
    assert shape.active_params() == shape.dense_params() + 2 * expert  # one routed expert per token
    every = shape_of({**llama4, "num_experts_per_tok": 1, "interleave_moe_layer_step": 1})
    assert (every.moe_layers, every.dense_layers, every.shared_intermediate) == (4, 0, 4096)
    # its RoPE layers attend within chunks: three of every four (no_rope_layers' default)
    chunked = shape_of({**llama4, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "attention_chunk_size": 64})
    assert (chunked.sliding_layers, chunked.sliding_window) == (3, 64)
    assert chunked.attended_tokens(1000) == 1000 + 3 * 64
    given = {"attention_chunk_size": 64, "no_rope_layers": [1, 0, 0, 1]}
    assert shape_of({**llama4, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, **given}).sliding_layers == 2


def test_each_moe_layer_costs_a_fixed_time_per_forward_beside_its_weight_reads():
    moe = shape_of({**SMALL, "num_hidden_layers": 4, "num_local_experts": 8, "num_experts_per_tok": 2})
    dense = shape_of({**SMALL, "num_hidden_layers": 4})
    hw = hardware(moe_layer_us=25.0)
    assert forward(moe, 1, 1, 512, hw, 0.1).overhead_ms == pytest.approx(0.1 + 4 * 0.025)
    assert forward(dense, 1, 1, 512, hw, 0.1).overhead_ms == pytest.approx(0.1)
    deepseek_like = shape_of({**SMALL, "num_hidden_layers": 4, "num_local_experts": 8, "num_experts_per_tok": 2})
    deepseek_like = replace(deepseek_like, dense_layers=1)  # first_k_dense_replace: its dense layers cost none
    assert forward(deepseek_like, 1, 1, 512, hw, 0.0).overhead_ms == pytest.approx(3 * 0.025)


def test_sliding_window_layers_read_at_most_their_window():
    layers = {**SMALL, "num_hidden_layers": 2, "sliding_window": 128}
    shape = shape_of({**layers, "layer_types": ["sliding_attention", "full_attention"]})
    assert (shape.sliding_layers, shape.sliding_window) == (1, 128)
    assert shape.attended_tokens(1000) == 1000 + 128 and shape.attended_tokens(100) == 200
    per_token = 2 * 2 * 128 * 2  # K and V of 2 KV heads, bf16
    assert attention_term(shape, 1, 1, 1000, hardware())[0] == pytest.approx(1128 * per_token / 1e12 * 1e3)
    # without layer_types every layer attends to the whole context (Qwen2's unused sliding_window)
    assert shape_of(layers).attended_tokens(1000) == 2000
    kv = memory_needed_gb(shape, 4, 1000, 0, hardware()) - memory_needed_gb(shape, 4, 0, 0, hardware())
    assert kv == pytest.approx(4 * 1128 * per_token / 1e9)
    with pytest.raises(ConfigError, match="layer_types names 1 layers"):
        shape_of({**layers, "layer_types": ["sliding_attention"]})


def test_experts_a_checkpoint_stores_in_four_bits_are_read_at_that_width():
    moe = {**SMALL, "num_local_experts": 8, "num_experts_per_tok": 2}
    mxfp4 = shape_of({**moe, "quantization_config": {"quant_method": "mxfp4"}})
    assert (mxfp4.expert_weights, shape_of(moe).expert_weights) == ("mxfp4", None)
    # NVIDIA's NVFP4 checkpoints quantize attention too: not taken for the experts alone
    assert shape_of({**moe, "quantization_config": {"quant_algo": "NVFP4"}}).expert_weights is None
    expert = 3 * 1024 * 4096
    dense = shape_of(moe).dense_params()
    # one token: two experts at 4 bits and a scale per 32 (MXFP4), the rest at the weights= width
    assert weight_bytes(mxfp4, 1, hardware()) == pytest.approx(dense * 2 + 2 * expert * 0.53125)
    fp8 = replace(hardware(), gpu=replace(hardware().gpu, fp8_tflops=2000.0), weights="fp8")
    assert weight_bytes(mxfp4, 1, fp8) == pytest.approx(dense + 2 * expert * 0.53125)
    # expert_weights= overrides the checkpoint's: NVFP4's scale per 16
    assert weight_bytes(mxfp4, 1, replace(fp8, expert_weights="nvfp4")) == pytest.approx(dense + 2 * expert * 0.5625)
    # every expert held, at its width, with the rest and the untied embedding at 2 bytes
    held = (mxfp4.total_params() - 8 * expert) * 2 + 8 * expert * 0.53125
    assert memory_needed_gb(mxfp4, 1, 0, 0, hardware()) == pytest.approx(held / 1e9)
    with pytest.raises(ConfigError, match="weights=mxfp4: choose one of bf16, fp8"):
        replace(hardware(), weights="mxfp4")
    with pytest.raises(ConfigError, match="quantization_config='mxfp4' is not a JSON object"):
        shape_of({**moe, "quantization_config": "mxfp4"})


def test_mla_reads_one_latent_per_token_for_every_head():
    mla = shape_of(
        {
            **SMALL,
            "num_attention_heads": 16,
            "kv_lora_rank": 512,
            "qk_rope_head_dim": 64,
            "qk_nope_head_dim": 128,
            "v_head_dim": 128,
        }
    )
    assert (mla.mla, mla.kv_heads, mla.head_dim, mla.g) == (True, 1, 576, 16)
    assert mla.kv_bytes_per_layer_token() == 576 * 2
    # an EAGLE-3 head of its shape reads its first projections' 2h-wide input: the query's 16·192 and the latent's 576
    assert head_shape("eagle3", mla, None).extra_params == 3 * 1024 * 1024 + 1024 * (16 * 192 + 576)
    # 16 heads in one tile up to 1 + D = 8
    assert attention_term(mla, 1, 8, 1000, hardware())[0] == pytest.approx(1000 * 576 * 2 / 1e12 * 1e3)
    assert attention_term(mla, 1, 9, 1000, hardware())[0] == pytest.approx(2 * 1000 * 576 * 2 / 1e12 * 1e3)


def test_tensor_parallel_all_reduces_two_per_layer_over_one_direction_of_the_link():
    shape = shape_of(SMALL)
    # 4 GPUs, 10 tokens: 10 · 1024 · 2 bytes, ring 2·3/4 of it over 200 GB/s each way, 5 µs a call
    per_call = 5e-3 + 1.5 * 10 * 1024 * 2 / 200e9 * 1e3
    assert communication_term(shape, 10, hardware(tp=4, allreduce_us=5.0)) == pytest.approx(2 * per_call)
    assert communication_term(shape, 10, hardware(tp=1, allreduce_us=5.0)) == 0.0


class TableOps:
    """StepCostPoint tables as a stand-in: a GEMM costs m·n·k ps, an all-reduce 1 µs per 1,000 elements."""

    label = "stand-in tables"

    def __init__(self):
        self.gemms: list[tuple[int, int, int, str]] = []

    def gemm_ms(self, m, n, k, weights):
        self.gemms.append((m, n, k, weights))
        return m * n * k * 1e-9

    def allreduce_ms(self, elements, tp):
        return elements * 1e-6


def test_measured_tables_replace_the_target_gemms_and_all_reduces_and_nothing_else():
    shape = shape_of({**SMALL, "num_hidden_layers": 2})
    ops = TableOps()
    hw = replace(hardware(tp=2), ops=ops)
    ms, bound = gemm_term(shape, 4, hw)
    # each GPU's share of QKV (1024 + 2·256 outputs), O, gate-up, down per layer, then the LM head
    assert ops.gemms == [
        (4, 768, 1024, "bf16"),
        (4, 1024, 512, "bf16"),
        (4, 4096, 1024, "bf16"),
        (4, 1024, 2048, "bf16"),
        (4, 500, 1024, "bf16"),
    ]
    per_layer = 4 * (768 * 1024 + 1024 * 512 + 4096 * 1024 + 1024 * 2048) * 1e-9
    assert (
        ms == pytest.approx(2 * per_layer + 4 * 500 * 1024 * 1e-9) and bound == gemm_term(shape, 4, hardware(tp=2))[1]
    )
    assert communication_term(shape, 4, hw) == pytest.approx(2 * 2 * 4 * 1024 * 1e-6)
    # attention and drafting stay on the roofline; a MoE target's GEMMs too
    assert attention_term(shape, 4, 2, 512, hw) == attention_term(shape, 4, 2, 512, hardware(tp=2))
    head = head_shape("eagle3", shape, None)
    assert draft_ms("eagle3", 3, 4, 512, shape, head, hw) == draft_ms("eagle3", 3, 4, 512, shape, head, hardware(tp=2))
    moe = shape_of({**SMALL, "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 512})
    assert gemm_term(moe, 4, replace(hardware(), ops=TableOps())) == gemm_term(moe, 4, hardware())


def test_cost_model_aiconfigurator_without_its_extra_says_how_to_get_it(tmp_path, capsys, monkeypatch):
    import sys

    from evals.whatif import main

    monkeypatch.setitem(sys.modules, "aiconfigurator_core", None)  # not installed, whatever this machine has
    target = write_config(tmp_path / "target", SMALL)
    args = [f"target.model={target}", "gpu=h200_sxm", "drafter=ngram", "al=2.0", "d=3", "cost_model=aiconfigurator"]
    assert main([*args, f"out={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "speclens: error: cost_model=aiconfigurator needs aiconfigurator-core: pip install 'speclens[whatif]' (aiconfigurator-core 0.12)."
    ]


def test_drafting_costs_follow_each_mechanisms_architecture():
    target = shape_of({**SMALL, "num_hidden_layers": 8})
    hw = hardware(lookup_us_per_request=20.0)
    assert draft_ms("ngram", 3, 8, 512, target, None, hw) == pytest.approx(8 * 20e-3)
    head = head_shape("eagle3", target, None)
    # the 3h → h fusion layer and the QKV's second h of input: 8 query and 2 KV heads of 128
    assert (head.layers, head.vocab, head.extra_params) == (1, 32000, 3 * 1024 * 1024 + 1024 * 12 * 128)
    one_pass = forward(head, 8, 1, 512, hw, 0.0).total_ms
    # serial passes: the first over the B·(1+D) verified tokens, three more at B
    first = forward(head, 8, 5, 512, hw, 0.0).total_ms
    assert draft_ms("eagle3", 4, 8, 512, target, head, hw) == pytest.approx(first + 3 * one_pass)
    assert draft_ms("eagle3", 1, 8, 512, target, head, hw) == pytest.approx(forward(head, 8, 2, 512, hw, 0.0).total_ms)
    # at B = 512 the first pass's 2,560 tokens turn the head's GEMMs compute-bound: more than a pass at B
    assert draft_ms("eagle3", 4, 512, 512, target, head, hw) > 4 * forward(head, 512, 1, 512, hw, 0.0).total_ms
    draft = shape_of({**SMALL, "num_hidden_layers": 2})
    parallel = draft_ms("dflash", 4, 8, 512, target, draft, hw)
    assert parallel < 4 * draft_ms("draft_model", 1, 8, 512, target, draft, hw)  # one pass over B·D tokens
    assert draft_ms("eagle3", 0, 8, 512, target, head, hw) == 0.0


def test_best_takes_plain_decoding_where_no_draft_pays_and_the_schedule_follows_it():
    points = [
        {"drafter": "eagle3", "d": d, "batch_size": b, "context_len": 4096, "speedup": s, "fits": True, "bound": "kv"}
        for d, b, s in [(1, 1, 1.5), (3, 1, 2.0), (1, 64, 1.1), (3, 64, 0.9), (1, 256, 0.8), (3, 256, 0.7)]
    ]
    picks = [(p["batch_size"], p["drafter"], p["d"]) for p in best(points)]
    assert picks == [(1, "eagle3", 3), (64, "eagle3", 1), (256, "none", 0)]
    assert schedule(points, "eagle3", 4096) == [[1, 63, 3], [64, 255, 1], [256, 256, 0]]


def write_config(folder, config):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_whatif_writes_every_point_and_the_best_per_batch_size(tmp_path, capsys):
    from evals.whatif import main

    target = write_config(tmp_path / "target", {**SMALL, "num_hidden_layers": 16})
    args = [f"target.model={target}", "gpu=h200_sxm", "drafter=eagle3", "acceptance=[0.8,0.5,0.5]"]
    assert main([*args, "batch_sizes=[1,8]", "context_len=[512,2048]", f"out={tmp_path / 'out'}"]) == 0
    result = read_whatif_file(tmp_path / "out")
    assert result["gpu"]["name"] == "h200_sxm" and result["cost_model"] == "roofline"
    assert len(result["points"]) == 3 * 2 * 2  # D = 1..3, two B, two context lengths
    at = {(p["d"], p["batch_size"], p["context_len"]): p for p in result["points"]}
    assert [at[(d, 1, 512)]["al"] for d in (1, 2, 3)] == pytest.approx([1.8, 2.2, 2.4])  # 1 + 0.8, + 0.4, + 0.2
    for p in result["points"]:
        assert p["t_step_ms"] == pytest.approx(p["t_verify_ms"] + p["t_draft_ms"])
        assert p["speedup"] == pytest.approx(p["t_plain_ms"] * p["tokens_per_step"] / p["t_step_ms"])
    assert {(b["batch_size"], b["context_len"]) for b in result["best"]} == {(1, 512), (1, 2048), (8, 512), (8, 2048)}
    assert "written: " in capsys.readouterr().out


def test_whatif_reads_a_runs_speculation_profile(tmp_path):
    from evals.whatif import build

    target = write_config(tmp_path / "target", SMALL)
    profile = {"drafter": "ngram", "d": 3, "domain": "all", "segment": "all", "al": 1.9, "marginal": [0.5, 0.3, 0.1]}
    other = {**profile, "domain": "coding", "al": 2.5, "marginal": [0.8, 0.5, 0.2]}
    (tmp_path / "speculation_profile.json").write_text(json.dumps({"schema_version": 1, "profiles": [profile, other]}))
    result, out = build([str(tmp_path), f"target.model={target}", "gpu=b200", "batch_sizes=[4]"])
    assert out == tmp_path
    assert [p["al"] for p in result["points"]] == pytest.approx([1.5, 1.8, 1.9])
    result, _ = build([str(tmp_path), f"target.model={target}", "gpu=b200", "batch_sizes=[4]", "domain=coding"])
    assert [p["al"] for p in result["points"]] == pytest.approx([1.8, 2.3, 2.5])


def test_arch_overrides_apply_before_anything_is_derived(tmp_path):
    from evals.whatif import build

    target = write_config(tmp_path / "target", SMALL)
    args = [f"target.model={target}", "gpu=h100_sxm", "drafter=ngram", "al=2.0", "d=3", f"out={tmp_path}"]
    result, _ = build(args)
    wider, _ = build([*args, "arch.num_key_value_heads=8"])
    assert (result["model"]["g"], wider["model"]["g"]) == (4, 1)
    assert wider["model"]["arch_overrides"] == {"num_key_value_heads": 8}
    assert wider["points"][0]["t_plain_ms"] > result["points"][0]["t_plain_ms"]  # 4x the KV cache read


@pytest.mark.parametrize(
    "args, message",
    [
        (["gpu=h300"], "gpu=h300 is not in speclens's table; choose one of h100_sxm, h200_sxm, b200, gb200, l40s"),
        (["gpu=custom", "gpu.hbm_tb_s=2"], "gpu=custom needs gpu.bf16_tflops=…, gpu.memory_gb=…"),
        (["gpu=a100_sxm_80gb", "weights=fp8"], "gpu=a100_sxm_80gb has no FP8 tensor cores; use weights=bf16."),
        (["gpu=h200_sxm", "tp=3"], "tp=3 does not divide the target's 8 attention heads."),
        (["gpu=h200_sxm", "d=4"], "acceptance is known for 3 positions; D=4 needs 4."),
        (["gpu=h200_sxm", "arch.vocab_size=null"], "has no vocab_size, which the step-cost model needs."),
        (["gpu=h200_sxm", "drafter=medusa"], "drafter=medusa: no draft-cost model for it"),
        (["gpu=h200_sxm", "cost_model=genz"], "cost_model=genz: choose one of roofline, aiconfigurator."),
        (
            ["gpu=custom", "gpu.bf16_tflops=1", "gpu.hbm_tb_s=1", "gpu.memory_gb=1", "cost_model=aiconfigurator"],
            "cost_model=aiconfigurator has no measured tables for gpu=custom",
        ),
        (["gpu=h200_sxm", "drafter=draft_model"], "drafter=draft_model: give drafter.model=<folder or hub id>"),
        (["gpu=h200_sxm", "expert_weights=int4"], "expert_weights=int4: choose one of bf16, fp8, nvfp4, mxfp4."),
        (  # 17.25M bf16 weights (the untied embedding with them) and 4,097 tokens' KV cache at D = 1
            ["gpu=custom", "gpu.bf16_tflops=1", "gpu.hbm_tb_s=1", "gpu.memory_gb=0.01"],
            "nothing fits custom: the target needs 0.0387 GB a GPU at its smallest point (B=1, context 4096), over 90% of 0.01 GB",
        ),
    ],
)
def test_bad_input_is_one_line_before_anything_is_computed(tmp_path, capsys, args, message):
    from evals.whatif import main

    target = write_config(tmp_path / "target", SMALL)
    given = ["drafter=eagle3", "acceptance=[0.8,0.5,0.5]", f"target.model={target}", f"out={tmp_path / 'out'}"]
    given = [a for a in given if not any(a.split("=")[0] == b.split("=")[0] for b in args)]
    assert main([*given, *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("speclens: error: ") and message in err[0]
    assert not (tmp_path / "out").exists()


def test_the_guidelines_for_a_gpu_come_out_of_the_modelled_verification_cost():
    from speclens.gpu_model.gpu_guidelines import free_verification_limit, low_latency_break_even, verify_knees

    shape = shape_of({**SMALL, "num_hidden_layers": 4})  # G = 4
    hw = hardware(overhead_ms=0.1)
    # guidelines 2 and 3: the step-ups after D = 128/G - 1 = 31 and 63 (memory-bound at B = 1)
    assert verify_knees(shape, hw, 1, 8192, 64) == [31, 63]
    # guideline 1: with one cached token (attention negligible) the GEMMs turn compute-bound once
    # B·(1+D) passes 1,000 tokens (1,000 TFLOPS at 1 TB/s): B·(1+D) = 2,048, 4,096, 4,096
    limits = [free_verification_limit(shape, hw, d, [1, 16, 64, 256, 1024], 1) for d in (1, 15, 63)]
    assert limits == [1024, 256, 64]
    # guideline 4: a free lookup drafter pays from any AL above the (flat) verification cost
    rho, pays = low_latency_break_even(
        "ngram", shape, None, replace(hw, eff=replace(hw.eff, lookup_us_per_request=0)), 8192, [1, 3]
    )
    assert rho == 0.0 and [p.break_even_al for p in pays] == [pytest.approx(1.0), pytest.approx(1.0)]


def test_evals_guidelines_adds_the_gpus_guidelines(tmp_path, capsys):
    from evals.guidelines import main

    target = write_config(tmp_path / "target", {**SMALL, "num_hidden_layers": 4, "max_position_embeddings": 8192})
    assert main([f"target.model={target}", "gpu=h200_sxm", "batch_sizes=[1,64]", "context_len=2048"]) == 0
    out = capsys.readouterr().out
    assert "on h200_sxm (tp=1, weights=bf16, context 2048 tokens; the step-cost model):" in out
    assert "guidelines 2-3 at B=1: T_verif steps up after D = 31, 63" in out
    assert "guideline 4 (the EAGLE-3 head): rho = " in out


def test_calibration_recovers_the_machine_that_produced_the_step_costs():
    from speclens.gpu_model.calibrate import Fit, StepCostPoint, errors, fit

    shape = shape_of({**SMALL, "num_hidden_layers": 4})
    grid = [(b, d, c) for b in (1, 8, 64) for d in (0, 3, 40) for c in (256, 8192)]
    for truth in (Fit(0.05, 0.4, 3.0, tile_rows=None), Fit(2.0, 300.0, 0.4)):  # a CPU-like and a GPU-like one
        points = [StepCostPoint(b, d, c, 0.0) for b, d, c in grid]
        points = [replace(p, t_ms=truth.predict(shape, p)) for p in points]
        found = fit(shape, points)
        assert found.tile_rows == truth.tile_rows
        assert [found.predict(shape, p) for p in points] == [pytest.approx(p.t_ms, rel=0.01) for p in points]
    held_out = [h for _, _, h in errors(shape, points[:6])]
    assert max(abs(h) for h in held_out) < 0.02  # exact data: each point predicted from the five others


def test_calibration_on_the_fewest_points_fits_where_one_direction_is_free():
    """Two B and one D at one context (a single synthetic run with baseline=true on the embedded
    target, the step costs it measured): three of the four points leave the minimiser a free
    direction, which once walked it past exp's range (an OverflowError, not a fit)."""
    from speclens.gpu_model.calibrate import StepCostPoint, errors

    smollm2 = {"hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9, "num_key_value_heads": 3}
    shape = shape_of(smollm2 | {"num_hidden_layers": 30, "vocab_size": 49152, "tie_word_embeddings": True})
    points = [
        StepCostPoint(1, 0, 200, 101.4),
        StepCostPoint(1, 3, 200, 131.0),
        StepCostPoint(4, 0, 200, 151.7),
        StepCostPoint(4, 3, 200, 268.1),
    ]
    rows = errors(shape, points)
    assert max(abs(in_fit) for _, in_fit, _ in rows) < 0.25
    assert all(math.isfinite(h) for _, _, h in rows)


def test_the_slo_picks_the_most_throughput_that_keeps_every_user_above_the_rate():
    from speclens.gpu_model.whatif import serve_at_slo

    # (d, B, T_verif(B) ms, T_step ms, AL): per user AL·1000/T_step, per GPU B times that
    rows = [
        {"drafter": "eagle3", "d": d, "batch_size": b, "context_len": 4096, "fits": True}
        | {"t_plain_ms": t_plain, "t_step_ms": t_step, "tokens_per_step": al}
        for d, b, t_plain, t_step, al in [(3, 1, 5.0, 6.0, 2.4), (3, 16, 8.0, 12.0, 2.4), (3, 64, 20.0, 40.0, 2.4)]
    ]
    # eagle3 at B=16: 200 tokens/s per user, 3,200 per GPU; at B=64: 60 per user (too slow); plain at
    # B=64: 50 per user; plain at B=16: 125 per user, 2,000 per GPU
    assert serve_at_slo(rows, 1, 4096, 80.0) == {
        "mechanism": "eagle3",
        "d": 3,
        "batch_size": 16,
        "context_len": 4096,
        "tokens_per_s_per_request": pytest.approx(200.0),
        "output_tokens_per_s": pytest.approx(3200.0),
    }
    assert serve_at_slo(rows, 2, 4096, 80.0)["output_tokens_per_s"] == pytest.approx(1600.0)  # per GPU of two
    assert serve_at_slo(rows, 1, 4096, 500.0) is None


def test_whatif_answers_the_slo_in_one_line_and_draws_its_page(tmp_path, capsys):
    from evals.whatif import main

    target = write_config(tmp_path / "target", {**SMALL, "num_hidden_layers": 16})
    args = [f"target.model={target}", "gpu=l40s", "drafter=eagle3", "acceptance=[0.8,0.5]", f"out={tmp_path}"]
    assert main([*args, "batch_sizes=[1,4,16]", "slo.tokens_per_s_per_user=100"]) == 0
    out = capsys.readouterr().out
    result = read_whatif_file(tmp_path)
    serve = result["slo"]["serve"]
    what = "plain decoding" if serve["mechanism"] == "plain" else f"eagle3 d={serve['d']}"
    assert f"serve {what} up to B={serve['batch_size']}: " in out and serve["tokens_per_s_per_request"] >= 100
    # predicted absolute rates carry the range published figures put on them (issue 58)
    per_gpu, per_user = serve["output_tokens_per_s"], serve["tokens_per_s_per_request"]
    assert serve["source"] == "predicted"
    assert serve["output_tokens_per_s_interval"] == pytest.approx([per_gpu / 1.324, per_gpu / 0.676])
    assert serve["tokens_per_s_per_request_interval"] == pytest.approx([per_user / 1.324, per_user / 0.676])
    low, high = serve["tokens_per_s_per_request_interval"]
    assert f"{per_user:.0f} tokens/s per user [{low:.0f}, {high:.0f}] (>= 100) at context" in out
    assert ("its 80 % range reaches below 100 tokens/s per user" in out) == (low < 100)
    page = (tmp_path / "whatif.html").read_text()
    assert '"speedup-eagle3-4096"' in page and '"pareto-eagle3-4096"' in page
    # every predicted Pareto point carries the same range as bars on both axes, and says it on hover
    from reports.plotly_charts import pareto_chart
    from reports.speedup_ranking import pareto_front
    from reports.whatif_page import operating_frame

    frame = operating_frame(result["points"], result["tp"])
    chart = pareto_chart(frame, pareto_front(frame))
    markers = [t for t in chart.figure["data"] if t["mode"] == "markers+text"]
    assert {t["name"] for t in markers} == {"eagle3", "plain"}
    for trace in markers:
        for x, y, up, down, hover in zip(
            trace["x"], trace["y"], trace["error_y"]["array"], trace["error_y"]["arrayminus"], trace["customdata"]
        ):
            assert (y - down, y + up) == pytest.approx((y / 1.324, y / 0.676))
            assert f"80% range per request [{x / 1.324:.1f}, {x / 0.676:.1f}]" in hover
        assert trace["error_x"]["arrayminus"] == pytest.approx([x - x / 1.324 for x in trace["x"]])
    assert "Every point predicted; its bars are the 80% range" in page
    # every context length asked for is charted, not the first alone
    assert main([*args, "batch_sizes=[1,4]", "context_len=[512,8192]"]) == 0
    page = (tmp_path / "whatif.html").read_text()
    for context in (512, 8192):
        assert f'"speedup-eagle3-{context}"' in page and f'"pareto-eagle3-{context}"' in page


def test_the_report_predicts_each_runs_speedup_on_a_named_gpu(tmp_path):
    from reports.build import main as build_main
    from speclens.checkpoints import read_config
    from speclens.file_formats.records import read_parquet
    from speclens.gpu_model.serving_engines import ENGINES
    from speclens.gpu_model.step_cost import Hardware
    from speclens.gpu_model.whatif import mean_context
    from tests.unit.test_step_costs import measure

    summary, out = measure(tmp_path, 2)
    assert build_main([str(tmp_path / "sweep"), "--gpu=h200_sxm", "--tp=1"]) == 0
    section = (tmp_path / "sweep" / "report.md").read_text().split("## Predicted on h200_sxm")[1].split("\n## ")[0]
    assert "; engine vllm 0.32 (overlap scheduling: plain decoding and " in section
    stamp = json.loads((out / "stamp.json").read_text())
    shape = shape_of(read_config(Path(stamp["target_dir"]), "target.model"))
    requests = read_parquet(out / "requests.parquet")
    for op in summary["operating_points"]:
        b = op["batch_size"]
        mine = requests[requests.batch_size == b]
        context = mean_context(mine.prompt_tokens, mine.output_tokens)
        share = float(mine.drafted_steps.sum() / mine.target_steps.sum())
        drafting = Drafting("ngram", {2: summary["al"]}, draft_share=share)
        # the default engine, vLLM: its n-gram steps lose the async scheduling its plain steps keep
        predicted = point(drafting, 2, b, context, shape, Hardware(gpu_named("h200_sxm"), engine=ENGINES["vllm"]))
        row = (
            # the AL is the fake engine's, marked so
            f"| ngram | 2 | {b} | {context} | {summary['al']:.2f} [fake] | {predicted['tokens_per_step']:.2f} | "
            f"x{op['speedup']:.2f} | x{predicted['speedup']:.2f} |"
        )
        assert row in section


def test_a_sweeps_drafters_each_get_their_own_draft_checkpoint(tmp_path):
    from evals.whatif import build
    from speclens.gpu_model.step_cost import Hardware

    target = write_config(tmp_path / "target", {**SMALL, "num_hidden_layers": 8})
    head = write_config(tmp_path / "head", {**SMALL, "draft_vocab_size": 500, "architectures": [EAGLE3_HEAD]})
    draft = write_config(tmp_path / "draft", {**SMALL, "num_hidden_layers": 2, "hidden_size": 512} | CAUSAL_LM)
    sweep = tmp_path / "sweep"
    for name, model in (("eagle3", head), ("draft_model", draft)):
        run = sweep / name
        run.mkdir(parents=True)
        (run / "summary.json").write_text(json.dumps({"drafter": name, "d": 2}))
        stamp = {"target_dir": str(target), "config": {"drafter": {"model": str(model)}}}
        (run / "stamp.json").write_text(json.dumps(stamp))
    profiles = [
        {"drafter": name, "d": 2, "domain": "all", "segment": "all", "al": 1.9, "marginal": [0.6, 0.3]}
        for name in ("eagle3", "draft_model")
    ]
    (sweep / "speculation_profile.json").write_text(json.dumps({"schema_version": 1, "profiles": profiles}))
    result, _ = build([str(sweep), "gpu=h100_sxm", "batch_sizes=[4]", "context_len=512", "d=2"])
    hw, shape = Hardware(gpu_named("h100_sxm")), shape_of({**SMALL, "num_hidden_layers": 8})
    drafted = {p["drafter"]: p["t_draft_ms"] for p in result["points"]}
    assert drafted["draft_model"] == pytest.approx(
        draft_ms("draft_model", 2, 4, 512, shape, shape_of(json.loads((draft / "config.json").read_text())), hw)
    )
    assert drafted["eagle3"] == pytest.approx(
        draft_ms(
            "eagle3", 2, 4, 512, shape, head_shape("eagle3", shape, json.loads((head / "config.json").read_text())), hw
        )
    )


def test_each_engine_runs_speculation_its_own_way_and_is_printed_with_the_prediction(tmp_path, capsys):
    """engine= (speclens/gpu_model/serving_engines.py): overlap scheduling that plain decoding keeps and a
    drafter loses costs that drafter the hidden overhead; in-graph drafting costs no draft pass."""
    from evals.whatif import build, main
    from speclens.gpu_model.draft_cost import MECHANISMS
    from speclens.gpu_model.serving_engines import ALL_DRAFTERS, ENGINES

    assert ALL_DRAFTERS == set(MECHANISMS)  # engines.py cannot import draft_cost (it imports step_cost)

    target = write_config(tmp_path / "target", {**SMALL, "num_hidden_layers": 16})
    base = [f"target.model={target}", "gpu=h200_sxm", "acceptance=[0.8,0.5]", "batch_sizes=[1]", "d=2"]

    def at(drafter: str, engine: str | None) -> dict:
        result, _ = build([*base, f"drafter={drafter}", *([f"engine={engine}"] if engine else [])])
        return result["points"][0]

    shape = shape_of({**SMALL, "num_hidden_layers": 16})
    # vLLM overlaps EAGLE-3's steps as it does plain ones: the fitted model as it is (engine None)
    plain_ms = verify_step(shape, 1, 0, 4096, Hardware(gpu_named("h200_sxm"))).total_ms
    assert at("eagle3", "vllm")["t_plain_ms"] == pytest.approx(plain_ms)
    assert at("eagle3", None)["speedup"] == pytest.approx(at("eagle3", "vllm")["speedup"])  # vllm is the default
    # vLLM's n-gram runs without async scheduling: the plain step it is set against hides 0.43 ms
    ngram, ngram_sglang = at("ngram", "vllm"), at("ngram", "sglang")
    assert plain_ms - ngram["t_plain_ms"] == pytest.approx(ENGINES["vllm"].hidden_overhead_ms)
    # TensorRT-LLM leaves 0.58 ms of the fitted 1.2 ms exposed with overlap on: 0.62 ms hidden
    assert plain_ms - at("ngram", "trtllm")["t_plain_ms"] == pytest.approx(Efficiency().overhead_ms - 0.58)
    assert ngram_sglang["speedup"] == pytest.approx(ngram["speedup"])
    # TensorRT-LLM's one-model EAGLE-3 drafts in the target's graph: two passes' launch overhead less
    trt = at("eagle3", "trtllm")
    assert at("eagle3", "vllm")["t_draft_ms"] - trt["t_draft_ms"] == pytest.approx(
        2 * Efficiency().draft_pass_overhead_ms
    )
    assert trt["speedup"] > at("eagle3", "vllm")["speedup"]
    with pytest.raises(ConfigError, match="^engine=tgi: choose one of vllm, sglang, trtllm"):
        build([*base, "drafter=eagle3", "engine=tgi"])
    with pytest.raises(ConfigError, match="^calibrate= fits the engine that measured its runs"):
        build([*base[:1], *base[2:], "drafter=eagle3", f"calibrate={tmp_path}", "engine=sglang"])
    assert main([*base, "drafter=eagle3", "engine=trtllm", f"out={tmp_path / 'out'}"]) == 0
    shown = capsys.readouterr().out
    assert (
        "engine: trtllm 1.x (PyTorch backend) (overlap scheduling: plain decoding and draft_model, eagle3, mtp; "
        in shown
    )
    written = read_whatif_file(tmp_path / "out")["engine"]
    assert (written["name"], written["in_graph_drafters"]) == ("trtllm", ["eagle3", "mtp"])


def test_a_calibration_no_machine_could_give_is_said_to_be_noise():
    from speclens.gpu_model.calibrate import HELD_OUT_BOUND, Fit, implausible

    # the 4-point CPU calibration of docs/whatif.md: 13 GFLOPS, held out at most +26 %: no warning
    assert implausible(Fit(0.05, 0.013, 2.7, tile_rows=None), [-0.024, -0.194, 0.262, -0.029]) == []
    # the case: noisy steps fitting 3.5e14 GB/s, and a point held out 0.4 off
    bandwidth, held = implausible(Fit(3.5e11, 0.5, 2.0), [0.1, -0.4, math.nan])
    assert bandwidth.startswith("the fitted bandwidth, 3.5e+14 GB/s, is above any GPU's (b200: 8e+03 GB/s)")
    assert held.startswith(f"a point held out of the fit is predicted -40.0% off (bound ±{HELD_OUT_BOUND:.0%})")
    [compute] = implausible(Fit(1.0, 9000.0, 1.0), [])
    assert compute.startswith("the fitted throughput, 9e+03 TFLOPS, is above any GPU's (gb200: 5000 TFLOPS at fp8)")


def test_calibrate_writes_strict_json_and_its_warnings_where_the_user_reads(tmp_path, capsys, monkeypatch):
    from evals.whatif import main
    from speclens.gpu_model import calibrate
    from speclens.options import strict_json_loads
    from tests.unit.test_step_costs import measure

    measure(tmp_path, 2)  # the fake engine's step costs at B = 1, 2, D = 0, 2
    args = [f"calibrate={tmp_path / 'sweep'}", "drafter=ngram", "al=1.8", "d=2", "batch_sizes=[1,4]"]
    monkeypatch.setattr(calibrate, "HELD_OUT_BOUND", 0.0)  # every fit misses a held-out point by more than 0
    assert main([*args, f"out={tmp_path / 'out'}"]) == 0
    shown = capsys.readouterr().out
    # a calibrated machine's memory is unknown: null with its reason, never Infinity (not JSON)
    written = strict_json_loads((tmp_path / "out" / "whatif.json").read_text())
    assert written["gpu"]["memory_gb"] is None and "not modelled" in written["gpu"]["memory_gb_unknown"]
    held = [p["held_out_error"] for p in written["calibration"]["points"]]
    worst = max(held, key=abs)
    [warning] = written["calibration"]["warnings"]
    assert warning.startswith(f"a point held out of the fit is predicted {worst:+.1%} off (bound ±0%)")
    assert f"calibration: {warning}" in written["notes"] and f"calibration: {warning}" in shown
    assert warning.split(":")[0] in (tmp_path / "out" / "whatif.html").read_text()


@pytest.mark.parametrize(
    "drafter, draft_config, expected",
    [
        ("mtp", None, "has no multi-token-prediction layers (its config.json sets none of num_nextn_predict_layers"),
        ("draft_model", {**SMALL, "vocab_size": 2000} | CAUSAL_LM, "has vocab_size=2000 but target.model="),
        ("eagle3", {**SMALL, "hidden_size": 2048, "architectures": [EAGLE3_HEAD]}, "has hidden_size=2048 but target"),
    ],
)
def test_whatif_refuses_the_pairs_evals_run_refuses_in_the_same_words(
    tmp_path, capsys, drafter, draft_config, expected
):
    from evals.run import main as run_main
    from evals.whatif import main as whatif_main
    from tests.unit.conftest import fake_overrides
    from tests.unit.test_commands_fake import ROWS

    target = write_config(tmp_path / "target", SMALL | CAUSAL_LM)  # fake_overrides' target: this one
    given = [] if draft_config is None else [f"drafter.model={write_config(tmp_path / 'draft', draft_config)}"]
    assert whatif_main([f"target.model={target}", "gpu=h200_sxm", f"drafter={drafter}", "al=1.8", "d=2", *given]) == 2
    predicted = capsys.readouterr().err.strip()
    run_args = [*fake_overrides(tmp_path, ROWS), f"drafter={drafter}", "d=2", f"hydra.run.dir={tmp_path / 'run'}"]
    with pytest.raises(SystemExit) as ended:  # a Hydra job reports its failure, then exits with its status
        run_main([*run_args, *given])
    assert ended.value.code == 2
    measured = capsys.readouterr().err.strip().splitlines()[-1]
    assert expected in predicted and predicted == measured


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_calibrate_is_refused_not_read_as_the_current_folder(tmp_path, capsys, monkeypatch, value):
    """Issue 56: `calibrate=` with nothing after it scanned the current folder for runs."""
    from evals.whatif import main

    monkeypatch.chdir(tmp_path)
    assert main([f"calibrate={value}", "drafter=ngram", "al=1.8", "d=2"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == "speclens: error: calibrate= is empty; give the run or sweep dir measured with baseline=true."
