"""Hydra callback: once every job of a multirun has run, the sweep's curves and ranking are
written into the sweep dir and, with logger=wandb, logged as the sweep group's own run. Before
each job, the sweep's saved config (multirun.yaml) gets its secrets redacted.

What cannot be made yet (no speculative run, no baseline timings for a ranking) is said in one
line and skipped: the measurements themselves are already safe in their run dirs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from core.config import WandbLoggerConfig
from core.errors import SpeclensError
from core.redact import redact
from reports.curves import write_curves
from reports.rank import write_ranking
from reports.wandb_log import log_sweep


def sweep_outputs(sweep_dir: Path) -> tuple[Any, Any, list[str]]:
    """(curves or None, ranking or None, notes on what was skipped)."""
    curves = ranking = None
    notes = []
    try:
        curves = write_curves(sweep_dir)
    except SpeclensError as exc:
        notes.append(f"no curves: {exc}")
    try:
        ranking, _ = write_ranking([sweep_dir])
    except SpeclensError as exc:
        notes.append(f"no ranking: {exc}")
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
        if not sweep_dir.is_dir():
            return
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
