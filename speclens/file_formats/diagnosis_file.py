"""diagnosis.json in a nightly's dir (issue 68): per drafter, how its AL moved against the
baseline night, how the model-free control (n-gram or suffix, the same prompts) moved, and what
that says to retrain. Declared once here as records; read back checked."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from speclens.file_formats.record_file import read_record, write_record
from speclens.schema import DraftLength, record

DIAGNOSIS_FILE = "diagnosis.json"
DIAGNOSIS_VERSION = 1
# realign: an MTP module with its target; adapt: a head (EAGLE-3, DFlash, DSpark, ...) trained
# further on the new target; distil: a draft model distilled or fine-tuned again; none: nothing to
# retrain (a model-free drafter, or a drafter that held); workload: the control moved with it, so
# the prompts' predictability changed, not the drafter's match to the target.
Verdict = Literal["realign", "adapt", "distil", "none", "workload"]


@record(kw_only=True)
class DrafterDiagnosis:
    drafter: str
    d: DraftLength
    # the night's AL minus the baseline's over the same prompts (domain `all`), its 95 % interval
    al_change: float
    interval: tuple[float, float] | None
    # the model-free control measured the same night (null: none was)
    control: str | None
    control_change: float | None
    control_interval: tuple[float, float] | None
    verdict: Verdict
    # the drafters' facts table's training cost of the remedy (none, low, medium, high)
    training_cost: str
    sentence: str


@record
class DiagnosisFile:
    schema_version: int
    night: str
    baseline_dir: str
    drafters: list[DrafterDiagnosis]


def write_diagnosis_file(record_: DiagnosisFile, night_dir: Path) -> Path:
    return write_record(record_, night_dir / DIAGNOSIS_FILE)


def read_diagnosis_file(night_dir: Path) -> DiagnosisFile:
    return read_record(DiagnosisFile, night_dir / DIAGNOSIS_FILE, "nightly diagnosis (diagnosis.json)")
