"""whatif.json, the file format (its reader and writer; evals/whatif.py predicts what it holds):
per drafter, D, batch size and context, the predicted step costs, speedup and tokens/s with their
ranges (`points`), the best of them (`best`), the machine they were predicted for (`gpu`, `tp`,
`weights`, `engine`, `calibration`) and what every figure is (`provenance`: predicted, from which
acceptance and which step costs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from speclens import provenance as prov
from speclens.errors import CorruptRecord
from speclens.files import write_json_atomic

WHATIF_FILE = "whatif.json"

# What every whatif.json holds (a file without one is not a prediction speclens wrote).
WHATIF_KEYS = ("gpu", "tp", "points", "best", "provenance")


def write_whatif_file(result: dict[str, Any], out_dir: Path) -> Path:
    """whatif.json in `out_dir`, written whole or not at all."""
    path = out_dir / WHATIF_FILE
    write_json_atomic(result, path)
    return path


def read_whatif_file(out_dir: Path) -> dict[str, Any]:
    """The whatif.json in `out_dir`, or CorruptRecord naming what it is not: readable JSON, an
    object with WHATIF_KEYS whose `points` are a list of records and whose provenance says predicted."""
    path = out_dir / WHATIF_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptRecord(f"{path} is unreadable ({exc})") from None
    missing = [k for k in WHATIF_KEYS if not isinstance(data, dict) or k not in data]
    if missing:
        raise CorruptRecord(f"{path} does not have the layout of a whatif.json (it lacks {', '.join(missing)})")
    if not isinstance(data["points"], list) or not all(isinstance(p, dict) for p in data["points"]):
        raise CorruptRecord(f"{path}: its points are not a list of predicted points")
    if not isinstance(data["provenance"], dict) or data["provenance"].get("source") != prov.PREDICTED:
        raise CorruptRecord(f"{path}: its provenance does not say its figures are predicted ({data['provenance']!r})")
    return data
