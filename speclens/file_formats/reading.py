"""The public reader: a run dir or a sweep dir as typed summaries and pandas frames, for notebooks
and other tools (docs/api.md). Record files are read on first use; every summary version is
migrated to today's layout on reading. Nothing is handed out without what it is: a Run carries its
provenance, and every row of a Sweep's frames its run's identity columns."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from speclens.errors import SpeclensError
from speclens.figures.summary import RunSummary
from speclens.file_formats.records import ENGINE_STEP_COLUMNS, read_parquet
from speclens.file_formats.run_files import (
    ENGINE_STEPS_FILE,
    OUTPUTS_FILE,
    REQUESTS_FILE,
    STEPS_FILE,
    holding,
    read_outputs,
    read_stamp,
)
from speclens.file_formats.summary_file import SUMMARY_FILE, read_summary
from speclens.provenance import IDENTITY_COLUMNS, Provenance

# The columns read_sweep adds to every record row: which run it came from, that run's settings and
# what its figures are (speclens/provenance.py IDENTITY_COLUMNS: source, runner, engine, dtype,
# model_runner, setting); batch_size is a column of every record already.
RUN_COLUMNS = ("run", "drafter", "d", "temperature", *IDENTITY_COLUMNS)


class Run:
    """One finished run: `summary` (the typed RunSummary), `stamp` (its config, versions and
    fingerprints), and its records as DataFrames read on first use."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not (self.path / SUMMARY_FILE).is_file():
            raise SpeclensError(f"{self.path} holds no finished run (no {SUMMARY_FILE})")
        self.summary: RunSummary = read_summary(self.path)
        self.stamp: dict[str, Any] = read_stamp(self.path)

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r}: {self.summary.label}, AL {self.summary.al}, {self.provenance.label()})"

    @property
    def provenance(self) -> Provenance:
        """What its figures are (measured, fake, synthetic, ...; runner, engine, dtype, setting):
        from summary.json, or for a summary before schema 11 from its stamp."""
        assert self.summary.provenance is not None  # the reader gives every summary its provenance
        return self.summary.provenance

    @property
    def drafter(self) -> str:
        return self.summary.drafter

    @property
    def d(self) -> int | None:
        return self.summary.d

    @property
    def temperature(self) -> float:
        return float(self.stamp.get("config", {}).get("sampling", {}).get("temperature") or 0.0)

    @cached_property
    def steps(self) -> pd.DataFrame:
        """One row per request per drafted verification step."""
        return read_parquet(self.path / STEPS_FILE)

    @cached_property
    def requests(self) -> pd.DataFrame:
        """One row per request and turn (and batch size)."""
        return read_parquet(self.path / REQUESTS_FILE)

    @cached_property
    def engine_steps(self) -> pd.DataFrame:
        """One row per engine step of every pass (empty for runs from before they were recorded)."""
        path = self.path / ENGINE_STEPS_FILE
        return read_parquet(path) if path.is_file() else pd.DataFrame(columns=ENGINE_STEP_COLUMNS)

    @cached_property
    def outputs(self) -> pd.DataFrame:
        """Each turn's output: its ids, token ids and text."""
        return pd.DataFrame(read_outputs(self.path / OUTPUTS_FILE))


class Sweep:
    """The finished runs under a folder (a sweep dir, a nightly, any tree of run dirs), and their
    records concatenated with each run's RUN_COLUMNS."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise SpeclensError(f"{self.path} is not a folder")
        self.runs = [Run(folder) for folder in holding(self.path, SUMMARY_FILE)]
        if not self.runs:
            raise SpeclensError(f"{self.path} holds no finished run (no {SUMMARY_FILE} under it)")

    def __repr__(self) -> str:
        return f"Sweep({str(self.path)!r}: {len(self.runs)} runs)"

    def _concatenated(self, file: str) -> pd.DataFrame:
        # Read from the files, not through each Run's cached frame: the sweep's frame is the one copy.
        frames = [self._tagged(read_parquet(run.path / file), run) for run in self.runs]
        return pd.concat(frames, ignore_index=True)

    def _tagged(self, frame: pd.DataFrame, run: Run) -> pd.DataFrame:
        values = {
            "run": run.path.relative_to(self.path).as_posix(),
            "drafter": run.drafter,
            "d": pd.array([run.d] * len(frame), dtype="Int64"),
            "temperature": run.temperature,
            **run.provenance.columns(),
        }
        return frame.assign(**values)

    @cached_property
    def steps(self) -> pd.DataFrame:
        return self._concatenated(STEPS_FILE)

    @cached_property
    def requests(self) -> pd.DataFrame:
        return self._concatenated(REQUESTS_FILE)


def read_run(path: str | Path) -> Run:
    """The finished run in the run dir `path`."""
    return Run(path)


def read_sweep(path: str | Path) -> Sweep:
    """Every finished run under `path`."""
    return Sweep(path)
