"""The step-cost model with its defaults against published speedups (tests/data/published_speedups.json:
target, GPU, TP, B, D and AL all stated in one public source each). Pure arithmetic. The figures and
where the model is off, and why, are in docs/whatif.md; this test keeps them from getting worse."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

from speclens.gpu_model.draft_cost import drafter_shape
from speclens.gpu_model.gpus import gpu_named
from speclens.gpu_model.model_shape import shape_of
from speclens.gpu_model.step_cost import Hardware, verify_step
from speclens.gpu_model.whatif import Drafting, point

DATA = json.loads((Path(__file__).resolve().parents[1] / "data" / "published_speedups.json").read_text())


def predicted(case: dict) -> float:
    target = shape_of(DATA["models"][case["target"]], case["target"])
    draft_config = DATA["models"][case["draft"]] if "draft" in case else None
    draft = drafter_shape(case["drafter"], target, draft_config)
    hw = Hardware(
        gpu_named(case["gpu"]), tp=case["tp"], weights=case["weights"], expert_weights=case.get("expert_weights")
    )
    drafting = Drafting(case["drafter"], {case["d"]: case["al"]}, draft)
    return point(drafting, case["d"], case["batch_size"], case["context_len"], target, hw)["speedup"]


def test_every_case_names_its_source_and_states_what_the_model_needs():
    assert len(DATA["cases"]) == 31
    for case in DATA["cases"]:
        assert case["source"] in DATA["sources"] and case["target"] in DATA["models"]
        assert 1 <= case["al"] <= 1 + case["d"] and case["speedup"] > 0


def test_the_defaults_predict_the_published_speedups_within_the_stated_error():
    errors = {c["id"]: predicted(c) / c["speedup"] - 1 for c in DATA["cases"]}
    # docs/whatif.md: in-sample median |error| 15.6 % over the 31 cases, 15.6 % over the 7 at B > 1 (held
    # out by source, tests/unit/test_nested_intervals.py: 15.6 %, worst 42.6 %); one set of defaults for all
    assert statistics.median(abs(e) for e in errors.values()) < 0.157
    batched = [abs(errors[c["id"]]) for c in DATA["cases"] if c["batch_size"] > 1]
    assert len(batched) == 7 and statistics.median(batched) < 0.157
    # where it is off, in the direction the docs explain: TensorRT-LLM's DeepSeek-R1 MTP steps carry
    # more fixed cost than the model, more so with each serial MTP pass (under-predicted, growing with D)
    mtp = [errors[f"deepseek-r1-mtp-d{d}"] for d in range(1, 6)]
    assert all(e < -0.05 for e in mtp) and mtp == sorted(mtp, reverse=True)
    # vLLM's EAGLE-3 of mid-2025 drafted slower than its head's weights explain (over); its EAGLE-1 did not
    assert all(errors[f"llama-3.1-8b-eagle3-k{d}"] > 0.15 for d in range(2, 8))
    assert all(abs(errors[f"llama-3.1-8b-eagle1-k{d}"]) < 0.12 for d in range(2, 8))
    # a reported SGLang slowdown the model cannot see (over), and 80 prompts at concurrency 64 (over)
    assert errors["qwen3-30b-a3b-eagle3-b1"] > 0.3 and errors["gpt-oss-120b-eagle3-b64"] > 0.2


def test_the_predicted_best_d_is_within_one_of_the_published_best_and_costs_under_2_percent():
    sweeps: dict[tuple, list[dict]] = {}
    for case in DATA["cases"]:
        key = (case["source"], case["target"], case["drafter"], case["batch_size"])
        sweeps.setdefault(key, []).append(case)
    picks, regrets = [], []
    for cases in sweeps.values():
        if len(cases) < 2:
            continue
        published = max(cases, key=lambda c: c["speedup"])
        model = max(cases, key=predicted)
        picks.append((published["d"], model["d"]))
        regrets.append(1 - model["speedup"] / published["speedup"])  # the published speedup lost by the pick
    # (published, predicted): DeepSeek-R1 MTP, EAGLE-1 and EAGLE-3 on Llama-3.1-8B, EAGLE-1 on Llama-3-8B
    assert picks == [(3, 2), (3, 2), (4, 5), (2, 2)]
    # docs/whatif.md: serving the predicted D loses 1.3 %, 1.8 %, 1.9 % and 0 % of the best published speedup
    assert max(regrets) < 0.02 and regrets[-1] == 0


def test_the_cost_of_verifying_a_batch_follows_vllms_fitted_step():
    """T_verif(B·(1+D)) / T_verif(B) against SpecDecode-Bench's fit of vLLM's step on an H100, at the
    batch sizes it was fitted on: the per-token overhead is what makes verification cost anything
    below the GEMMs' compute-bound knee (its default comes from this fit: the shape, not the level)."""
    (fit,) = DATA["step_fits"]
    target = shape_of(DATA["models"][fit["target"]], fit["target"])
    forward = fit["forward_s"]

    def fitted_ms(b: int, q: int, context: int) -> float:
        seconds = forward["fixed"] + b * q * forward["per_batched_token"] + b * context * forward["per_cached_token"]
        return (seconds + fit["per_step_s"]) * 1e3

    def errors(hw: Hardware) -> list[float]:
        return [
            verify_step(target, b, d, context, hw).total_ms
            / verify_step(target, b, 0, context, hw).total_ms
            / (fitted_ms(b, 1 + d, context) / fitted_ms(b, 1, context))
            - 1
            for b in fit["batch_sizes"]
            for d in (3, 5)
            for context in (512, 2048)
        ]

    hw = Hardware(gpu_named(fit["gpu"]), tp=fit["tp"], weights=fit["weights"])
    # docs/whatif.md: median 2.9 %; without the per-token term verification reads as free up to 256 tokens
    assert statistics.median(abs(e) for e in errors(hw)) < 0.035
    roofline_only = replace(hw, eff=replace(hw.eff, token_us=0.0))
    assert statistics.median(abs(e) for e in errors(roofline_only)) > 0.10
