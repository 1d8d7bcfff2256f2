"""Typed Hydra schema: every YAML in conf/ extends one of these dataclasses.

A typo in a key fails when the config is composed, before any engine starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING, OmegaConf

from drafters import REGISTRY as DRAFTERS
from evals.datasets import DATASETS


@dataclass
class TargetConfig:
    name: str = "custom"
    # Local folder or hub id.
    model: str = MISSING
    # Key of a target speclens builds itself when `model` points at its cache folder.
    embedded: str | None = None


@dataclass
class SamplingConfig:
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 128


@dataclass
class EngineConfig:
    max_model_len: int = 4096
    dtype: str = "bfloat16"
    enforce_eager: bool = True
    max_num_seqs: int = 64
    max_num_batched_tokens: int | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    # VLLM_CPU_KVCACHE_SPACE in GiB (CPU builds only; start-up fails without it).
    cpu_kvcache_space_gib: int = 4
    gpu_memory_utilization: float = 0.9
    # Any other vLLM engine argument, passed through unchanged.
    extra_args: dict[str, Any] = field(default_factory=dict)


@dataclass
class LoggerConfig:
    # none | wandb
    name: str = "none"
    project: str = "speclens"
    entity: str | None = None
    # Runs of one group are compared together; default: the sweep dir's name in a multirun.
    group: str | None = None
    tags: list[str] = field(default_factory=list)


@dataclass
class RunConfig:
    target: TargetConfig = MISSING
    # One of the drafter schemas registered below (drafters/<name>.py).
    drafter: Any = MISSING
    # One of the dataset schemas registered below (evals/datasets/).
    dataset: Any = MISSING
    sampling: SamplingConfig = MISSING
    engine: EngineConfig = MISSING
    logger: LoggerConfig = MISSING
    d: int = 3
    seed: int = 0
    # Operating points: for each B, the prompts run B at a time (null: all at once, up to
    # engine.max_num_seqs).
    batch_sizes: list[int] | None = None
    # Also run without speculation at each B (lossless check, measured speedup, T_verif(B)) and
    # with a zero-cost proposer (T_verif(B*(1+D)), hence T_draft): see evals/costs.py.
    baseline: bool = False
    # Re-run even when the run dir already holds a finished run of this configuration.
    force: bool = False


@dataclass
class ReplayConfig(RunConfig):
    """`python -m evals.replay`: the run keys plus the largest draft length of the curve."""

    d_max: int = 16


def cache_path(relative: str = "") -> str:
    from evals.assets import cache_dir

    return str(cache_dir() / relative)


# Keys that say how to run or report, not what is measured: left out of the config fingerprint.
NOT_FINGERPRINTED = ("force", "logger")


def config_fingerprint(resolved: dict[str, Any]) -> str:
    """sha256 of the resolved run config, the identity a finished run is recognised by."""
    import hashlib
    import json

    measured = {k: v for k, v in resolved.items() if k not in NOT_FINGERPRINTED}
    return "sha256:" + hashlib.sha256(json.dumps(measured, sort_keys=True, default=str).encode()).hexdigest()


def job_dirname(override_dirname: str) -> str:
    """A sweep job's folder name from its overrides: readable, one level, bounded length."""
    import hashlib

    from reports.redact import redact_overrides

    override_dirname = redact_overrides(override_dirname)
    name = override_dirname.replace("/", "_").replace("\\", "_") or "defaults"
    if len(name) > 120:
        name = name[:100] + "-" + hashlib.sha256(override_dirname.encode()).hexdigest()[:12]
    return name


def register_configs() -> None:
    """Register the schemas with Hydra's ConfigStore (idempotent)."""
    from hydra.core.config_store import ConfigStore

    if not OmegaConf.has_resolver("speclens_cache"):
        OmegaConf.register_new_resolver("speclens_cache", cache_path)
    if not OmegaConf.has_resolver("speclens_job_dir"):
        OmegaConf.register_new_resolver("speclens_job_dir", job_dirname)
    cs = ConfigStore.instance()
    # Schemas live under schema/ so they never show up as choices of a group.
    cs.store(group="schema", name="run", node=RunConfig)
    cs.store(group="schema", name="replay", node=ReplayConfig)
    cs.store(group="schema", name="target", node=TargetConfig)
    cs.store(group="schema", name="sampling", node=SamplingConfig)
    cs.store(group="schema", name="engine", node=EngineConfig)
    cs.store(group="schema", name="logger", node=LoggerConfig)
    for name, cls in DRAFTERS.items():
        cs.store(group="schema/drafter", name=name, node=cls.config_class)
    for name, spec in DATASETS.items():
        cs.store(group="schema/dataset", name=name, node=spec.config_class)


def compose_config(overrides: list[str], config_name: str = "config"):
    """The config for `overrides`, composed as `python -m evals.run` (config_name="replay":
    `python -m evals.replay`) would, outside a Hydra app."""
    from pathlib import Path

    from hydra import compose, initialize_config_dir

    register_configs()
    conf_dir = str(Path(__file__).resolve().parent.parent / "conf")
    with initialize_config_dir(config_dir=conf_dir, version_base=None):
        return compose(config_name=config_name, overrides=overrides)
