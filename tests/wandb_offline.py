"""Reads a wandb offline run file (run-<id>.wandb) for tests: the records wandb would upload.

The file is a LevelDB-style log: a 7-byte header (":W&B", magic, version), then 32 KiB blocks of
chunks, each with a 7-byte header (crc32, length, type: 1 full, 2 first, 3 middle, 4 last)
holding serialized `wandb_internal_pb2.Record`s. wandb 0.31 ships no Python reader.
"""

from __future__ import annotations

import json
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

BLOCK = 32768
HEADER = 7


def _chunks(data: bytes) -> Iterator[bytes]:
    """Every complete record; a chunk still being written (shorter than its header says) ends it."""
    assert data[:4] == b":W&B", "not a wandb run file"
    pos, pending = HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        if kind == 0:
            pos += left  # zero padding to the end of the block
            continue
        chunk = data[pos + HEADER : pos + HEADER + length]
        if len(chunk) < length:
            return
        pos += HEADER + length
        if kind == 1:
            yield chunk
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            yield pending + chunk
            pending = b""


@dataclass
class OfflineRun:
    name: str = ""
    group: str = ""
    job_type: str = ""
    tags: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    history: dict[str, Any] = field(default_factory=dict)


def _items(items) -> dict[str, Any]:
    return {item.key or ".".join(item.nested_key): json.loads(item.value_json) for item in items}


# wandb's service may still be writing a run's file when wandb.finish() returns.
WRITTEN_TIMEOUT_S = 120.0


def _records(file: Path) -> list[Any]:
    """The run file's records once wandb has written its last one (the `exit` record): waits for
    that event, re-reading the file, rather than reading a file still being written."""
    from wandb.proto import wandb_internal_pb2 as pb

    deadline = time.monotonic() + WRITTEN_TIMEOUT_S
    while True:
        records = []
        for chunk in _chunks(file.read_bytes()):
            record = pb.Record()
            record.ParseFromString(chunk)
            records.append(record)
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            return records
        assert time.monotonic() < deadline, f"{file}: wandb wrote no exit record in {WRITTEN_TIMEOUT_S:.0f} s"
        time.sleep(0.05)


def read_offline_run(run_dir: Path) -> OfflineRun:
    (file,) = Path(run_dir).glob("run-*.wandb")
    run = OfflineRun()
    for record in _records(file):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            r = record.run
            run.name, run.group, run.job_type, run.tags = r.display_name, r.run_group, r.job_type, list(r.tags)
            run.config.update(_items(r.config.update))
        elif kind == "config":
            run.config.update(_items(record.config.update))
        elif kind == "summary":
            run.summary.update(_items(record.summary.update))
        elif kind == "history":
            run.history.update(_items(record.history.item))
    return run


def offline_runs(root: Path) -> list[OfflineRun]:
    return [read_offline_run(d) for d in sorted(Path(root).rglob("offline-run-*")) if d.is_dir()]
