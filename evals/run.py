"""`python -m evals.run drafter=<name> d=<D> [key=value ...]`: measure acceptance in vLLM.

The command only: the run itself is evals/pipeline/run_job.py `run`. Outputs go to Hydra's run dir:
stamp.json (first), steps.parquet, requests.parquet, engine_steps.parquet, outputs.jsonl, and
summary.json (last; a run dir without it is incomplete).
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from evals import sweep_report
from evals.hydra_app import end_job, run_app
from evals.pipeline.compose import CONF_DIR, register_configs, to_run_config
from evals.pipeline.run_job import run
from runners.registry import runner_of
from speclens.errors import guarded

register_configs()


@hydra.main(version_base=None, config_path=str(CONF_DIR), config_name="config")
def hydra_main(cfg: DictConfig) -> None:
    hydra_cfg = HydraConfig.get()
    out_dir = Path(hydra_cfg.runtime.output_dir)
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    group = Path(hydra_cfg.sweep.dir).name if multirun else None
    try:
        run_config = to_run_config(cfg)
        runner_of(run_config).prepare_process(run_config)
        run(cfg, out_dir, group=group)
    except Exception as exc:  # noqa: BLE001 - every failure ends this job in one line (a sweep goes on)
        end_job(exc, out_dir)


@guarded
def main(argv: list[str]) -> int:
    """A run: 0, or the error's status. A sweep runs every job; it exits with the worst failed
    job's status, each failed job named on stderr and in the sweep dir's failures.json (or 2 where
    a finished job's records are corrupt)."""
    run_app(hydra_main, argv, "config", "python -m evals.run")
    return sweep_report.sweep_status()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
