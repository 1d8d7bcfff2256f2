"""Whether a checkpoint folder's safetensors files are whole, read from their headers alone.

A safetensors file is an 8-byte little-endian header length, a JSON header giving each tensor's
[begin, end) byte range in the data that follows, then the data. A file cut short (a copy or a
build that died) is shorter than its header says; vLLM would find out only when it loads it.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

__all__ = ["safetensors_problem"]

# A header larger than this is not a header (safetensors itself refuses 100 MB).
MAX_HEADER_BYTES = 100_000_000


def _file_problem(path: Path) -> str | None:
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return f"{path.name} has {size} bytes, not even a header"
        (length,) = struct.unpack("<Q", head)
        if length > MAX_HEADER_BYTES or 8 + length > size:
            return f"{path.name} is cut short inside its header ({size} bytes)"
        try:
            header = json.loads(f.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return f"{path.name} has no readable header"
    ends = [t["data_offsets"][1] for name, t in header.items() if name != "__metadata__" and isinstance(t, dict)]
    expected = 8 + length + max(ends, default=0)
    if size < expected:
        return f"{path.name} is cut short: {size:,} of its {expected:,} bytes"
    return None


def safetensors_problem(folder: Path) -> str | None:
    """What is wrong with the folder's *.safetensors files (None: each is whole, or it has none)."""
    for path in sorted(Path(folder).glob("*.safetensors")):
        try:
            problem = _file_problem(path)
        except OSError as exc:
            problem = f"{path.name} is unreadable ({exc.strerror or exc})"
        if problem:
            return problem
    return None
