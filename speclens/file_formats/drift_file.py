"""drift.json beside a nightly history (issue 68): the change points found in each (drafter, D,
domain)'s AL over the nights (speclens/figures/drift.py), each with what else changed at its
night. Declared once here as records; read back checked."""

from __future__ import annotations

from pathlib import Path

from speclens.file_formats.record_file import read_record, write_record
from speclens.schema import AL, Count, DraftLength, record

DRIFT_FILE = "drift.json"
DRIFT_VERSION = 1


@record(kw_only=True)
class DriftChange:
    """One shift in one series: AL `before` its `night` and `after` it (each the mean of its side of
    the split), `size` = after - before with its 95 % interval, and `causes`: the history's columns
    that changed between `previous_night` and `night` for that series (empty: none it records)."""

    drafter: str
    d: DraftLength
    domain: str
    night: str
    previous_night: str
    size: float
    interval: tuple[float, float]
    before: AL
    after: AL
    causes: list[str]


@record
class DriftFile:
    schema_version: int
    # The false-alarm rate per series: the probability a series with no change reports one.
    level: float
    method: str
    nights: Count
    series: Count
    changes: list[DriftChange]


def write_drift_file(record_: DriftFile, history: Path) -> Path:
    return write_record(record_, history.with_name(DRIFT_FILE))


def read_drift_file(history: Path) -> DriftFile:
    return read_record(DriftFile, history.with_name(DRIFT_FILE), "nightly drift (drift.json)")
