"""`calibrate=` beside its three constants (speclens/gpu_model/calibrate.py, evals/whatif_calibration.py
calibration_steps): the K=0 tax fitted from the idle pass and paid by every undrafted step, and T_draft
fitted (a lookup's cost per request, a model drafter's per-pass overhead) in place of the GPU constants,
against hand-computed values from the fake engine's scripted step times
(runners.fake_engine.linear_cost: 10 ms a step + 1 ms a token processed + 2 ms a drafted token in the
drafter's pass + runner.idle_ms a step of the idle pass; the speculative pass's undrafted steps pay
no idle_ms)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from evals.pipeline.run_job import run
from evals.whatif import build, main
from evals.whatif_calibration import calibration_steps, fitted_beside_line
from speclens.file_formats.whatif_file import read_whatif_file
from speclens.gpu_model import calibrate
from speclens.gpu_model.calibrate import Drafted, Fit, Undrafted
from speclens.gpu_model.draft_cost import draft_ms, head_shape
from speclens.gpu_model.model_shape import shape_of
from speclens.gpu_model.step_cost import Efficiency
from tests.unit.conftest import compose_run, fake_overrides
from tests.unit.test_k0_tax import as_version_11

PROMPTS = [
    {"question_id": f"c{i}", "category": "coding", "turns": [f"write function number {i} " * (i + 1)]} for i in range(4)
]
# Every request: two steps accepting both of D = 2 drafts, then one that drafts nothing, twice: of
# the steady decode steps two thirds draft (s = 2/3).
MIXED = {f"c{i}#0": [2, 2, None, 2, 2, None] for i in range(4)}
IDLE_MS = 3.0
S = 2 / 3
# A small dense model: 4 layers, 8 query heads over 2 KV heads, head_dim 128.
SMALL = {
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "num_hidden_layers": 4,
    "vocab_size": 1000,
    "head_dim": 128,
}


def measure(tmp_path: Path, *overrides: str, drafter: str = "ngram", script=MIXED) -> Path:
    cfg = compose_run(
        *fake_overrides(tmp_path, PROMPTS, script, num_attention_heads=8, num_key_value_heads=1),
        f"drafter={drafter}",
        "d=2",
        "batch_sizes=[1,2]",
        "baseline=true",
        f"runner.idle_ms={IDLE_MS}",
        *overrides,
    )
    run(cfg, tmp_path / "sweep" / drafter, progress=lambda label: None)
    return tmp_path / "sweep"


def by_hand(b: int) -> dict[str, float]:
    """The fake's steady steps at B: plain 10 + B, verify 10 + 3B, idle plain + 3; the speculative
    pass's drafted steps 10 + 3B + 2·2B, its undrafted ones 10 + B."""
    plain, verify = 10.0 + b, 10.0 + 3 * b
    drafted, undrafted = verify + 4 * b, plain
    t_step = S * drafted + (1 - S) * undrafted
    return {"plain": plain, "verify": verify, "idle": plain + IDLE_MS, "t_step": t_step}


def predict(sweep: Path, out: Path, *more: str) -> dict:
    args = [f"calibrate={sweep}", "drafter=ngram", "al=1.8", "d=2", "batch_sizes=[1,2]", "context_len=512"]
    result, _ = build([*args, f"out={out}", *more])
    return result


