"""The JSON Schema of every file format speclens writes, generated from its record types (one
schema library: speclens/schema.py), and written to docs/schemas/ for users and other tools to
validate against: `python -m speclens.file_formats.schemas [folder]` (docs/schemas by default).
tests/unit/test_schemas.py keeps the committed files current, and every JSON file the suite writes
is validated against them (tests/conftest.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from speclens.figures.summary import ReplayRecord, RunSummary
from speclens.file_formats.curves_file import CurveRow
from speclens.file_formats.diagnosis_file import DIAGNOSIS_FILE, DiagnosisFile
from speclens.file_formats.drift_file import DRIFT_FILE, DriftFile
from speclens.file_formats.load_file import LOAD_FILE, LoadFile, LoadServeFile
from speclens.file_formats.profile_file import PROFILE_FILE, ProfileFile
from speclens.file_formats.ranking_file import LengthRankingRow, RankingRow
from speclens.file_formats.run_files import FAILURE_FILE, STAMP_FILE, FailureRecord, RunStamp
from speclens.file_formats.serve_file import SERVE_FILE, ServePlan, ServePlans
from speclens.file_formats.summary_file import REPLAY_FILE, SUMMARY_FILE
from speclens.file_formats.whatif_file import WHATIF_FILE, WhatifFile
from speclens.files import write_text_atomic
from speclens.schema import json_schema

# File name -> (the record type it holds, what it is); a table's rows under `<table>.row`.
FORMATS: dict[str, tuple[Any, str]] = {
    SUMMARY_FILE: (RunSummary, "a run's figures"),
    REPLAY_FILE: (ReplayRecord, "what a replay measured"),
    STAMP_FILE: (RunStamp, "what a run was measured with and by"),
    SERVE_FILE: (
        ServePlan | ServePlans | LoadServeFile,
        "what to serve: one plan, or one per mode under by_temperature; beside a load ladder, its load_policy",
    ),
    WHATIF_FILE: (WhatifFile, "speedups predicted on a named GPU"),
    FAILURE_FILE: (FailureRecord, "a failed sweep job's reason"),
    PROFILE_FILE: (ProfileFile, "acceptance profiles, speclens's layout"),
    LOAD_FILE: (LoadFile, "a request-rate ladder: its stages and where speculation stops paying"),
    DIAGNOSIS_FILE: (
        DiagnosisFile,
        "per drafter after a target fine-tune: its AL change, the control's, what to retrain",
    ),
    DRIFT_FILE: (DriftFile, "the change points in a nightly history's AL series, each with what changed with it"),
    "curves.row": (CurveRow, "one row of curves.parquet / curves.csv"),
    "ranking.row": (RankingRow, "one row of ranking.csv"),
    "ranking_by_length.row": (LengthRankingRow, "one row of ranking_by_length.csv"),
}
DOCS_FOLDER = Path(__file__).resolve().parents[2] / "docs" / "schemas"


def schema_name(file: str) -> str:
    """docs/schemas' file for a format: summary.json -> summary.schema.json."""
    return file.rsplit(".", 1)[0] + ".schema.json"


def schema_documents() -> dict[str, str]:
    """Each format's schema file name and its text, as written to docs/schemas/."""
    out = {}
    for file, (kind, what) in FORMATS.items():
        schema = json_schema(kind, title=f"{file}: {what}")
        out[schema_name(file)] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return out


def write_schema_docs(folder: Path = DOCS_FOLDER) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in schema_documents().items():
        write_text_atomic(folder / name, text)
        written.append(folder / name)
    return written


if __name__ == "__main__":
    for path in write_schema_docs(Path(sys.argv[1]) if len(sys.argv) > 1 else DOCS_FOLDER):
        print(path)
