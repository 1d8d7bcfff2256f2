"""A quiet terminal: while an engine runs, everything written to the process's stdout and stderr
(vLLM's and torch's logging, warnings, native libraries' messages) goes to a log file, and
speclens's own progress and warnings go to the terminal through `console()`."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Iterator, TextIO

# Lines of the log quoted when the engine fails.
TAIL_LINES = 20

_console: TextIO | None = None


def console() -> TextIO:
    """Where speclens's own progress and warnings go: the terminal, even while quiet()."""
    return _console or sys.stderr


def log_tail(path: Path, lines: int = TAIL_LINES) -> str:
    if not path.is_file():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def quiet(log_file: Path, verbose: bool = False) -> Iterator[None]:
    """Send file descriptors 1 and 2 to `log_file` for the block (not with `verbose`). If the block
    fails, the log's last lines are shown on the terminal; an empty log is removed."""
    global _console
    if verbose or not _owns_terminal_fds():
        yield
        return
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    log = open(log_file, "ab")
    _console = os.fdopen(os.dup(saved_err), "w", buffering=1)
    try:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        yield
    except BaseException:
        _restore(saved_out, saved_err, log)
        tail = log_tail(log_file)
        if tail:
            print(f"speclens: the engine's log ({log_file}) ends:\n{tail}", file=sys.stderr)
        raise
    else:
        _restore(saved_out, saved_err, log)
    finally:
        if _console is not None:
            _console.close()
            _console = None
        os.close(saved_out)
        os.close(saved_err)
        if log_file.is_file() and log_file.stat().st_size == 0:
            log_file.unlink()


def _owns_terminal_fds() -> bool:
    """Whether sys.stdout and sys.stderr write to descriptors 1 and 2 (not when a test harness or
    an embedding program has put streams of its own there, which it then captures itself)."""
    try:
        return sys.stdout.fileno() == 1 and sys.stderr.fileno() == 2
    except (AttributeError, OSError, ValueError):
        return False


def _restore(saved_out: int, saved_err: int, log) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(ValueError, OSError):
            stream.flush()
    os.dup2(saved_out, 1)
    os.dup2(saved_err, 2)
    log.close()
