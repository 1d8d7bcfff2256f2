"""Guideline calculators against worked examples."""

from __future__ import annotations

import pytest

from evals.guidelines import main
from speclens.config_guidelines import (
    Guidelines,
    layer_ratio,
    low_latency_speedup,
    query_heads_per_kv_head,
    starting_draft_length,
    tile_aligned_draft_lengths,
)
from speclens.errors import ConfigError
from tests.unit.conftest import write_checkpoint


@pytest.mark.parametrize("g, d", [(8, 15), (32, 3), (1, 127), (4, 31), (3, 41)])
def test_starting_draft_length(g, d):
    assert starting_draft_length(g) == d


def test_tile_aligned_draft_lengths():
    assert tile_aligned_draft_lengths(8) == [15, 31, 47, 63, 79, 95, 111, 127]
    assert tile_aligned_draft_lengths(32)[:3] == [3, 7, 11] and len(tile_aligned_draft_lengths(32)) == 32
    # G = 3 shares no factor with 128: 1 + D must itself be a multiple of 128
    assert tile_aligned_draft_lengths(3) == [127]
    assert all(3 * (1 + d) % 128 == 0 for d in tile_aligned_draft_lengths(3))


def test_smollm2_shape_gives_g_3_and_nested_text_configs_are_read():
    smollm2 = {"num_attention_heads": 9, "num_key_value_heads": 3, "num_hidden_layers": 30}
    assert query_heads_per_kv_head(smollm2) == 3
    assert query_heads_per_kv_head({"text_config": {"num_attention_heads": 64, "num_key_value_heads": 8}}) == 8
    assert query_heads_per_kv_head({"num_attention_heads": 12}) == 1
    with pytest.raises(ConfigError, match="not a multiple"):
        query_heads_per_kv_head({"num_attention_heads": 9, "num_key_value_heads": 2})


def test_layer_ratio_and_low_latency_speedup():
    rho = layer_ratio({"num_hidden_layers": 1}, {"num_hidden_layers": 32})
    assert rho == pytest.approx(1 / 32)
    # AL 3.2 at D = 4 with a one-layer head: 3.2 / (1 + 4/32)
    assert low_latency_speedup(3.2, rho, 4) == pytest.approx(3.2 / 1.125)


def test_cli_prints_the_guidelines_for_a_target_and_draft(tmp_path, capsys):
    target = write_checkpoint(tmp_path / "target", num_attention_heads=32, num_key_value_heads=4, num_hidden_layers=32)
    draft = write_checkpoint(tmp_path / "draft", num_hidden_layers=4)
    assert main(["target=custom", f"target.model={target}", f"drafter.model={draft}"]) == 0
    out = capsys.readouterr().out
    assert "G (query heads per KV head) = 8" in out and "D = 128/G - 1 = 15" in out
    assert "15, 31, 47" in out and "rho = L_draft / L_target = 0.125" in out
    # break-even AL for D = 15: 1 + 0.125 * 15
    assert "D=15  pays only when AL > 2.88" in out
    assert Guidelines.for_configs({"num_attention_heads": 32, "num_key_value_heads": 4}).starting_d == 15


def test_cli_names_the_key_to_fix(tmp_path, capsys):
    assert main(["target=custom", f"target.model={tmp_path / 'missing'}"]) == 2
    assert "target.model=" in capsys.readouterr().err
    assert main(["drafter.num_speculative_tokens=3"]) == 2
    assert "only drafter.model=<path> is read here" in capsys.readouterr().err


DEEPSEEK_V3_ATTENTION = {  # DeepSeek-V3's config.json: 128 query heads over one latent (kv_lora_rank)
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "q_lora_rank": 1536,
}


def test_mla_targets_get_the_guidelines_that_apply_to_them(tmp_path, capsys):
    # its num_key_value_heads (128) counts heads the latent expands to: G is 128, not 1
    assert query_heads_per_kv_head(DEEPSEEK_V3_ATTENTION) == 128
    assert query_heads_per_kv_head(DEEPSEEK_V3_ATTENTION | {"num_attention_heads": 16}) == 16  # V2-Lite: D = 7
    assert starting_draft_length(128) is None
    moe = {"n_routed_experts": 256, "n_shared_experts": 1, "moe_intermediate_size": 2048, "first_k_dense_replace": 3}
    moe["num_experts_per_tok"] = 8
    shape = {"hidden_size": 7168, "intermediate_size": 18432, "num_hidden_layers": 61, "vocab_size": 129280}
    target = write_checkpoint(tmp_path / "target", **shape, **moe, **DEEPSEEK_V3_ATTENTION)
    assert main(["target=custom", f"target.model={target}"]) == 0
    out = capsys.readouterr().out
    assert "G (query heads per KV head) = 128 (MLA: every query head reads the one cached latent)" in out
    assert "guideline 2: does not apply: 128/G - 1 = 0.00 < 1, so not one draft token's 128 query rows fit" in out
    assert "guideline 3: does not apply: G*(1+D) is a multiple of 128 for every D" in out
    assert "D = 127" not in out and "G (query heads per KV head) = 1\n" not in out
    # 671B parameters in bf16 fit no single GPU: refused in one line, not guidelines for it
    assert main(["target=custom", f"target.model={target}", "gpu=h200_sxm"]) == 2
    refused = capsys.readouterr()
    assert refused.err.startswith("speclens: error: nothing fits h200_sxm: the target needs ") and refused.out == ""


def test_guidelines_refuse_a_draft_evals_run_refuses(tmp_path, capsys):
    target = write_checkpoint(tmp_path / "target", num_attention_heads=32, num_key_value_heads=4, num_hidden_layers=32)
    other_vocab = write_checkpoint(tmp_path / "draft", vocab_size=200, num_hidden_layers=4)
    assert main(["target=custom", f"target.model={target}", f"drafter.model={other_vocab}"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"speclens: error: drafter.model={other_vocab} has vocab_size=200 but target.model={target} has "
        "vocab_size=100; drafter=draft_model needs the target's vocabulary."
    )
