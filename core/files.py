"""Files written whole or not at all: a temp file beside the destination, then one rename."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A unique temp path beside `path` to write to; renamed onto `path` when the block ends
    without an error, removed otherwise. Readers see the old file or the new one, never half."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_atomic(path: Path, write: Callable[[Path], Any]) -> None:
    """`write(tmp)` writes the content; it lands at `path` in one rename."""
    with atomic_path(path) as tmp:
        write(tmp)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600 files
        with open(tmp, "rb") as f:  # on disk before the rename makes it visible
            os.fsync(f.fileno())


def write_text_atomic(path: Path, text: str) -> None:
    write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_json_atomic(data: Any, path: Path) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False) + "\n")
