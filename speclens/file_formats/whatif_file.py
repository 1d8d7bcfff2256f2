"""whatif.json, the file format (its reader and writer; evals/whatif.py predicts what it holds):
per drafter, D, batch size and context, the predicted step costs, speedup and tokens/s with their
ranges (`points`), the best of them (`best`), the machine they were predicted for (`gpu`, `tp`,
`weights`, `engine`, `calibration`) and what every figure is (`provenance`: predicted, from which
acceptance and which step costs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from speclens.errors import CorruptRecord
from speclens.file_formats.load_file import CrossoverRow, LoadStage
from speclens.files import write_json_atomic
from speclens.schema import AL, OPEN_RECORD_CONFIG, Count, NonNegative, parse, record

WHATIF_FILE = "whatif.json"

# What every whatif.json holds (a file without one is not a prediction speclens wrote).
WHATIF_KEYS = ("gpu", "tp", "points", "best", "provenance")


@record
class WhatifProvenance:
    """What a prediction's figures are: predicted, from which acceptance and which step costs."""

    __pydantic_config__ = OPEN_RECORD_CONFIG

    source: Literal["predicted"]
    acceptance: dict[str, Any] | None = None
    step_costs: Any = None


@record
class WhatifPoint:
    """One predicted point: a drafter at D, B requests and a context length on the machine named."""

    __pydantic_config__ = OPEN_RECORD_CONFIG

    drafter: str
    # 0 in `best` where plain decoding is best at that point
    d: Count | None
    batch_size: Count
    context_len: Count
    speedup: NonNegative | None
    al: AL | None = None
    tokens_per_step: NonNegative | None = None
    speedup_interval: list[NonNegative] | None = None


@record(kw_only=True)
class PredictedStage(LoadStage):
    """A stage of a ladder predicted on a GPU (load.json's row, source predicted), with its output
    tokens/s and TPOT p50 at the step model's held-out error either way."""

    output_tokens_per_s_range: list[NonNegative]
    tpot_ms_range: list[NonNegative] | None = None


@record(kw_only=True)
class PredictedCrossover(CrossoverRow):
    """A predicted ladder's crossover, with each rate's range at the step model's held-out error."""

    throughput_rate_range: list[NonNegative] | None = None
    tpot_rate_range: list[NonNegative] | None = None
    # Where one end of a range did not reach its crossover within the rates.
    range_note: str | None = None


@record
class WhatifFile:
    """whatif.json: the predictions (`points`), the best of them (`best`), the machine they are for,
    and what every figure is (`provenance`). It holds more keys than readers use (the machine's
    parts, the notes, Dynamo's flags, the schedules): those are kept as written."""

    __pydantic_config__ = OPEN_RECORD_CONFIG

    gpu: dict[str, Any]
    tp: int
    points: list[WhatifPoint]
    best: list[WhatifPoint]
    provenance: WhatifProvenance
    # request_rates=: the ladder predicted by simulated continuous batching, and its crossover.
    ladder: list[PredictedStage] | None = None
    crossover: list[PredictedCrossover] | None = None


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
    parse(WhatifFile, data, path, "whatif.json")
    return data
