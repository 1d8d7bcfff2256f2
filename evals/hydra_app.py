"""Hydra entry points (`evals.run`, `evals.replay`) behind speclens's error boundary.

Before Hydra starts, every job's config (each combination of a sweep) is composed and turned
into its typed object, so a bad key or value is refused in one line, before any engine starts
and before a sweep's first job runs."""

from __future__ import annotations

import contextlib
import itertools
import logging
import sys
import traceback
from pathlib import Path
from typing import Callable

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import DictConfig, open_dict
from omegaconf.errors import OmegaConfBaseException

from evals.pipeline.compose import compose_config, to_run_config
from evals.pipeline.measure import ERROR_LOG, write_error_log
from speclens.errors import EXIT_MEASUREMENT, exit_status, report, user_message
from speclens.file_formats.run_files import record_failure
from speclens.files import check_folder
from speclens.redact import redact_overrides

# Flags after which Hydra prints something (help, the config) instead of running a job.
MULTIRUN_FLAGS = ("-m", "--multirun")
# Hydra keys that place a job's folder (the rest of Hydra's keys are left to Hydra).
OUTPUT_DIR_KEYS = ("hydra.run.", "hydra.sweep.", "hydra.job.")
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


def output_dirs(cfg: DictConfig, multirun: bool) -> list[tuple[str, Path]]:
    """Where Hydra will put this job (composed with Hydra's node): (the key that sets it, folder).
    A path naming what only the launcher knows (${hydra.job.num}) is left to Hydra."""
    hydra_config = HydraConfig.instance()
    saved = hydra_config.cfg
    hydra_config.set_config(cfg)  # the paths interpolate Hydra's own values (${hydra:runtime.choices...})
    try:
        if not multirun:
            return [("hydra.run.dir", Path(str(cfg.hydra.run.dir)))]
        sweep = Path(str(cfg.hydra.sweep.dir))
        return [("hydra.sweep.dir", sweep), ("hydra.sweep.subdir", sweep / str(cfg.hydra.sweep.subdir))]
    except OmegaConfBaseException:
        return []
    finally:
        hydra_config.cfg = saved


def _hydra_key(arg: str) -> bool:
    return arg.lstrip("+~").startswith(("hydra.", "hydra/"))


def preflight(argv: list[str], config_name: str) -> None:
    """Compose and type-check every job of this command line (raises the composition error), and
    check the folder each job will write to: Hydra would fail making it with a traceback."""
    if any(a.startswith("-") and a not in MULTIRUN_FLAGS for a in argv):
        return  # --help, --cfg, --info ...: Hydra's own business
    multirun = any(a in MULTIRUN_FLAGS for a in argv)
    overrides = [
        a for a in argv if a not in MULTIRUN_FLAGS and (not _hydra_key(a) or a.lstrip("+~").startswith(OUTPUT_DIR_KEYS))
    ]
    for job in job_overrides(overrides):
        cfg = compose_config(job, config_name, with_hydra=True)
        folders = output_dirs(cfg, multirun)
        with open_dict(cfg):
            del cfg["hydra"]
        to_run_config(cfg)
        for key, folder in folders:
            check_folder(folder, key)


# The launchers that log each job's overrides as they start it.
LAUNCHER_LOGGERS = (
    "hydra._internal.core_plugins.basic_launcher",
    "hydra_plugins.hydra_joblib_launcher._core",
    "hydra_plugins.hydra_submitit_launcher.submitit_launcher",
    "hydra_plugins.hydra_ray_launcher._core",
)


class RedactedOverrides(logging.Filter):
    """A launcher's log line with the overrides' credentials out (speclens/redact.py)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact_overrides(record.getMessage())
        record.args = ()
        return True


def run_app(hydra_main: Callable[[], None], argv: list[str], config_name: str, prog: str) -> int:
    """Check `argv`, then hand it to the Hydra-decorated `hydra_main` (which reads sys.argv)."""
    preflight(argv, config_name)
    for name in LAUNCHER_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactedOverrides) for f in logger.filters):
            logger.addFilter(RedactedOverrides())
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
    if message is None:  # a bug in a sweep's job: the sweep goes on, its traceback is kept
        job_dir.mkdir(parents=True, exist_ok=True)
        write_error_log(job_dir, "".join(traceback.format_exception(exc)))
        message = f"{type(exc).__name__}: {exc} (traceback in {ERROR_LOG})"
    if not multirun:
        with contextlib.suppress(OSError):  # Hydra made the run dir; a refused run leaves none
            job_dir.rmdir()
        sys.exit(report(message, status))
    record_failure(job_dir, list(hydra_cfg.overrides.task), message, status)
    job = redact_overrides(hydra_cfg.job.override_dirname or job_dir.name)
    report(f"job {job}: {message}")
