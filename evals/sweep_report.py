"""Hydra callback: once every job of a multirun has run, the sweep's curves, ranking and
acceptance profiles are written into the sweep dir from the jobs that finished and, with
logger=wandb, logged as the sweep group's own run; the jobs that failed are listed (stderr and
failures.json) and left out, whatever their dirs hold. Before each job, the sweep's saved config
(multirun.yaml) gets its secrets redacted and the job's earlier failure.json is removed.

What cannot be made (no speculative run, no baseline timings for a ranking) is said in one line,
and the sweep's earlier file of it removed: the measurements are safe in their run dirs.
"""

from __future__ import annotations

import contextlib
import sys
import traceback
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from evals.pipeline.measure import ERROR_LOG
from reports.curves import write_curves
from reports.profile import write_profiles
from reports.ranking_tables import write_ranking
from reports.wandb_log import log_sweep
from speclens.config import WandbLoggerConfig
from speclens.errors import (
    EXIT_MEASUREMENT,
    EXIT_USER_ERROR,
    CorruptRecord,
    SpeclensError,
    exit_status,
    report,
    user_message,
)
from speclens.file_formats.curves_file import CURVE_FILES
from speclens.file_formats.profile_file import PROFILE_FILE, read_profiles
from speclens.file_formats.run_files import FAILURE_FILE, FAILURES_FILE, read_failure
from speclens.file_formats.summary_file import SUMMARY_FILE
from speclens.files import write_json_atomic
from speclens.redact import redact

# The failed jobs of the last multirun in this process (evals.run's exit status reads them) ...
LAST_SWEEP_FAILURES: list[dict[str, Any]] = []
# ... and what its end found wrong in the finished jobs' records ({error, exit_status}).
LAST_SWEEP_PROBLEMS: list[dict[str, Any]] = []
RANKING_FILES = ("ranking.csv", "ranking.md", "serve.json", "pareto.png")


def collect_failures(sweep_dir: Path) -> list[dict[str, Any]]:
    """Every job of the sweep that failed (and has not run since: a job's start removes its
    failure.json); written to failures.json. A job refused beside a finished result it did not
    write (another configuration's, a newer speclens's) failed too, whatever its dir holds."""
    failures = []
    for file in sorted(sweep_dir.glob(f"*/{FAILURE_FILE}")):
        failures.append(read_failure(file))
    if failures:
        write_json_atomic(failures, sweep_dir / FAILURES_FILE)
    else:
        (sweep_dir / FAILURES_FILE).unlink(missing_ok=True)
    return failures


def _remove(sweep_dir: Path, names: tuple[str, ...]) -> None:
    for name in names:
        (sweep_dir / name).unlink(missing_ok=True)
    for stale in sweep_dir.glob("curve_*.png") if names == CURVE_FILES else ():
        stale.unlink()


def failed_dirs(sweep_dir: Path, failures: list[dict[str, Any]]) -> list[Path]:
    """The dirs of the sweep's failed jobs: what they hold is no result of this sweep."""
    return [sweep_dir / f["job"] for f in failures]


def sweep_profiles(sweep_dir: Path, exclude: list[Path]) -> tuple[list[dict[str, Any]], list[str]]:
    """The finished jobs' acceptance profiles, and one line per job whose profile file is corrupt
    (its profiles are left out rather than the sweep's file kept stale or left unwritten)."""
    left_out = {p.resolve() for p in exclude}
    profiles, problems = [], []
    for run_file in sorted(sweep_dir.glob(f"*/{PROFILE_FILE}")):
        job = run_file.parent
        if job.resolve() in left_out or not (job / SUMMARY_FILE).is_file():
            continue
        try:
            profiles += read_profiles(job)
        except CorruptRecord as exc:
            problems.append(
                f"{exc}; its profiles are left out of the sweep's {PROFILE_FILE} (force=true re-measures that job)"
            )
    return profiles, problems


def sweep_outputs(sweep_dir: Path, exclude: list[Path] | None = None) -> tuple[Any, Any, list[str]]:
    """(curves or None, ranking or None, notes on what was skipped), from the finished jobs but for
    `exclude`. What cannot be made any more is removed, so no stale curves or ranking of an earlier
    state of the sweep remain."""
    exclude = exclude or []
    curves = ranking = None
    notes = []
    try:
        curves = write_curves(sweep_dir, exclude=exclude)
    except SpeclensError as exc:
        _remove(sweep_dir, CURVE_FILES)
        notes.append(f"no curves: {exc}")
    try:
        ranking, _ = write_ranking([sweep_dir], exclude=exclude)
    except SpeclensError as exc:
        _remove(sweep_dir, RANKING_FILES)
        notes.append(f"no ranking: {exc}")
    return curves, ranking, notes


