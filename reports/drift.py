"""drift.json beside a nightly history (issue 68): the change points in each (drafter, D, domain)'s
AL over the nights (speclens/figures/drift.py), each with what else changed at that night.

A change's `causes` are the history's columns that differ between the night before it and its
night, for that series: the target checkpoint, the setting, what the figures are (source, runner,
engine and its version, dtype, model runner), the context extension and the number of prompts.
None listed: nothing else the history records changed at that night; the acceptance itself moved.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from speclens.figures.drift import DEFAULT_LEVEL, find_changes
from speclens.file_formats.drift_file import DRIFT_VERSION, DriftChange, DriftFile, write_drift_file

SERIES = ["drafter", "d", "domain"]
# What may move AL besides the drafter's match to the target, as the history's columns name it.
CAUSE_COLUMNS = [
    "target_fingerprint",
    "setting",
    "source",
    "runner",
    "engine",
    "engine_version",
    "dtype",
    "model_runner",
    "context_extension",
    "n_requests",
]
_Z95 = 1.959963984540054


def night_order(history: pd.DataFrame) -> list[str]:
    """The nights as the history appended them (a label need not sort: `night=` is free text)."""
    return list(dict.fromkeys(history.night.astype(str)))


def _night_standard_error(row: pd.Series) -> float:
    """One night's noise from its paired interval against its baseline (that difference has two
    nights' noise in it); NaN for a night without a baseline."""
    lo, hi = row.get("diff_ci95_lo"), row.get("diff_ci95_hi")
    if lo is None or hi is None or pd.isna(lo) or pd.isna(hi):
        return math.nan
    return (float(hi) - float(lo)) / (2 * _Z95) / math.sqrt(2)


def _causes(before: pd.Series, after: pd.Series) -> list[str]:
    found = []
    for column in CAUSE_COLUMNS:
        if column not in before.index:
            continue
        old, new = before[column], after[column]
        if (pd.isna(old) and pd.isna(new)) or old == new:
            continue
        found.append(f"{column}: {old} -> {new}")
    return found


def drift_changes(history: pd.DataFrame, level: float = DEFAULT_LEVEL) -> list[DriftChange]:
    """Every change found, one per (drafter, D, domain) and night, oldest night first."""
    order = {night: i for i, night in enumerate(night_order(history))}
    found = []
    for (drafter, d, domain), rows in history.assign(night=history.night.astype(str)).groupby(SERIES, sort=True):
        series = rows.assign(_order=rows.night.map(order)).sort_values("_order").drop_duplicates("night", keep="last")
        series = series[series.al.notna()]
        ses = [_night_standard_error(r) for _, r in series.iterrows()]
        for change in find_changes(series.al.to_numpy(dtype=float), ses, level=level):
            before, after = series.iloc[change.index - 1], series.iloc[change.index]
            found.append(
                DriftChange(
                    drafter=str(drafter),
                    d=int(d),
                    domain=str(domain),
                    night=after.night,
                    previous_night=before.night,
                    size=change.size,
                    interval=change.interval,
                    before=change.before,
                    after=change.after,
                    causes=_causes(before, after),
                )
            )
    return sorted(found, key=lambda c: (order[c.night], c.drafter, c.d, c.domain))


def write_drift(history: pd.DataFrame, store: Path, level: float = DEFAULT_LEVEL) -> list[DriftChange]:
    """drift.json beside the history store; returns its changes."""
    changes = drift_changes(history, level)
    method = (
        "binary segmentation, standardized mean-shift statistic, its no-change quantile simulated per "
        "number of nights (speclens/figures/drift.py)"
    )
    nights, series = len(night_order(history)), int(history.groupby(SERIES).ngroups)
    write_drift_file(DriftFile(DRIFT_VERSION, level, method, nights, series, changes), store)
    return changes


def change_line(change: DriftChange) -> str:
    lo, hi = change.interval
    causes = "; ".join(change.causes) or "nothing else the history records changed"
    return (
        f"drafter={change.drafter} d={change.d} domain={change.domain}: AL {change.before:.3f} -> "
        f"{change.after:.3f} ({change.size:+.3f}, 95% CI [{lo:+.3f}, {hi:+.3f}]) from night {change.night}; "
        f"with it: {causes}"
    )
