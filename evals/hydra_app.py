"""Hydra entry points (`evals.run`, `evals.replay`) behind speclens's error boundary.

Before Hydra starts, every job's config (each combination of a sweep) is composed and turned
into its typed object, so a bad key or value is refused in one line, before any engine starts
and before a sweep's first job runs."""

from __future__ import annotations

import contextlib
import itertools
import sys
from pathlib import Path
from typing import Callable

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode

from core.errors import EXIT_MEASUREMENT, exit_status, report, user_message
from evals.compose import compose_config, to_run_config
from evals.sweep_report import record_failure

# Flags after which Hydra prints something (help, the config) instead of running a job.
MULTIRUN_FLAGS = ("-m", "--multirun")
# More sweep combinations than this are composed only in part (composition takes milliseconds each).
MAX_CHECKED_JOBS = 512


def job_overrides(overrides: list[str]) -> list[list[str]]:
    """Every job's overrides: sweeps (`d=1,2,3`, `range(...)`) expanded into their combinations."""
    choices = []
    for override in OverridesParser.create().parse_overrides(overrides):
        if override.is_sweep_override():
            key = override.get_key_element()
            choices.append([f"{key}={value}" for value in override.sweep_string_iterator()])
        else:
            choices.append([override.input_line])
    return [list(combo) for combo in itertools.islice(itertools.product(*choices), MAX_CHECKED_JOBS)]


def preflight(argv: list[str], config_name: str) -> None:
    """Compose and type-check every job of this command line (raises the composition error)."""
    if any(a.startswith("-") and a not in MULTIRUN_FLAGS for a in argv):
        return  # --help, --cfg, --info ...: Hydra's own business
    overrides = [a for a in argv if a not in MULTIRUN_FLAGS and not a.lstrip("+~").startswith(("hydra.", "hydra/"))]
    for job in job_overrides(overrides):
        to_run_config(compose_config(job, config_name))


def run_app(hydra_main: Callable[[], None], argv: list[str], config_name: str, prog: str) -> int:
    """Check `argv`, then hand it to the Hydra-decorated `hydra_main` (which reads sys.argv)."""
    preflight(argv, config_name)
    sys.argv = [prog, *argv]
    hydra_main()
    return 0


def end_job(exc: Exception, job_dir: Path) -> None:
    """A Hydra job's failure: one line on stderr. A single run exits with its status (2 or 3); a
    sweep's job records it (failure.json) and the sweep goes on. A bug outside a sweep keeps its
    traceback."""
    hydra_cfg = HydraConfig.get()
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    message = user_message(exc)
    if message is None and not multirun:
        raise exc
    status = exit_status(exc) if message is not None else EXIT_MEASUREMENT
    message = message or f"{type(exc).__name__}: {exc}"
    if not multirun:
        with contextlib.suppress(OSError):  # Hydra made the run dir; a refused run leaves none
            job_dir.rmdir()
        sys.exit(report(message, status))
    record_failure(job_dir, list(hydra_cfg.overrides.task), message, status)
    print(f"speclens: error: job {hydra_cfg.job.override_dirname or job_dir.name}: {message}", file=sys.stderr)
