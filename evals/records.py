"""The per-step records (the single source of truth) and per-request rows, as parquet.

Files carry `speclens_schema_version` in their metadata; readers refuse versions they
do not know rather than guess.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

from evals.datasets import Prompt
from evals.errors import SpeclensError
from runners.engine import EngineStep, TurnResult

SCHEMA_VERSION = 1
SCHEMA_KEY = b"speclens_schema_version"

STEP_COLUMNS = [
    "request_id", "domain", "category", "turn", "step", "position", "num_drafted", "num_accepted",
]
REQUEST_COLUMNS = [
    "request_id", "domain", "category", "turn", "prompt_tokens", "output_tokens",
    "drafted_steps", "target_steps", "num_accepted", "al", "latency_s",
]


def step_frame(results: Sequence[TurnResult], prompts: Mapping[str, Prompt]) -> pd.DataFrame:
    rows = [
        (r.request_id, prompts[r.request_id].domain, prompts[r.request_id].category, r.turn, i,
         s.position, s.num_drafted, s.num_accepted)
        for r in results
        for i, s in enumerate(r.steps)
    ]
    frame = pd.DataFrame(rows, columns=STEP_COLUMNS)
    return frame.astype({c: "int64" for c in ("turn", "step", "position", "num_drafted", "num_accepted")})


def request_frame(results: Sequence[TurnResult], prompts: Mapping[str, Prompt]) -> pd.DataFrame:
    rows = []
    for r in results:
        accepted = sum(s.num_accepted for s in r.steps)
        drafted = len(r.steps)
        rows.append((
            r.request_id, prompts[r.request_id].domain, prompts[r.request_id].category, r.turn,
            r.prompt_tokens, len(r.output_token_ids), drafted, r.target_steps, accepted,
            1 + accepted / drafted if drafted else None, r.latency_s,
        ))
    frame = pd.DataFrame(rows, columns=REQUEST_COLUMNS)
    ints = ("turn", "prompt_tokens", "output_tokens", "drafted_steps", "target_steps", "num_accepted")
    return frame.astype({c: "int64" for c in ints} | {"al": "float64", "latency_s": "float64"})


ENGINE_STEP_COLUMNS = ["step", "wall_s", "num_requests", "num_tokens", "num_draft_tokens"]


def engine_step_frame(steps: Sequence[EngineStep]) -> pd.DataFrame:
    """One row per engine step of a run, in order (all turns)."""
    rows = [(i, s.wall_s, s.num_requests, s.num_tokens, s.num_draft_tokens) for i, s in enumerate(steps)]
    frame = pd.DataFrame(rows, columns=ENGINE_STEP_COLUMNS)
    return frame.astype({c: "int64" for c in ENGINE_STEP_COLUMNS if c != "wall_s"} | {"wall_s": "float64"})


def write_parquet(frame: pd.DataFrame, path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False)
    metadata = dict(table.schema.metadata or {})
    metadata[SCHEMA_KEY] = str(SCHEMA_VERSION).encode()
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table.replace_schema_metadata(metadata), tmp)
    os.replace(tmp, path)


def read_parquet(path: Path) -> pd.DataFrame:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    version = (table.schema.metadata or {}).get(SCHEMA_KEY)
    if version is None or int(version) != SCHEMA_VERSION:
        raise SpeclensError(
            f"{path}: records schema version {version.decode() if version else 'missing'}, "
            f"this speclens reads version {SCHEMA_VERSION}; re-run the measurement or use a "
            "matching speclens release."
        )
    return table.to_pandas()
