"""A run dir's life: one process at a time, new results measured aside and published whole.

- `claimed(dir)`: an exclusive lock on the dir for the measurement's lifetime; a second process is
  refused at once, naming the holder's pid. A dir that ends up holding nothing (the run was refused
  before measuring) is removed again.
- `staged(dir, files, last)`: the measurement writes into a hidden staging folder inside the dir.
  Only when it completes are its files moved into place, `last` (summary.json, replay.json) last,
  after the old `last` was removed: until then a finished earlier result stays as it was. A failed
  measurement's files stay for inspection: in the dir itself where it held no finished result,
  else in `failed_attempt/` beside the untouched earlier result.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from pathlib import Path
from typing import Iterator, Sequence

from speclens.errors import ConfigError
from speclens.file_formats.run_files import FAILED_ATTEMPT, STAGING_PREFIX
from speclens.files import Busy, exclusive

LOCK_FILE = ".speclens.lock"


@contextlib.contextmanager
def claimed(run_dir: Path) -> Iterator[None]:
    """Hold `run_dir` for this process (see the module docstring)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = run_dir / LOCK_FILE
    try:
        with exclusive(lock):
            for leftover in run_dir.glob(STAGING_PREFIX + "*"):  # a killed measurement's
                shutil.rmtree(leftover, ignore_errors=True)
            try:
                yield
            finally:
                if [p.name for p in run_dir.iterdir()] == [LOCK_FILE]:
                    lock.unlink()
                    with contextlib.suppress(OSError):
                        run_dir.rmdir()
    except Busy as busy:
        raise ConfigError(
            f"{run_dir} is being measured by another process (pid {busy.holder or 'unknown'}); wait for it to "
            "finish or choose another hydra.run.dir (hydra.sweep.dir for a multirun)."
        ) from None


def _replace(source: Path, dest: Path) -> None:
    if dest.is_dir() and not dest.is_symlink():
        shutil.rmtree(dest)
    os.replace(source, dest)


@contextlib.contextmanager
def staged(run_dir: Path, artifacts: Sequence[str], last: str) -> Iterator[Path]:
    """A staging folder to measure into; published into `run_dir` when the block completes.

    `artifacts` are the names a measurement may write (files or folders): those the new one did not
    write are removed from the dir on publishing, so no stale file of another configuration stays."""
    staging = run_dir / f"{STAGING_PREFIX}{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        yield staging
    except BaseException:
        _keep_failed(staging, run_dir, last)
        raise
    (run_dir / last).unlink(missing_ok=True)  # incomplete from here until `last` lands
    for name in artifacts:
        if name != last and not (staging / name).exists():
            target = run_dir / name
            if target.is_dir():
                shutil.rmtree(target)
            else:
                target.unlink(missing_ok=True)
    for entry in sorted(staging.iterdir(), key=lambda p: p.name == last):
        _replace(entry, run_dir / entry.name)
    staging.rmdir()


def _keep_failed(staging: Path, run_dir: Path, last: str) -> None:
    """A failed measurement's files: into the dir where it held no finished result, else aside."""
    if not any(staging.iterdir()):
        staging.rmdir()
        return
    if (run_dir / last).exists():
        dest = run_dir / FAILED_ATTEMPT
        _replace(staging, dest)
        print(
            f"speclens: the failed measurement's files are in {dest}; the earlier result in {run_dir} is unchanged.",
            file=sys.stderr,
        )
        return
    for entry in staging.iterdir():
        _replace(entry, run_dir / entry.name)
    staging.rmdir()
