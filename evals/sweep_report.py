"""Hydra callback: once every job of a multirun has run, the sweep's curves and ranking are
written into the sweep dir from the jobs that finished and, with logger=wandb, logged as the sweep
group's own run; the jobs that failed are listed (stderr and failures.json). Before each job, the
sweep's saved config (multirun.yaml) gets its secrets redacted.

What cannot be made (no speculative run, no baseline timings for a ranking) is said in one line,
and the sweep's earlier file of it removed: the measurements are safe in their run dirs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from core.config import WandbLoggerConfig
from core.errors import SpeclensError
from core.files import write_json_atomic
from core.redact import redact
from core.summary import SUMMARY_FILE
from reports.curves import write_curves
from reports.profile import PROFILE_FILE, write_profiles
from reports.rank import write_ranking
from reports.wandb_log import log_sweep

FAILURE_FILE = "failure.json"
FAILURES_FILE = "failures.json"
# The failed jobs of the last multirun in this process (evals.run's exit status reads them).
LAST_SWEEP_FAILURES: list[dict[str, Any]] = []
CURVE_FILES = ("curves.csv", "curves.parquet")
RANKING_FILES = ("ranking.csv", "ranking.md", "serve.json", "pareto.png")


def record_failure(job_dir: Path, overrides: list[str], message: str, status: int) -> None:
    """A failed sweep job's reason, in its own dir (the sweep's end collects them)."""
    job_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic({"job": job_dir.name, "overrides": redact(overrides), "error": message,
                       "exit_status": status}, job_dir / FAILURE_FILE)


def collect_failures(sweep_dir: Path) -> list[dict[str, Any]]:
    """Every job of the sweep that failed (and has not finished since); written to failures.json."""
    failures = []
    for file in sorted(sweep_dir.glob(f"*/{FAILURE_FILE}")):
        if (file.parent / SUMMARY_FILE).is_file():
            continue
        failures.append(json.loads(file.read_text()))
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


def sweep_outputs(sweep_dir: Path) -> tuple[Any, Any, list[str]]:
    """(curves or None, ranking or None, notes on what was skipped). What cannot be made any more
    is removed, so no stale curves or ranking of an earlier state of the sweep remain."""
    curves = ranking = None
    notes = []
    try:
        curves = write_curves(sweep_dir)
    except SpeclensError as exc:
        _remove(sweep_dir, CURVE_FILES)
        notes.append(f"no curves: {exc}")
    try:
        ranking, _ = write_ranking([sweep_dir])
    except SpeclensError as exc:
        _remove(sweep_dir, RANKING_FILES)
        notes.append(f"no ranking: {exc}")
    profiles = [p for run_file in sorted(sweep_dir.glob(f"*/{PROFILE_FILE}"))
                if (run_file.parent / SUMMARY_FILE).is_file() for p in json.loads(run_file.read_text())["profiles"]]
    if profiles:
        write_profiles(profiles, sweep_dir)
    else:
        _remove(sweep_dir, (PROFILE_FILE,))
    return curves, ranking, notes


def redact_saved_config(path: Path) -> None:
    """Hydra saves the sweep's config (overrides included) before any job runs: redact it in place."""
    saved = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    clean = redact(saved)
    if clean != saved:
        OmegaConf.save(OmegaConf.create(clean), path)


class SweepReport(Callback):
    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        hydra_cfg = HydraConfig.get()
        saved = Path(hydra_cfg.sweep.dir) / "multirun.yaml"
        if hydra_cfg.mode == RunMode.MULTIRUN and saved.is_file():
            redact_saved_config(saved)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        LAST_SWEEP_FAILURES.clear()
        if not sweep_dir.is_dir():
            return
        LAST_SWEEP_FAILURES.extend(collect_failures(sweep_dir))
        for failure in LAST_SWEEP_FAILURES:
            print(f"speclens: error: sweep job {failure['job']} failed: {failure['error']}", file=sys.stderr)
        if LAST_SWEEP_FAILURES:
            print(f"speclens: sweep {sweep_dir}: {len(LAST_SWEEP_FAILURES)} job(s) failed, listed in "
                  f"{sweep_dir / FAILURES_FILE}; curves and ranking are from the jobs that finished.", file=sys.stderr)
        curves, ranking, notes = sweep_outputs(sweep_dir)
        for note in notes:
            print(f"speclens: sweep {sweep_dir}: {note}")
        if curves is not None:
            print(f"speclens: sweep {sweep_dir}: curves.csv" + (", ranking.csv" if ranking is not None else ""))
        if OmegaConf.get_type(config.logger) is WandbLoggerConfig and curves is not None:
            try:
                log_sweep(sweep_dir, curves, ranking, config.logger, config.logger.group or sweep_dir.name)
            except Exception as exc:  # noqa: BLE001 - the sweep's files are written; only the dashboard lacks them
                print(f"speclens: warning: logging the sweep to wandb failed ({type(exc).__name__}: {exc}).")
