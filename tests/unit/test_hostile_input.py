"""Hostile input refused in one line before anything is computed on it (issue 33's table): each
test names its row."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

import speclens
from evals.run import run
from speclens.errors import CorruptRecord
from tests.unit.conftest import compose_run, fake_overrides

ROWS = [{"question_id": f"q{i}", "category": "coding", "turns": [f"task {i}"]} for i in range(3)]


@pytest.fixture
def fake_run(tmp_path) -> Path:
    out = tmp_path / "run"
    run(compose_run(*fake_overrides(tmp_path, ROWS), "drafter=ngram", "d=3"), out, progress=lambda label: None)
    return out


@pytest.mark.parametrize("figure", ["NaN", "Infinity", "-Infinity"])
def test_p1_a_summary_holding_a_non_finite_figure_is_a_corrupt_record_naming_its_key(fake_run, figure):
    path = fake_run / "summary.json"
    text = path.read_text()
    data = json.loads(text)
    assert math.isfinite(data["by_domain"]["coding"]["al"])
    data["by_domain"]["coding"]["al"] = "@@"
    path.write_text(json.dumps(data).replace('"@@"', figure))
    with pytest.raises(CorruptRecord, match=r"summary.json holds a non-finite figure at by_domain\.coding\.al"):
        _ = speclens.read_run(fake_run).summary
    path.write_text(text)
    assert speclens.read_run(fake_run).summary.al == data["al"]


def test_api2_the_bootstraps_arguments_are_checked_by_name():
    steps = pd.DataFrame({"request_id": ["a", "a", "b"], "num_accepted": [1, 2, 0]})
    assert speclens.al_ci95(steps, seed=0, samples=10) is not None
    for bad in ({"seed": 0, "samples": 0}, {"seed": -1}, {"seed": 1.5}, {"seed": 0, "samples": True}):
        name = "samples" if "samples" in bad else "seed"
        with pytest.raises(ValueError, match=f"al_ci95: {name} must be an integer"):
            speclens.al_ci95(steps, **bad)


def test_api2_nan_or_negative_counts_are_refused_not_read_as_zero():
    assert speclens.al(pd.DataFrame({"request_id": ["a", "b"], "num_accepted": [1.0, 2.0]})) == 2.5
    for bad in (float("nan"), -1.0, float("inf")):
        with pytest.raises(ValueError, match="steps.num_accepted holds a count that is not a finite number"):
            speclens.al(pd.DataFrame({"request_id": ["a", "b"], "num_accepted": [1.0, bad]}))