def test_the_k0_tax_is_fitted_from_the_idle_pass_and_every_undrafted_step_pays_it(tmp_path):
    sweep = measure(tmp_path)
    steps = calibration_steps(sweep)
    assert [(u.batch_size, u.t_plain_ms, u.t_idle_ms) for u in steps.undrafted] == [(1, 11.0, 14.0), (2, 12.0, 15.0)]
    assert steps.notes == []
    result = predict(sweep, tmp_path / "out", "draft_share=0.5")
    tax = result["calibration"]["k0_tax"]
    assert (tax["ms"], tax["us_per_request"], tax["form"]) == (pytest.approx(IDLE_MS), 0.0, "constant")
    assert [p["held_out_error"] for p in tax["points"]] == [0.0, 0.0]  # each B's tax is the other's
    assert result["efficiency"]["k0_tax_ms"] == pytest.approx(IDLE_MS)
    assert "a step without a draft costs a plain step plus the K=0 tax fitted (calibration)" in " ".join(
        result["notes"]
    )
    for p in result["points"]:
        drafted = p["t_verify_ms"] + p["t_draft_ms"]
        undrafted = p["t_plain_ms"] + IDLE_MS + p["t_draft_ms"]  # the tax: 1.5 ms of the mean step here
        assert p["t_step_ms"] == pytest.approx(0.5 * drafted + 0.5 * undrafted)
        assert p["speedup"] == pytest.approx(p["t_plain_ms"] * p["tokens_per_step"] / p["t_step_ms"])
    # a GPU of the table never measured the tax: its undrafted step is a plain one
    gpu, _ = build(["target.model=" + str(tmp_path / "target"), "gpu=h200_sxm", "drafter=ngram", "al=1.8", "d=2"])
    assert gpu["efficiency"]["k0_tax_ms"] == 0.0
    p = gpu["points"][0]
    assert p["t_step_ms"] == pytest.approx(p["t_verify_ms"] + p["t_draft_ms"])  # draft_share 1: all drafted
    # drafted steps keep T_verif(B(1+D)) as measured: every step drafting, the tax costs nothing
    every, _ = build([f"calibrate={sweep}", "drafter=ngram", "al=1.8", "d=2", "batch_sizes=[1]", "context_len=512"])
    p = every["points"][0]
    assert p["t_step_ms"] == pytest.approx(p["t_verify_ms"] + p["t_draft_ms"])


def test_a_lookup_drafters_cost_is_its_step_less_the_verify_and_idle_steps_in_their_shares(tmp_path, capsys):
    sweep = measure(tmp_path)
    drafted = {p["batch_size"]: p for p in calibration_steps(sweep).drafted}
    measured = {}
    for b in (1, 2):
        hand = by_hand(b)
        # T_step − [s·T_verif(B(1+D)) + (1 − s)·T_idle(B)]: 5/3 ms at B = 1, 13/3 at B = 2 (the
        # steps' median, 17 and 24 ms, would give 11/3 and 25/3)
        measured[b] = hand["t_step"] - (S * hand["verify"] + (1 - S) * hand["idle"])
        assert drafted[b]["t_step_ms"] == pytest.approx(hand["t_step"])
        assert drafted[b]["t_draft_ms"] == pytest.approx(measured[b])
    assert measured[1] == pytest.approx(5 / 3) and measured[2] == pytest.approx(13 / 3)
    # least squares of (B·u − measured) / T_step
    weights = {b: 1 / by_hand(b)["t_step"] ** 2 for b in (1, 2)}
    per_request_ms = sum(b * measured[b] * weights[b] for b in (1, 2)) / sum(b * b * weights[b] for b in (1, 2))
    assert (
        main([f"calibrate={sweep}", "drafter=ngram", "al=1.8", "d=2", "batch_sizes=[1,2]", f"out={tmp_path / 'o'}"])
        == 0
    )
    result = read_whatif_file(tmp_path / "o")
    lookup = result["calibration"]["t_draft"]["lookup_us_per_request"]
    assert lookup["fitted"] and lookup["value"] == pytest.approx(per_request_ms * 1e3)
    assert result["efficiency"]["lookup_us_per_request"] == pytest.approx(per_request_ms * 1e3)
    for p in lookup["points"]:
        b = p["batch_size"]
        assert p["error"] == pytest.approx((b * per_request_ms - measured[b]) / by_hand(b)["t_step"], abs=1e-4)
        # held out: the other B's cost per request, at this B
        other = 3 - b
        assert p["held_out_error"] == pytest.approx(
            (b * measured[other] / other - measured[b]) / by_hand(b)["t_step"], abs=1e-4
        )
    for p in result["points"]:
        assert p["t_draft_ms"] == pytest.approx(p["batch_size"] * per_request_ms)
    # no model drafter measured: its per-pass overhead stays the GPU constant, and the output says so
    overhead = result["calibration"]["t_draft"]["draft_pass_overhead_ms"]
    assert overhead == {"fitted": False, "value": Efficiency().draft_pass_overhead_ms}
    shown = capsys.readouterr().out
    kept = "T_draft: draft_pass_overhead_ms 0.44 ms kept (the GPU constant: no such drafter measured)"
    assert f"T_draft: lookup_us_per_request {per_request_ms * 1e3:.4g} us fitted" in shown and kept in shown
    assert kept in result["provenance"]["step_costs"] and "K=0 tax 3 ms a step (constant)" in shown
    # whatif.html shows what was fitted beside the step costs, a row per measured point
    page = (tmp_path / "o" / "whatif.html").read_text().replace(' class="num"', "")
    assert f"Calibrated on {sweep}" in page and result["calibration"]["fitted_beside"] in page
    for p in result["calibration"]["k0_tax"]["points"]:
        assert f"<td>{p['t_idle_ms']:.2f}</td><td>{p['tax_ms']:+.2f}</td>" in page
    for p in lookup["points"]:
        cells = f"<td>{p['t_draft_ms']:.2f}</td><td>{p['t_step_ms']:.2f}</td><td>{p['error']:+.1%}</td>"
        assert cells in page


