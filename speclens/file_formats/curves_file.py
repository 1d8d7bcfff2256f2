"""curves.parquet and curves.csv, the AL-vs-D curves' files (their names, writer and reader): one
row per drafter, D, domain and segment (with the proposer where a replay draws several), written
for a sweep by `reports.curves` and for one pass by `evals.replay`. The parquet is read back (a
replay kept, a sweep's report); the CSV holds the same rows for people and spreadsheets. Readers
of a replay's older curves fill the columns added since (reports/curves.py)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa

from speclens.errors import CorruptRecord

CURVES_FILE = "curves.parquet"
CURVES_CSV = "curves.csv"
CURVE_FILES = (CURVES_FILE, CURVES_CSV)


def write_curves_files(curves: pd.DataFrame, out_dir: Path) -> None:
    """curves.parquet and curves.csv in `out_dir`, the same rows."""
    curves.to_parquet(out_dir / CURVES_FILE, index=False)
    curves.to_csv(out_dir / CURVES_CSV, index=False)


def read_curves_file(folder: Path) -> pd.DataFrame:
    """The curves in `folder`'s curves.parquet, or CorruptRecord naming a file that is unreadable."""
    path = folder / CURVES_FILE
    try:
        return pd.read_parquet(path)
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise CorruptRecord(f"{path} is not a readable parquet file ({str(exc).splitlines()[0]})") from None
