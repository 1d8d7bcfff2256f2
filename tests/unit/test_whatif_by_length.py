"""evals.whatif with acceptance measured per length (issue 47): each point's AL is the one measured
at the nearest length (`al_measured_at`), the best D per (B, context length) moves where the
acceptance or attention's share of the step says it should, and guidelines 2 and 3 are stated at
each measured length with that share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.whatif import build, main
from speclens.config_guidelines import tile_aligned_draft_lengths
from speclens.figures.acceptance import al_at
from speclens.file_formats.whatif_file import read_whatif_file
from speclens.gpu_model.gpus import gpu_named
from speclens.gpu_model.model_shape import shape_of
from speclens.gpu_model.step_cost import Hardware, verify_step
from tests.unit.test_whatif import SMALL, write_config

# Llama-3-8B's shape (G = 4), and one with 16 query heads per KV head, whose 128-row attention
# tiles hold 1 + D = 8 tokens per request: crossing one costs a whole tile more of KV reads.
LLAMA8 = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "vocab_size": 128256,
    "head_dim": 128,
}
G16 = LLAMA8 | {"num_key_value_heads": 2}
LENGTHS = {1000: "1k", 8000: "8k", 32000: "32k"}


def profiles(marginals: dict[int, list[float]], drafter: str = "eagle3") -> list[dict]:
    """A run's profiles: all prompts (the first length's acceptance) and one per length bucket."""
    first = next(iter(marginals.values()))
    pooled = {"drafter": drafter, "d": len(first), "domain": "all", "segment": "all"}
    out = [pooled | {"al": 1 + sum(first), "marginal": first}]
    for tokens, marginal in marginals.items():
        out.append(pooled | {"al": 1 + sum(marginal), "marginal": marginal, "length": LENGTHS[tokens]})
        out[-1]["input_tokens"] = tokens
    return out


def source(
    tmp_path: Path, marginals: dict[int, list[float]], config: dict, drafter: str = "eagle3"
) -> tuple[Path, Path]:
    folder = tmp_path / "run"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "speculation_profile.json").write_text(
        json.dumps({"schema_version": 1, "profiles": profiles(marginals, drafter)})
    )
    return folder, write_config(tmp_path / "target", config)


def best_d(result: dict) -> dict[tuple[int, int], int]:
    return {(b["batch_size"], b["context_len"]): b["d"] for b in result["best"]}


def test_each_point_takes_the_al_measured_at_the_nearest_length(tmp_path):
    marginals = {1000: [0.9, 0.8, 0.7], 8000: [0.6, 0.4, 0.2], 32000: [0.3, 0.1, 0.0]}
    run, target = source(tmp_path, marginals, SMALL)
    contexts = [1000, 4500, 4501, 20000, 20001, 64000]
    result, _ = build(
        [str(run), f"target.model={target}", "gpu=h200_sxm", "batch_sizes=[1]", f"context_len={contexts}"]
    )
    # 4500 and 20000 are as near the one below as the one above: the shorter is taken
    nearest = {1000: 1000, 4500: 1000, 4501: 8000, 20000: 8000, 20001: 32000, 64000: 32000}
    for p in result["points"]:
        measured_at = nearest[p["context_len"]]
        assert p["al_measured_at"] == LENGTHS[measured_at]
        assert p["al"] == pytest.approx(al_at(marginals[measured_at], p["d"]))
    assert {b["al_measured_at"] for b in result["best"] if b["context_len"] == 64000} == {"32k"}


def test_the_measured_lengths_are_the_default_context_lens_and_pooled_acceptance_names_no_length(tmp_path):
    marginals = {1000: [0.9, 0.8, 0.7], 32000: [0.3, 0.1, 0.0]}
    run, target = source(tmp_path, marginals, SMALL)
    result, _ = build([str(run), f"target.model={target}", "gpu=h200_sxm", "batch_sizes=[1]"])
    assert sorted({p["context_len"] for p in result["points"]}) == [1000, 32000]
    assert [s["length"] for s in result["by_length"]] == ["1k", "32k"]
    # the same profile with no lengths: one AL for every context, no al_measured_at, no by_length
    pooled = [p for p in profiles(marginals) if "length" not in p]
    (run / "speculation_profile.json").write_text(json.dumps({"schema_version": 1, "profiles": pooled}))
    result, _ = build([str(run), f"target.model={target}", "gpu=h200_sxm", "batch_sizes=[1]"])
    assert {p["context_len"] for p in result["points"]} == {4096}
    assert not any("al_measured_at" in p for p in result["points"]) and "by_length" not in result
    assert [p["al"] for p in result["points"]] == pytest.approx([1.9, 2.7, 3.4])


def test_the_best_d_falls_with_length_where_the_acceptance_measured_there_falls(tmp_path):
    marginals = {1000: [0.9**k for k in range(1, 16)], 32000: [0.5**k for k in range(1, 16)]}
    run, target = source(tmp_path, marginals, LLAMA8)
    result, _ = build([str(run), f"target.model={target}", "gpu=h200_sxm", "batch_sizes=[1,8]"])
    best = best_d(result)
    for b in (1, 8):
        assert best[(b, 32000)] < best[(b, 1000)]
    # and with 32k's acceptance at 1k too, the best D there is what 32k's acceptance gives at 1k's costs
    same = {1000: marginals[32000], 32000: marginals[32000]}
    run, target = source(tmp_path / "same", same, LLAMA8)
    flat, _ = build([str(run), f"target.model={target}", "gpu=h200_sxm", "batch_sizes=[1,8]"])
    assert best_d(flat)[(1, 1000)] < best[(1, 1000)]


def test_the_best_d_moves_with_attentions_share_at_the_same_acceptance(tmp_path):
    same = [0.9**k for k in range(1, 32)]
    # n-gram drafting costs nothing on a GPU: the step is verification alone
    run, target = source(tmp_path, {1000: same, 32000: same}, G16, "ngram")
    result, _ = build([str(run), f"target.model={target}", "gpu=h200_sxm", "batch_sizes=[8,64]"])
    best = best_d(result)
    assert best[(8, 1000)] != best[(8, 32000)] and best[(64, 1000)] != best[(64, 32000)]
    # at 32k attention takes most of the step: the best D fills whole 128-row tiles (guideline 3),
    # which at 1k, where the weights' reads dominate, it need not
    aligned = tile_aligned_draft_lengths(16)
    assert best[(8, 32000)] in aligned and best[(64, 32000)] in aligned
    assert best[(8, 1000)] not in aligned
    sections = {s["context_len"]: s for s in result["by_length"]}
    share = {(c, b["batch_size"]): b["attention_share_plain"] for c, s in sections.items() for b in s["by_batch_size"]}
    assert share[(32000, 64)] > 0.5 > share[(1000, 64)]


def test_guidelines_2_and_3_are_stated_at_each_length_with_the_predicted_attention_share(tmp_path, capsys):
    marginals = {1000: [0.8, 0.6, 0.4], 32000: [0.5, 0.2, 0.1]}
    run, target = source(tmp_path, marginals, G16)
    assert main([str(run), f"target.model={target}", "gpu=h200_sxm", "batch_sizes=[1,64]"]) == 0
    result = read_whatif_file(run)
    hw, shape = Hardware(gpu_named("h200_sxm", {})), shape_of(G16, "target.model")
    for section in result["by_length"]:
        context = section["context_len"]
        assert section["source"].startswith("predicted")
        assert (section["g"], section["guideline_2_d"], section["guideline_3_ds"][:2]) == (16, 7, [7, 15])
        assert section["al_measured"]["eagle3"]["3"] == pytest.approx(1 + sum(marginals[context]))
        for at in section["by_batch_size"]:
            plain = verify_step(shape, at["batch_size"], 0, context, hw)
            at_d7 = verify_step(shape, at["batch_size"], 7, context, hw)
            assert at["attention_share_plain"] == pytest.approx(plain.attention_ms / plain.total_ms)
            assert at["attention_share_at_starting_d"] == pytest.approx(at_d7.attention_ms / at_d7.total_ms)
        assert {b["context_len"] for b in section["best"]} == {context}
    out = capsys.readouterr().out
    # the AL measured there at the D measured only; the smaller D derived from its rates, marked so (issue 56)
    assert "at 32k (32000 tokens; AL measured there: eagle3 D=3: 1.80 (D=1, 2 derived from its rates [derived]))" in out
    assert "AL measured at" in out
    page = (run / "whatif.html").read_text()
    assert "By context length" in page and "attention share of T_verif(B)" in page
