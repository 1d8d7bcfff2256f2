"""Guideline calculators against worked examples."""

from __future__ import annotations

import pytest

from evals.guidelines import main
from speclens.errors import ConfigError
from speclens.gpu_model.guidelines import (
    Guidelines,
    layer_ratio,
    low_latency_speedup,
    query_heads_per_kv_head,
    starting_draft_length,
    tile_aligned_draft_lengths,
)
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
