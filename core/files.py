"""Files written whole or not at all (a uniquely named temp file beside the destination, fsynced,
then one rename), and exclusive locks on folders and files shared between processes."""

from __future__ import annotations

import contextlib
import fcntl
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


class Busy(Exception):
    """Another process holds the lock; `holder` is its pid as it wrote it (None if unknown)."""

    def __init__(self, path: Path, holder: int | None) -> None:
        super().__init__(f"{path} is locked by pid {holder}")
        self.path, self.holder = path, holder


@contextlib.contextmanager
def exclusive(lock_file: Path, wait: bool = False) -> Iterator[None]:
    """Hold an exclusive lock on `lock_file` (created if missing) for the block; the holder's pid
    is written in it. Without `wait`, raises Busy at once when another process holds it."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            fh.seek(0)
            text = fh.read().strip()
            raise Busy(lock_file, int(text) if text.isdigit() else None) from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        try:
            yield
        finally:
            fh.seek(0)
            fh.truncate()
            fcntl.flock(fh, fcntl.LOCK_UN)
