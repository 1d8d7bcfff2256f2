"""The nightly's per-drafter diagnosis after a fine-tune (reports/diagnosis.py, issue 68): a
learned drafter that fell while the model-free control held is stale, with its mechanism's remedy;
one that fell with the control is the workload; one that held, and the control itself, retrain
nothing."""

from __future__ import annotations

import pandas as pd
import pytest

from reports.diagnosis import diagnose, write_diagnosis
from speclens.file_formats.diagnosis_file import read_diagnosis_file


def night(*rows: tuple[str, int, float, float, float]) -> pd.DataFrame:
    """(drafter, d, al_diff, lo, hi) rows of domain `all`, plus a coding row that must be ignored."""
    frame = [
        {"drafter": r[0], "d": r[1], "domain": "all", "al_diff": r[2], "diff_ci95_lo": r[3], "diff_ci95_hi": r[4]}
        for r in rows
    ]
    frame.append(
        {"drafter": "eagle3", "d": 3, "domain": "coding", "al_diff": -2.0, "diff_ci95_lo": -2.1, "diff_ci95_hi": -1.9}
    )
    return pd.DataFrame(frame)


HELD = ("ngram", 3, 0.01, -0.02, 0.04)
FELL = ("ngram", 3, -0.3, -0.4, -0.2)


@pytest.mark.parametrize(
    "drafter, verdict, cost",
    [("eagle3", "adapt", "medium"), ("dflash", "adapt", "high"), ("mtp", "realign", "none (comes with the target)"),
     ("draft_model", "distil", "none (off-the-shelf) to high (distilled)")],
)  # fmt: skip
def test_a_learned_drafter_that_fell_beside_a_control_that_held_gets_its_mechanisms_remedy(drafter, verdict, cost):
    found = {(x.drafter, x.d): x for x in diagnose(night((drafter, 3, -0.42, -0.5, -0.33), HELD))}
    assert set(found) == {(drafter, 3), ("ngram", 3)}
    stale = found[(drafter, 3)]
    assert (stale.verdict, stale.training_cost, stale.control) == (verdict, cost, "ngram")
    assert (stale.al_change, stale.interval) == (-0.42, (-0.5, -0.33))
    assert (stale.control_change, stale.control_interval) == (0.01, (-0.02, 0.04))
    assert stale.sentence.startswith(
        f"{drafter} d=3: AL -0.420 [-0.500, -0.330] beside ngram d=3 +0.010 [-0.020, +0.040]"
    )
    assert "lost its match to the target" in stale.sentence
    assert found[("ngram", 3)].verdict == "none"


def test_a_drafter_that_fell_with_its_control_is_the_workload_and_one_that_held_retrains_nothing():
    found = {
        x.drafter: x for x in diagnose(night(("eagle3", 3, -0.4, -0.5, -0.3), ("mtp", 3, -0.05, -0.12, 0.02), FELL))
    }
    assert found["eagle3"].verdict == "workload" and "the prompts changed" in found["eagle3"].sentence
    assert found["mtp"].verdict == "none" and "it held" in found["mtp"].sentence


def test_without_a_control_the_remedy_says_a_workload_change_is_not_ruled_out():
    (only,) = diagnose(night(("eagle3", 3, -0.4, -0.5, -0.3)))
    assert only.verdict == "adapt" and only.control is None and "not ruled out" in only.sentence


def test_the_control_at_the_same_d_is_chosen_and_the_file_reads_back(tmp_path):
    rows = night(("eagle3", 5, -0.4, -0.5, -0.3), HELD, ("ngram", 5, -0.3, -0.4, -0.2))
    (eagle3,) = [x for x in write_diagnosis(rows, "n2", tmp_path, tmp_path / "n1") if x.drafter == "eagle3"]
    assert (eagle3.control_change, eagle3.verdict) == (-0.3, "workload")
    written = read_diagnosis_file(tmp_path)
    assert written.night == "n2" and written.baseline_dir == str((tmp_path / "n1").resolve())
    assert [x.drafter for x in written.drafters] == ["eagle3", "ngram", "ngram"]