def test_runs_before_schema_12_price_an_undrafted_step_as_plain_decoding_and_say_so(tmp_path, capsys):
    sweep = measure(tmp_path)
    as_version_11(sweep / "ngram" / "summary.json")
    steps = calibration_steps(sweep)
    assert steps.undrafted == []
    # the undrafted steps taken at plain decoding's cost: 8/3 ms at B = 1, 16/3 at B = 2
    for p in steps.drafted:
        hand = by_hand(p["batch_size"])
        assert p["t_draft_ms"] == pytest.approx(hand["t_step"] - (S * hand["verify"] + (1 - S) * hand["plain"]))
    assert [round(p["t_draft_ms"] * 3) for p in steps.drafted] == [8, 16]
    assert main([f"calibrate={sweep}", "drafter=ngram", "al=1.8", "d=2", f"out={tmp_path / 'o'}"]) == 0
    result = read_whatif_file(tmp_path / "o")
    assert result["calibration"]["k0_tax"] is None and result["efficiency"]["k0_tax_ms"] == 0.0
    shown = capsys.readouterr().out
    for said in ("no run there measured T_idle", "2 operating point(s) without T_idle", "K=0 tax not measured"):
        assert said in shown
    assert any(n.startswith("calibration: no run there measured T_idle") for n in result["notes"])


def test_a_model_drafters_pass_overhead_is_fitted_to_its_measured_draft_cost_and_held_out():
    target = shape_of(SMALL)
    machine = Fit(0.05, 0.5, 3.0, tile_rows=None)
    head = head_shape("eagle3", target, None)
    truth = replace(machine, draft_pass_overhead_ms=0.9).hardware()
    points = []
    for b in (1, 4):
        for d in (1, 3, 5):
            t = draft_ms("eagle3", d, b, 256, target, head, truth)
            points.append(Drafted("eagle3", b, d, 256, t_draft_ms=t, t_step_ms=t + 20, draft=head))
    assert calibrate.fit_draft(target, machine, points) == pytest.approx(0.9, rel=1e-6)
    rows = calibrate.draft_errors(target, machine, points)
    assert max(abs(e) for _, e, h in rows) < 1e-9 and max(abs(h) for _, e, h in rows) < 1e-9
    # one point 2 ms slower: in the fit its error is a share of its step, held out larger
    slow = [replace(points[0], t_draft_ms=points[0].t_draft_ms + 2.0), *points[1:]]
    (first, in_fit, held), *_ = calibrate.draft_errors(target, machine, slow)
    assert held == pytest.approx(-2.0 / first.t_step_ms, rel=1e-6) and abs(held) > abs(in_fit) > 0
    # a draft cheaper than the model's passes without any overhead: the overhead is 0, not below
    cheap = [replace(p, t_draft_ms=0.01) for p in points]
    assert calibrate.fit_draft(target, machine, cheap) == 0.0
    # the fitted value is what the machine's hardware drafts with; unfitted, the GPU constant
    assert replace(machine, draft_pass_overhead_ms=0.9).hardware().eff.draft_pass_overhead_ms == 0.9
    assert machine.hardware().eff.draft_pass_overhead_ms == Efficiency().draft_pass_overhead_ms == 0.44
    assert machine.hardware().eff.lookup_us_per_request == Efficiency().lookup_us_per_request


