"""bisect.json (issue 68, `python -m evals.bisect`): over an ordered list of target checkpoints,
which were measured, each one's AL (each kept as a run dir), and the first checkpoint whose AL
fell below the threshold. Declared once here as records; read back checked."""

from __future__ import annotations

from pathlib import Path

from speclens.file_formats.record_file import read_record, write_record
from speclens.schema import AL, Count, DraftLength, record

BISECT_FILE = "bisect.json"
BISECT_VERSION = 1


@record(kw_only=True)
class BisectStep:
    index: Count  # the checkpoint's place in `checkpoints`
    checkpoint: str
    al: AL
    below: bool
    run_dir: str


@record
class BisectFile:
    schema_version: int
    drafter: str
    d: DraftLength
    checkpoints: list[str]
    # the AL a checkpoint must reach: given (below=), or the first checkpoint's less 0.1
    threshold: float
    measured: list[BisectStep]
    # the first checkpoint below the threshold (null: none is)
    found_index: Count | None
    found_checkpoint: str | None
    verdict: str


def write_bisect_file(record_: BisectFile, out: Path) -> Path:
    return write_record(record_, out / BISECT_FILE)


def read_bisect_file(out: Path) -> BisectFile:
    return read_record(BisectFile, out / BISECT_FILE, "bisect (bisect.json)")
