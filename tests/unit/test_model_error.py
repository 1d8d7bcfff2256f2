"""The step-cost model's error held out by source (speclens/gpu_model/model_error.py): the stored figures are
what leaving each source out gives, and every prediction carries the interval they make, saying
what it was derived on (tests/unit/test_nested_intervals.py: how far it covers, and what ships)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from speclens.file_formats.whatif_file import read_whatif_file
from speclens.gpu_model.model_error import HELD_OUT, UNSCORED_WIDENING, case_error, held_out, leave_one_source_out
from speclens.gpu_model.step_cost import Efficiency

DATA = json.loads((Path(__file__).resolve().parents[1] / "data" / "published_speedups.json").read_text())


def test_the_stored_held_out_errors_are_what_leaving_each_source_out_gives():
    cases, models = DATA["cases"], DATA["models"]
    errors = leave_one_source_out(cases, models)
    assert held_out(cases, models, errors) == HELD_OUT
    # held out is no better than in-sample (the shipped constant was fitted on all of these cases)
    in_sample = statistics.median(abs(case_error(c, models, Efficiency())) for c in cases)
    assert HELD_OUT.in_sample_median_abs == round(in_sample, 3) <= HELD_OUT.median_abs
    assert HELD_OUT.in_sample_worst_abs <= HELD_OUT.worst_abs


def test_the_interval_is_the_nested_rules_and_says_how_far_it_held():
    low, high = HELD_OUT.interval(2.0)
    assert (low, high) == pytest.approx((2.0 / (1 + HELD_OUT.high), 2.0 / (1 + HELD_OUT.low)))
    assert low < 2.0 < high
    text = HELD_OUT.describe()
    assert text.startswith("80% range derived on published GPU speedups (31 cases, 9 sources")
    assert f"held {HELD_OUT.nested_covered} of the 31 published speedups (87%)" in text
    assert "8 of 10" not in text and "in-sample 16%, 42%" in text


def whatif(tmp_path, *extra: str) -> dict:
    from evals.whatif import main
    from tests.unit.test_whatif import SMALL, write_config

    target = write_config(tmp_path / "target", {**SMALL, "num_hidden_layers": 16})
    args = [f"target.model={target}", "gpu=h200_sxm", "batch_sizes=[1,8]", *extra, f"out={tmp_path / 'out'}"]
    assert main(args) == 0
    return read_whatif_file(tmp_path / "out")


def test_every_whatif_prediction_carries_its_interval(tmp_path, capsys):
    result = whatif(tmp_path, "drafter=eagle3", "acceptance=[0.8,0.5]")
    for p in result["points"]:
        low, high = HELD_OUT.interval(p["speedup"])
        # held at its tokens per step, which bounds any speedup
        assert p["speedup_interval"] == pytest.approx([low, min(high, p["tokens_per_step"])], abs=1e-4)
        assert p["speedup_interval_derived_on"] == HELD_OUT.derived_on  # vLLM's EAGLE-3: the scored path
    top = result["best"][0]
    assert top["speedup_interval"][0] < top["speedup"] < top["speedup_interval"][1]
    shown = capsys.readouterr().out
    assert "80% range" in shown and f"[{top['speedup_interval'][0]:.2f}, {top['speedup_interval'][1]:.2f}] " in shown
    assert result["speedup_interval"] == f"each point's speedup_interval: the {HELD_OUT.describe()}"


def test_a_path_no_published_case_scored_is_marked_and_widened(tmp_path, capsys):
    # vLLM runs n-gram steps without the async scheduling its plain steps keep: an engine term the
    # published cases were never scored with
    result = whatif(tmp_path, "drafter=ngram", "al=1.9", "d=3")
    for p in result["points"]:
        assert "not scored on this path (engine=vllm" in p["speedup_interval_derived_on"]
        low, high = p["speedup_interval"]
        scored_low, _ = HELD_OUT.interval(p["speedup"])
        assert math.log(p["speedup"] / low) == pytest.approx(
            UNSCORED_WIDENING * math.log(p["speedup"] / scored_low), abs=1e-3
        )
        assert high <= p["tokens_per_step"]
    assert "; ranges marked *: not scored on this path (engine=vllm" in result["speedup_interval"]
    shown = capsys.readouterr().out
    drafted = [b for b in result["best"] if b["drafter"] != "none"]
    for b in drafted:
        assert f"[{b['speedup_interval'][0]:.2f}, {b['speedup_interval'][1]:.2f}]*" in shown


def test_the_reports_gpu_section_says_what_its_ranges_were_derived_on():
    from types import SimpleNamespace

    from reports.gpu_prediction import _range, gpu_section
    from speclens.gpu_model.gpus import gpu_named
    from speclens.gpu_model.serving_engines import ENGINES
    from speclens.gpu_model.step_cost import Hardware

    hw = Hardware(gpu_named("h200_sxm"), engine=ENGINES["vllm"])
    runs = [SimpleNamespace(summary=SimpleNamespace(d=3, al=None, drafter=drafter)) for drafter in ("eagle3", "ngram")]
    text = " ".join(gpu_section(runs, hw).text)
    assert f"The {HELD_OUT.describe()}; docs/whatif.md." in text and "8 of 10" not in text
    # vLLM's n-gram steps lose its async scheduling: marked, once; its EAGLE-3 is on the scored path
    assert text.count("Ranges marked * were not scored on this path (engine=vllm: its term moves ngram's") == 1
    assert "eagle3's" not in text
    point = {"speedup": 1.5, "tokens_per_step": 3.0}
    low, high = HELD_OUT.interval(1.5)
    assert _range({**point, "drafter": "eagle3"}, hw) == f"[{low:.2f}, {high:.2f}]"
    wide = HELD_OUT.interval(1.5, widening=UNSCORED_WIDENING)
    assert _range({**point, "drafter": "ngram"}, hw) == f"[{wide[0]:.2f}, {wide[1]:.2f}]*"