def test_the_tax_is_a_line_in_b_only_where_three_batch_sizes_or_more_hold_it():
    def at(b: int, tax: float) -> Undrafted:
        return Undrafted(b, 100, 10.0 + b, 10.0 + b + tax)

    two = [at(1, 1.0), at(4, 2.0)]
    assert calibrate.fit_tax(two) == calibrate.Tax(1.5)  # two B: the constant, their mean
    line = [at(b, 1.0 + 0.5 * b) for b in (1, 4, 16)]
    fitted = calibrate.fit_tax(line)
    assert (fitted.ms, fitted.us_per_request, fitted.form) == (pytest.approx(1.0), pytest.approx(500.0), "linear in B")
    assert all(abs(h) < 1e-9 for _, _, h in calibrate.tax_errors(line))
    flat = [at(1, 1.0), at(4, 1.2), at(16, 0.9)]  # no trend in B: the constant predicts them better
    assert calibrate.fit_tax(flat).form == "constant"
    # idle steps measured faster than plain ones (noise): no tax, never a negative cost, and said
    faster = [at(1, -0.5), at(4, -0.1)]
    assert calibrate.fit_tax(faster) == calibrate.Tax(0.0)
    points = [{"tax_ms": p.tax_ms} for p in faster]
    record = {"k0_tax": {"ms": 0.0, "us_per_request": 0.0, "form": "constant", "points": points}}
    record["t_draft"] = {
        k: {"fitted": False, "value": 1.0} for k in ("draft_pass_overhead_ms", "lookup_us_per_request")
    }
    assert fitted_beside_line(record).startswith(
        "K=0 tax 0 ms a step (constant; measured -0.30 ms on average, taken as 0)"
    )
    ((_, in_fit, held),) = calibrate.tax_errors([at(2, 1.0)])
    assert in_fit == pytest.approx(0.0) and math.isnan(held)


def test_calibrate_on_a_model_drafters_runs_fits_its_pass_overhead_and_predicts_with_it(tmp_path, capsys):
    head = tmp_path / "head"
    head.mkdir()
    config = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 16, "num_hidden_layers": 1}
    (head / "config.json").write_text(json.dumps(config | {"vocab_size": 100, "num_attention_heads": 8}))
    every = {f"c{i}#0": [2] * 6 for i in range(4)}  # every step drafts: T_draft = 2 ms x 2B drafts
    sweep = measure(tmp_path, f"drafter.model={head}", drafter="eagle3", script=every)
    args = [f"calibrate={sweep}", "drafter=eagle3", "al=2.5", "d=2", f"drafter.model={head}", "batch_sizes=[1]"]
    result, _ = build([*args, f"out={tmp_path / 'o'}"])
    overhead = result["calibration"]["t_draft"]["draft_pass_overhead_ms"]
    assert overhead["fitted"] and result["efficiency"]["draft_pass_overhead_ms"] == overhead["value"] > 0.44
    b1 = next(p for p in overhead["points"] if p["batch_size"] == 1)
    assert (b1["t_draft_ms"], b1["t_step_ms"]) == (pytest.approx(4.0), pytest.approx(17.0))
    # the prediction at the measured point drafts with the fitted overhead: off by the record's error
    at, _ = build([*args, f"context_len={b1['context']}", f"out={tmp_path / 'o'}"])
    (p,) = at["points"]
    assert p["t_draft_ms"] - 4.0 == pytest.approx(b1["error"] * 17.0, abs=1e-3)
    assert abs(b1["error"]) < 0.05
