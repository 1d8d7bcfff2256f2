"""`python -m evals.run drafter=<name> d=<D> [key=value ...]`: measure acceptance in vLLM.

Outputs go to Hydra's run dir: stamp.json (first), steps.parquet, requests.parquet,
engine_steps.parquet, outputs.jsonl, and summary.json (last; a run dir without it is incomplete).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from evals.config import RunConfig, config_fingerprint, register_configs
from evals.engine_factory import vllm_factory
from evals.errors import ConfigError, SpeclensError, report

register_configs()


class TqdmProgress:
    """Output tokens generated so far, on stderr, while the engine runs."""

    def __init__(self, label: str) -> None:
        from tqdm import tqdm

        self.bar = tqdm(desc=f"{label} generation", unit="tok", file=sys.stderr, dynamic_ncols=True, mininterval=1.0)

    def __call__(self, tokens: int) -> None:
        self.bar.update(tokens)

    def close(self) -> None:
        self.bar.close()


def to_run_config(cfg: DictConfig) -> RunConfig:
    try:
        return OmegaConf.to_object(cfg)
    except MissingMandatoryValue as exc:
        raise SpeclensError(f"{exc.full_key} has no value; set {exc.full_key}=<value> on the command line.") from None
    except OmegaConfBaseException as exc:
        raise SpeclensError(f"invalid configuration: {exc}") from None


def finished_summary(out_dir: Path, fingerprint: str) -> dict[str, Any] | None:
    """The summary of a finished run of this very configuration in `out_dir`, if there is one."""
    from evals.summary import SUMMARY_FILE

    file = out_dir / SUMMARY_FILE
    if not file.is_file():
        return None  # never started, or killed before it finished: (re-)run it
    summary = json.loads(file.read_text())
    if summary.get("config_fingerprint") != fingerprint:
        raise ConfigError(
            f"{out_dir} already holds a finished run of a different configuration; force=true overwrites "
            "it, or choose another hydra.run.dir (hydra.sweep.dir for a multirun)."
        )
    return summary


def run(
    cfg: DictConfig,
    out_dir: Path,
    factory=vllm_factory,
    progress=TqdmProgress,
    encoder_factory=None,
    group: str | None = None,
) -> dict[str, Any]:
    """Plan, measure, print the table, log (logger=wandb, in `group`); skips a run dir that already
    holds this run unless force=true. Tests pass a fake engine factory and encoder."""
    from evals.measure import execute
    from evals.plan import make_plan
    from reports.table import result_table

    run_config = to_run_config(cfg)
    fingerprint = config_fingerprint(OmegaConf.to_container(cfg, resolve=True))
    done = None if run_config.force else finished_summary(out_dir, fingerprint)
    if done is not None:
        print(f"speclens: {out_dir} already holds this run; skipped (force=true re-runs it)")
        return done
    plan = make_plan(run_config, encoder_factory)
    summary = execute(plan, out_dir, factory, progress, config_fingerprint=fingerprint)
    print(result_table(summary))
    print(f"results: {out_dir}")
    if run_config.logger.name == "wandb":
        from reports.wandb_log import log_run

        stamp = json.loads((out_dir / "stamp.json").read_text())
        try:
            log_run(out_dir, summary, stamp, run_config.logger, group)
        except Exception as exc:  # noqa: BLE001 - a dashboard hiccup must not stop a sweep
            print(f"speclens: warning: logging to wandb failed ({type(exc).__name__}: {exc}); the run's "
                  f"results are complete in {out_dir}.", file=sys.stderr)
    return summary


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from runners.vllm_engine import set_process_env

    hydra_cfg = HydraConfig.get()
    out_dir = Path(hydra_cfg.runtime.output_dir)
    group = Path(hydra_cfg.sweep.dir).name if hydra_cfg.mode == RunMode.MULTIRUN else None
    set_process_env(cfg.engine.cpu_kvcache_space_gib)
    try:
        run(cfg, out_dir, group=group)
    except SpeclensError as exc:
        sys.exit(report(exc))


if __name__ == "__main__":
    main()
