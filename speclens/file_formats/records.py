"""The per-step records (the single source of truth) and per-request rows, as parquet.

Files carry `speclens_schema_version` in their metadata. The reader takes every version this
project has written (1: before records carried their batch size) and refuses newer ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from speclens.errors import CorruptRecord, SpeclensError
from speclens.file_formats.run_files import REQUESTS_FILE, STEPS_FILE
from speclens.files import write_atomic
from speclens.generation import EngineStep, Prompt, RecordGranularity, TurnResult
from speclens.segments import passes_by_segment, step_segment

# 2: every record carries the batch size (operating point) it was measured at; engine steps their pass.
# 3: where a reasoning boundary is configured, steps carry their `segment` and requests
#    SEGMENT_REQUEST_COLUMNS; on agent trajectories, steps and requests carry `agent_turn`, the
#    assistant turn of the trajectory the request cut before (both absent otherwise).
# 4: where the prompts state their lengths (dataset=long_context, SPEED-Bench's throughput splits),
#    steps, requests and engine steps carry `input_tokens`, the length bucket (absent otherwise).
RECORDS_VERSION = 4
SCHEMA_KEY = b"speclens_schema_version"

STEP_COLUMNS = [
    "batch_size",
    "request_id",
    "domain",
    "category",
    "turn",
    "step",
    "position",
    "num_drafted",
    "num_accepted",
]
REQUEST_COLUMNS = [
    "batch_size",
    "request_id",
    "domain",
    "category",
    "turn",
    "prompt_tokens",
    "output_tokens",
    "drafted_steps",
    "target_steps",
    "num_accepted",
    "al",
    "latency_s",
]
# Where the engine says why each turn ended, requests also carry `finish_reason` ("stop": EOS or a
# stop string, "length": max_tokens; null where it did not say), since records version 3.
# With a reasoning boundary: each turn's output tokens on either side of it, and its target
# passes by segment (speclens/segments.py: a pass belongs where its first token is).
SEGMENT_REQUEST_COLUMNS = ["thinking_tokens", "answer_tokens", "thinking_target_steps", "answer_target_steps"]


def step_frame(results: Sequence[TurnResult], prompts: Mapping[str, Prompt], batch_size: int) -> pd.DataFrame:
    rows = [
        (
            batch_size,
            r.request_id,
            prompts[r.request_id].domain,
            prompts[r.request_id].category,
            r.turn,
            i,
            s.position,
            s.num_drafted,
            s.num_accepted,
        )
        for r in results
        for i, s in enumerate(r.steps)
    ]
    frame = pd.DataFrame(rows, columns=STEP_COLUMNS)
    ints = ("batch_size", "turn", "step", "position", "num_drafted", "num_accepted")
    frame = frame.astype({c: "int64" for c in ints})
    _add_agent_turns(frame, prompts)
    if _segmented(results):
        frame["segment"] = [
            step_segment(s.position, r.prompt_tokens, r.boundary.thinking_tokens) for r in results for s in r.steps
        ]
        frame["segment"] = frame["segment"].astype("object")
    return frame


def _add_agent_turns(frame: pd.DataFrame, prompts: Mapping[str, Prompt]) -> None:
    """`agent_turn` of each row's request, where the prompts are cut points of agent trajectories;
    `input_tokens`, its length bucket, where the prompts state their lengths."""
    for column in ("agent_turn", "input_tokens"):
        if any(getattr(p, column) is not None for p in prompts.values()):
            frame[column] = [getattr(prompts[rid], column) for rid in frame["request_id"]]
            frame[column] = frame[column].astype("Int64")


def _segmented(results: Sequence[TurnResult]) -> bool:
    """Whether these results carry their thinking boundaries (reasoning.* configured)."""
    return bool(results) and all(r.boundary is not None for r in results)


def _segment_columns(r: TurnResult) -> tuple[int, int, int, int]:
    n, thinking = len(r.output_token_ids), r.boundary.thinking_tokens
    starts = [(s.position - r.prompt_tokens, s.num_accepted) for s in r.steps]
    thinking_passes, answer_passes = passes_by_segment(starts, n, thinking)
    return thinking, n - thinking, thinking_passes, answer_passes


def request_frame(
    results: Sequence[TurnResult],
    prompts: Mapping[str, Prompt],
    batch_size: int,
    granularity: RecordGranularity = RecordGranularity.step,
) -> pd.DataFrame:
    """One row per request and turn. Its acceptance (drafted_steps, num_accepted, al) sums its
    step records, or is the engine's totals for it; unknown (null) at domain granularity, as are
    its target forward passes there."""
    rows = []
    for r in results:
        passes: int | None = r.target_steps
        if granularity == RecordGranularity.domain:
            drafted = accepted = passes = None
        elif r.totals is not None:
            drafted, accepted = r.totals.num_drafts, r.totals.num_accepted
        else:
            drafted, accepted = len(r.steps), sum(s.num_accepted for s in r.steps)
        rows.append(
            (
                batch_size,
                r.request_id,
                prompts[r.request_id].domain,
                prompts[r.request_id].category,
                r.turn,
                r.prompt_tokens,
                len(r.output_token_ids),
                drafted,
                passes,
                accepted,
                1 + accepted / drafted if drafted else None,
                r.latency_s,
            )
        )
    frame = pd.DataFrame(rows, columns=REQUEST_COLUMNS)
    ints = ("batch_size", "turn", "prompt_tokens", "output_tokens", "drafted_steps", "target_steps", "num_accepted")
    nullable = ("drafted_steps", "num_accepted", "target_steps") if granularity == RecordGranularity.domain else ()
    frame = frame.astype(
        {c: "Int64" if c in nullable else "int64" for c in ints} | {"al": "float64", "latency_s": "float64"}
    )
    _add_agent_turns(frame, prompts)
    if any(r.finish_reason is not None for r in results):
        frame["finish_reason"] = pd.Series([r.finish_reason for r in results], dtype="object")
    if _segmented(results):
        columns = pd.DataFrame([_segment_columns(r) for r in results], columns=SEGMENT_REQUEST_COLUMNS, dtype="int64")
        if granularity != RecordGranularity.step:  # no step positions: passes by segment unknown
            columns[["thinking_target_steps", "answer_target_steps"]] = None
            columns = columns.astype({c: "Int64" for c in ("thinking_target_steps", "answer_target_steps")})
        frame = pd.concat([frame, columns], axis=1)
    return frame


# mode: the pass (speclens/figures/costs.py PassMode).
ENGINE_STEP_COLUMNS = ["mode", "batch_size", "step", "wall_s", "num_requests", "num_tokens", "num_draft_tokens"]


def engine_step_frame(steps: Sequence[EngineStep], mode: str, batch_size: int) -> pd.DataFrame:
    """One row per engine step of one pass, in order (all turns); with `input_tokens` (the length
    bucket it ran) where the pass ran one length at a time."""
    rows = [
        (str(mode), batch_size, i, s.wall_s, s.num_requests, s.num_tokens, s.num_draft_tokens)
        for i, s in enumerate(steps)
    ]
    frame = pd.DataFrame(rows, columns=ENGINE_STEP_COLUMNS)
    ints = [c for c in ENGINE_STEP_COLUMNS if c not in ("mode", "wall_s")]
    frame = frame.astype({c: "int64" for c in ints} | {"wall_s": "float64", "mode": "object"})
    if any(s.input_tokens is not None for s in steps):
        frame["input_tokens"] = pd.Series([s.input_tokens for s in steps], dtype="Int64")
    return frame


def write_parquet(frame: pd.DataFrame, path: Path) -> None:
    table = pa.Table.from_pandas(frame, preserve_index=False)
    metadata = dict(table.schema.metadata or {})
    metadata[SCHEMA_KEY] = str(RECORDS_VERSION).encode()
    table = table.replace_schema_metadata(metadata)
    write_atomic(path, lambda tmp: pq.write_table(table, tmp))


def _check_finite(frame: pd.DataFrame, path: Path, allow_nan: bool) -> None:
    """No infinite figure in a record, and no missing one where every value is a count (the steps):
    either would be carried through every mean downstream without a word."""
    for column in frame.select_dtypes(include="number").columns:
        values = frame[column].to_numpy(dtype=float, na_value=np.nan)
        bad = np.isinf(values) if allow_nan else ~np.isfinite(values)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise CorruptRecord(
                f"{path} holds a non-finite {column} ({values[row]}) in row {row}: a corrupt record; measure the run again"
            )


def read_parquet(path: Path) -> pd.DataFrame:
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise CorruptRecord(f"{path} is not a readable parquet file ({str(exc).splitlines()[0]})") from None
    raw = (table.schema.metadata or {}).get(SCHEMA_KEY)
    version = int(raw) if raw is not None and raw.isdigit() else None
    if version is None or version > RECORDS_VERSION:
        raise SpeclensError(
            f"{path}: records schema version {raw.decode() if raw else 'missing'}; this speclens reads "
            f"versions 1 to {RECORDS_VERSION}" + ("; upgrade speclens to read it." if version else ".")
        )
    frame = table.to_pandas()
    expected = STEP_COLUMNS if path.name == STEPS_FILE else REQUEST_COLUMNS if path.name == REQUESTS_FILE else None
    missing = sorted(set(expected or ()) - set(frame.columns) - ({"batch_size"} if version == 1 else set()))
    if missing:
        raise CorruptRecord(f"{path} lacks the columns {', '.join(missing)}")
    _check_finite(frame, path, allow_nan=path.name != STEPS_FILE)
    if version == 1 and "batch_size" not in frame.columns:
        # Version 1 ran every prompt at once and did not record it: 0 marks "not recorded".
        frame.insert(0, "batch_size", 0)
    return frame
