"""Change points over a nightly AL series (speclens/figures/drift.py, issue 68): a planted step is
found at its night with its size inside the interval, a creeping drift is found inside its creep,
and stationary nights raise an alarm at no more than the stated rate."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from benchmarks.drift_detection import false_alarm_rate, power
from reports.drift import change_line, drift_changes, write_drift
from speclens.figures.drift import DEFAULT_LEVEL, MIN_NIGHTS, find_changes, noise_of, threshold
from speclens.file_formats.drift_file import DRIFT_FILE, read_drift_file
from speclens.schema import to_plain


def nights(n: int, noise: float, seed: int) -> np.ndarray:
    return 2.5 + noise * np.random.default_rng(seed).standard_normal(n)


def test_a_step_is_found_at_its_night_with_its_size_inside_the_interval():
    series = nights(14, 0.02, seed=1)
    series[9:] -= 0.1
    (change,) = find_changes(series)
    assert change.index == 9
    assert change.interval[0] < -0.1 < change.interval[1] and change.interval[1] < 0
    assert change.before == pytest.approx(series[:9].mean()) and change.after == pytest.approx(series[9:].mean())
    assert change.size == pytest.approx(change.after - change.before)
    assert change.statistic > change.threshold == threshold(14)


def test_two_steps_are_two_changes_in_night_order():
    series = nights(20, 0.02, seed=2)
    series[6:] -= 0.15
    series[14:] += 0.2
    found = find_changes(series)
    assert [c.index for c in found] == [6, 14]
    assert found[0].size < 0 < found[1].size


def test_a_drift_that_creeps_over_several_nights_is_found_inside_its_creep():
    series = nights(16, 0.015, seed=3)
    series[5:11] -= np.linspace(0.03, 0.18, 6)  # 0.03 AL a night for six nights
    series[11:] -= 0.18
    found = find_changes(series)
    assert found and all(c.size < 0 for c in found)
    assert all(5 <= c.index <= 11 for c in found)
    # each size is its own split's difference of means: the creep's halves differ by about 0.1
    assert -0.2 < min(c.size for c in found) < -0.08


def test_identical_nights_with_one_shift_are_found_through_the_noise_floor():
    # greedy float32 repeats give the same AL every night: the scale is the floor, not zero
    series = np.array([2.4] * 6 + [2.3] * 3)
    (change,) = find_changes(series)
    assert change.index == 6 and change.size == pytest.approx(-0.1)
    assert noise_of(np.array([2.4] * 6)) == 1e-3


def test_too_few_nights_or_a_missing_night_find_nothing():
    assert find_changes([2.5, 2.5, 1.0][: MIN_NIGHTS - 1]) == []
    assert find_changes([2.5, 2.4, math.nan, 2.0, 2.0]) == []


def test_the_nights_own_standard_errors_widen_the_scale_where_larger():
    series = nights(10, 0.01, seed=4)
    series[5:] -= 0.05
    assert find_changes(series)  # 5 noise widths
    assert find_changes(series, standard_errors=[0.05] * 10) == []  # one


def test_stationary_nights_alarm_at_no_more_than_the_stated_rate_and_a_step_is_found_in_two_nights():
    rng = np.random.default_rng(680)
    rate = false_alarm_rate(rng, 600, 14, 0.02, DEFAULT_LEVEL)
    # the binomial's 99.9 % bound above the stated level over 600 histories
    assert rate <= DEFAULT_LEVEL + 3.1 * math.sqrt(DEFAULT_LEVEL * (1 - DEFAULT_LEVEL) / 600)
    # a test that alarmed at the median (not the 95th percentile) would be far above
    assert rate < 0.1
    assert power(rng, 200, 14, 0.02, 0.1, 2, DEFAULT_LEVEL) > 0.85


def history(al: dict[str, list[float]], **columns: list) -> pd.DataFrame:
    """A history of len(list) nights, one row per (drafter, night); other columns as given."""
    rows = []
    for drafter, values in al.items():
        for i, value in enumerate(values):
            extra = {name: column[i] for name, column in columns.items()}
            rows.append(
                {"night": f"2026-12-{i + 1:02d}", "drafter": drafter, "d": 3, "domain": "all", "al": value} | extra
            )
    return pd.DataFrame(rows)


def test_a_change_at_an_engine_upgrade_names_the_version_and_the_unmoved_control_has_none(tmp_path):
    versions = ["0.31.0"] * 5 + ["0.32.0"] * 4
    frame = history(
        {
            "eagle3": [2.80, 2.81, 2.79, 2.80, 2.81, 2.55, 2.56, 2.54, 2.55],
            "ngram": [1.9, 1.91, 1.9, 1.89, 1.9] + [1.9] * 4,
        },
        engine_version=versions,
    )
    (change,) = drift_changes(frame)
    assert (change.drafter, change.night, change.previous_night) == ("eagle3", "2026-12-06", "2026-12-05")
    assert change.causes == ["engine_version: 0.31.0 -> 0.32.0"]
    assert change.size == pytest.approx(2.55 - 2.802, abs=1e-6)
    changes = write_drift(frame, tmp_path / "history.parquet")
    written = read_drift_file(tmp_path / "history.parquet")
    assert written.changes == changes and (written.series, written.nights) == (2, 9)
    assert json.loads((tmp_path / DRIFT_FILE).read_text())["changes"] == to_plain(changes)
    assert "with it: engine_version: 0.31.0 -> 0.32.0" in change_line(change)


def test_nights_are_taken_in_the_order_the_history_appended_them_not_by_label():
    frame = history({"eagle3": [2.8, 2.8, 2.8, 2.8, 2.5, 2.5]})
    frame["night"] = ["b", "a", "d", "c", "f", "e"]  # free-text labels that do not sort
    (change,) = drift_changes(frame)
    assert (change.night, change.previous_night) == ("f", "c")
