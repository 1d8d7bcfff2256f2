"""Drafters: vLLM translations, limits and the comparison table."""

from __future__ import annotations

import csv
import io
from contextlib import redirect_stdout

import pytest

from drafters import REGISTRY, make_drafter
from evals.drafters import HEADER, main as table_main
from evals.errors import ConfigError


@pytest.mark.parametrize("d", [1, 4, 9])
def test_vllm_translations(d):
    assert make_drafter(REGISTRY["ngram"].config_class(prompt_lookup_min=1, prompt_lookup_max=4)).speculative_config(d) == {
        "method": "ngram", "num_speculative_tokens": d, "prompt_lookup_min": 1, "prompt_lookup_max": 4}
    spec = make_drafter(REGISTRY["eagle3"].config_class(model="/m")).speculative_config(d)
    assert spec == {"method": "eagle3", "model": "/m", "num_speculative_tokens": d, "draft_sample_method": "greedy"}
    assert make_drafter(REGISTRY["suffix"].config_class()).speculative_config(d)["suffix_decoding_max_tree_depth"] == 24
    assert make_drafter(REGISTRY["none"].config_class()).speculative_config(d) is None


def test_unknown_drafter_names_the_choices():
    with pytest.raises(ConfigError, match="drafter='medusa2' is unknown; choose one of draft_model, eagle, eagle3"):
        make_drafter(REGISTRY["none"].config_class(name="medusa2"))


def test_comparison_table_lists_every_drafter_with_every_fact():
    out = io.StringIO()
    with redirect_stdout(out):
        assert table_main(["--format", "csv"]) == 0
    rows = list(csv.reader(io.StringIO(out.getvalue())))
    assert rows[0] == HEADER
    by_name = {r[0]: dict(zip(HEADER, r)) for r in rows[1:]}
    assert set(by_name) == set(REGISTRY)
    assert by_name["ngram"]["generation"] == "one lookup" and by_name["ngram"]["replay"] == "exact"
    assert by_name["eagle3"]["inputs"] == "fused target hidden states" and by_name["eagle3"]["checkpoint"] == "yes"
    assert all(all(cell for cell in row) for row in rows)
