"""The step-cost model's error held out by source (speclens/gpu_model/model_error.py): the stored figures are
what leaving each source out gives, and every prediction carries the interval they make."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from speclens.gpu_model.model_error import HELD_OUT, case_error, held_out, leave_one_source_out, quantile
from speclens.gpu_model.step_cost import Efficiency

DATA = json.loads((Path(__file__).resolve().parents[1] / "data" / "published_speedups.json").read_text())


def test_the_stored_held_out_errors_are_what_leaving_each_source_out_gives():
    cases, models = DATA["cases"], DATA["models"]
    errors = leave_one_source_out(cases, models)
    assert held_out(cases, errors) == HELD_OUT
    # held out is worse than in-sample: the defaults were set on these cases
    in_sample = sorted(abs(case_error(c, models, Efficiency())) for c in cases)[len(cases) // 2]
    assert HELD_OUT.median_abs > in_sample


def test_the_interval_is_where_eight_of_ten_held_out_published_speedups_fell():
    low, high = HELD_OUT.interval(2.0)
    assert (low, high) == pytest.approx((2.0 / (1 + HELD_OUT.high), 2.0 / (1 + HELD_OUT.low)))
    assert low < 2.0 < high
    assert quantile([0.0, 1.0, 2.0, 3.0, 4.0], 0.1) == pytest.approx(0.4)


def test_every_whatif_prediction_carries_its_interval(tmp_path, capsys):
    from evals.whatif import main
    from tests.unit.test_whatif import SMALL, write_config

    target = write_config(tmp_path / "target", {**SMALL, "num_hidden_layers": 16})
    args = [f"target.model={target}", "gpu=h200_sxm", "drafter=eagle3", "acceptance=[0.8,0.5]", "batch_sizes=[1,8]"]
    assert main([*args, f"out={tmp_path / 'out'}"]) == 0
    result = json.loads((tmp_path / "out" / "whatif.json").read_text())
    for p in result["points"]:
        low, high = HELD_OUT.interval(p["speedup"])
        # held at its tokens per step, which bounds any speedup
        assert p["speedup_interval"] == pytest.approx([low, min(high, p["tokens_per_step"])], abs=1e-4)
    top = result["best"][0]
    assert top["speedup_interval"][0] < top["speedup"] < top["speedup_interval"][1]
    shown = capsys.readouterr().out
    assert "80% range" in shown and f"[{top['speedup_interval'][0]:.2f}, {top['speedup_interval'][1]:.2f}]" in shown
    assert "left out of the model's fit" in result["speedup_interval"]
