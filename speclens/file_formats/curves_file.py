"""curves.parquet and curves.csv, the AL-vs-D curves' files (their names, writer and reader): one
row per drafter, D, domain and segment (with the proposer where a replay draws several), written
for a sweep by `reports.curves` and for one pass by `evals.replay`. The parquet is read back (a
replay kept, a sweep's report); the CSV holds the same rows for people and spreadsheets. Readers
of a replay's older curves fill the columns added since (reports/curves.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pyarrow as pa

from speclens.errors import CorruptRecord
from speclens.schema import AL, Count, DraftLength, NonNegative, Rate, parse, record

CURVES_FILE = "curves.parquet"
CURVES_CSV = "curves.csv"
CURVE_FILES = (CURVES_FILE, CURVES_CSV)


@record
class CurveRow:
    """One point of one curve: a drafter's AL at one D over one domain and segment, in one mode
    (temperature, chat_template_kwargs, setting), with what it is (source, and the engine that
    computed it). Fields with defaults were added after the first replays were written."""

    drafter: str
    d: DraftLength
    domain: str
    al: AL | None
    # measured | replayed | estimated | fake: the kind of point (speclens/provenance.py); a replay's
    # points are replayed or estimated whatever engine's outputs they replay (runner, engine say that)
    source: str
    al_ci95_lo: AL | None = None
    al_ci95_hi: AL | None = None
    tokens_per_step: NonNegative | None = None
    temperature: NonNegative = 0.0
    segment: str = "all"
    chat_template_kwargs: str = ""
    setting: str = ""
    # v1 | v2 for n-gram (the model runner whose proposer drafted), empty for the others.
    proposer: str = ""
    input_tokens: Count | None = None
    context_extension: str | None = ""
    draft_share: Rate | None = None
    # The engine that computed the point (speclens/provenance.py IDENTITY_COLUMNS; `unknown` where the
    # record does not say): absent from replays' own files, which take them from replay.json.
    runner: str | None = None
    engine: str | None = None
    dtype: str | None = None
    model_runner: str | None = None


# The columns of curves.parquet and curves.csv, in their order (every CurveRow field).
CURVE_COLUMNS = [
    "drafter",
    "d",
    "domain",
    "al",
    "al_ci95_lo",
    "al_ci95_hi",
    "tokens_per_step",
    "source",
    "temperature",
    "segment",
    "chat_template_kwargs",
    "setting",
    "proposer",
    "input_tokens",
    "context_extension",
    "draft_share",
    "runner",
    "engine",
    "dtype",
    "model_runner",
]
assert sorted(CURVE_COLUMNS) == sorted(f.name for f in dataclasses.fields(CurveRow))


def write_curves_files(curves: pd.DataFrame, out_dir: Path) -> None:
    """curves.parquet and curves.csv in `out_dir`, the same rows."""
    curves.to_parquet(out_dir / CURVES_FILE, index=False)
    curves.to_csv(out_dir / CURVES_CSV, index=False)


def read_curves_file(folder: Path) -> pd.DataFrame:
    """The curves in `folder`'s curves.parquet (the columns it holds), every row checked against
    CurveRow; CorruptRecord naming the file, the row's field and the rule otherwise."""
    path = folder / CURVES_FILE
    try:
        frame = pd.read_parquet(path)
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise CorruptRecord(f"{path} is not a readable parquet file ({str(exc).splitlines()[0]})") from None
    # a figure that could not be computed is NaN in a frame, null in the record
    rows = frame.astype(object).where(frame.notna(), None).to_dict("records")
    parse(list[CurveRow], rows, path, "curves file")
    return frame