def gather_profiles(sweep_dir: Path, exclude: list[Path] | None = None) -> list[str]:
    """The sweep's speculation_profile.json from its finished jobs' (removed where there are none);
    one line per job whose profile is corrupt and left out."""
    profiles, problems = sweep_profiles(sweep_dir, exclude or [])
    if profiles:
        write_profiles(profiles, sweep_dir)
    else:
        _remove(sweep_dir, (PROFILE_FILE,))
    return problems


def redact_saved_config(path: Path) -> None:
    """Hydra saves the sweep's config (overrides included) before any job runs: redact it in place."""
    saved = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    clean = redact(saved)
    if clean != saved:
        OmegaConf.save(OmegaConf.create(clean), path)


class SweepReport(Callback):
    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        hydra_cfg = HydraConfig.get()
        if hydra_cfg.mode != RunMode.MULTIRUN:
            return
        saved = Path(hydra_cfg.sweep.dir) / "multirun.yaml"
        if saved.is_file():
            redact_saved_config(saved)
        # An earlier sweep's reason for this job: it runs again now, and fails again or not.
        (Path(hydra_cfg.runtime.output_dir) / FAILURE_FILE).unlink(missing_ok=True)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        LAST_SWEEP_FAILURES.clear()
        LAST_SWEEP_PROBLEMS.clear()
        sweep_dir = Path(config.hydra.sweep.dir)
        if not sweep_dir.is_dir():
            return
        try:
            report_sweep(sweep_dir, config)
        except Exception as exc:  # noqa: BLE001 - Hydra would turn it into a warning and exit 0
            sweep_end_failed(sweep_dir, exc)


def sweep_end_failed(sweep_dir: Path, exc: Exception) -> None:
    """The sweep's end failed: one line, the sweep's exit status, and a bug's traceback in its error.log."""
    message = user_message(exc)
    status = EXIT_MEASUREMENT if message is None else exit_status(exc)
    if message is None:
        with contextlib.suppress(OSError):
            (sweep_dir / ERROR_LOG).write_text("".join(traceback.format_exception(exc)))
        message = f"{type(exc).__name__}: {exc} (traceback in {sweep_dir / ERROR_LOG})"
    LAST_SWEEP_PROBLEMS.append(
        {"error": f"making the sweep's curves and ranking failed: {message}", "exit_status": status}
    )
    report(f"sweep {sweep_dir}: {LAST_SWEEP_PROBLEMS[-1]['error']}")


def report_sweep(sweep_dir: Path, config: DictConfig) -> None:
    """The failed jobs named, then the sweep's curves, ranking and profiles from the others."""
    LAST_SWEEP_FAILURES.extend(collect_failures(sweep_dir))
    for failure in LAST_SWEEP_FAILURES:
        report(f"sweep job {failure['job']} failed: {failure['error']}")
    if LAST_SWEEP_FAILURES:
        print(
            f"speclens: sweep {sweep_dir}: {len(LAST_SWEEP_FAILURES)} job(s) failed, listed in "
            f"{sweep_dir / FAILURES_FILE}; curves and ranking are from the jobs that finished.",
            file=sys.stderr,
        )
    failed = failed_dirs(sweep_dir, LAST_SWEEP_FAILURES)
    curves, ranking, notes = sweep_outputs(sweep_dir, failed)
    for note in notes:
        print(f"speclens: sweep {sweep_dir}: {note}")
    for problem in gather_profiles(sweep_dir, failed):
        LAST_SWEEP_PROBLEMS.append({"error": problem, "exit_status": EXIT_USER_ERROR})
        report(f"sweep {sweep_dir}: {problem}")
    if curves is not None:
        print(f"speclens: sweep {sweep_dir}: curves.csv" + (", ranking.csv" if ranking is not None else ""))
    if OmegaConf.get_type(config.logger) is WandbLoggerConfig and curves is not None:
        try:
            log_sweep(sweep_dir, curves, ranking, config.logger, config.logger.group or sweep_dir.name)
        except Exception as exc:  # noqa: BLE001 - the sweep's files are written; only the dashboard lacks them
            print(f"speclens: warning: logging the sweep to wandb failed ({type(exc).__name__}: {exc}).")


def sweep_status() -> int:
    """The last multirun's exit status: the worst of its failed jobs' and of what its end found."""
    return max((f["exit_status"] for f in (*LAST_SWEEP_FAILURES, *LAST_SWEEP_PROBLEMS)), default=0)
