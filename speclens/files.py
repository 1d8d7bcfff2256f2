"""Files written whole or not at all (a uniquely named temp file beside the destination, fsynced,
then one rename), and exclusive locks on folders and files shared between processes."""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

from speclens.errors import ConfigError, SpeclensError


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


def numbers_at(data: Any, prefix: str = "") -> Iterator[tuple[str, float]]:
    """Every number in `data` (booleans are not numbers) with its key path, as `a.b[2].c`."""
    if isinstance(data, (int, float)) and not isinstance(data, bool):
        yield prefix, data
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, (list, tuple)) else ()
    for key, value in items:
        step = f"[{key}]" if isinstance(key, int) else (f".{key}" if prefix else str(key))
        yield from numbers_at(value, prefix + step)


def non_finite_at(data: Any) -> str | None:
    """The key path of the first NaN or infinity in `data`, or None."""
    found = (key for key, value in numbers_at(data) if not math.isfinite(value))
    return next((key or "(the document)" for key in found), None)


def json_text(data: Any, path: Path) -> str:
    """`data` as strict JSON (what every parser reads): a NaN or an infinity is refused, naming the
    file and the key, since Python's json module would write `NaN`, which is not JSON. A figure that
    cannot be computed is written as null, with its reason beside it, by the code that computes it."""
    where = non_finite_at(data)
    if where is not None:
        raise SpeclensError(
            f"{path.name}: not written, since {where} is not a finite number; the inputs it was computed "
            "from hold an impossible figure."
        )
    return json.dumps(data, indent=2, sort_keys=False, allow_nan=False) + "\n"


def write_json_atomic(data: Any, path: Path) -> None:
    write_text_atomic(path, json_text(data, path))


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


# What a path may hold where the file system does not say (Linux's limits).
DEFAULT_NAME_MAX = 255
DEFAULT_PATH_MAX = 4096


def _shown(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _limit(existing: Path, name: str, default: int) -> int:
    try:
        return os.pathconf(existing, name)
    except (OSError, ValueError):
        return default


def check_folder(path: Path, key: str, value: str | None = None) -> None:
    """Refuse, in one line naming `key` (set to `value`, default `path`), a folder that cannot be
    made or written: an existing file, a path under a file, a name longer than the file system
    takes, or a parent without write permission. Checked before a command measures anything, since
    making it fails only later."""
    path = Path(os.path.abspath(path.expanduser()))
    existing = next(p for p in (path, *path.parents) if _exists(p))
    name_max = _limit(existing, "PC_NAME_MAX", DEFAULT_NAME_MAX)
    path_max = _limit(existing, "PC_PATH_MAX", DEFAULT_PATH_MAX)
    where = f"{key}={_shown(value or str(path))}"
    for part in path.parts:
        if len(os.fsencode(part)) > name_max:
            raise ConfigError(
                f"{where}: the name {_shown(part)!r} is {len(os.fsencode(part))} bytes long, and this file "
                f"system takes at most {name_max} per name; choose a shorter {key}."
            )
    if len(os.fsencode(str(path))) >= path_max:
        raise ConfigError(
            f"{where}: the path is {len(os.fsencode(str(path)))} bytes long, and this file system takes "
            f"fewer than {path_max}; choose a shorter {key}."
        )
    if not existing.is_dir():
        what = "is a file, not a folder" if existing == path else "is a file, and no folder can be made under it"
        raise ConfigError(f"{where}: {_shown(str(existing))} {what}; choose another {key}.")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{where}: {_shown(str(existing))} is not writable by this user; choose another {key}.")


def output_path(value: str | Path | None, key: str) -> Path:
    """The folder a command will write into, checked before it computes anything: an empty value
    (which would mean the current folder), an existing file, a place under a file or one this
    user cannot write is one line naming `key`. `output_dir` makes it."""
    if value is None or not str(value).strip():
        raise ConfigError(f"{key} is empty; give the folder to write into (`.` for this one).")
    path = Path(str(value)).expanduser()
    check_folder(path, key, str(value))
    return path


def output_dir(path: Path, key: str) -> Path:
    """`path` (from output_path) made, with its parents."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{key}={_shown(str(path))}: the folder cannot be made ({exc.strerror}).") from None
    return path


def _exists(path: Path) -> bool:
    """Whether anything is at `path` (a name too long to look up is not there)."""
    try:
        os.lstat(path)
    except OSError:
        return False
    return True
