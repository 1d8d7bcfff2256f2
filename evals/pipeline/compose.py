"""Composing the run config: the schemas and the named components registered with Hydra, the
resolvers conf/ uses, and composition outside a Hydra app (`compose_config`).

Named components are registered as the options of their group, each its own config class:
`drafter=<name>` (drafters/), `dataset=<name>` (evals/datasets/), `runner=<name>` (runners/),
`logger=<name>` (speclens/config.py). Their defaults live in those classes, stated once; conf/ holds
only presets that differ from them (targets, sampling, engines, experiments, launchers).
"""

from __future__ import annotations

import hashlib
import math
import re
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, MissingMandatoryValue, OmegaConfBaseException

from drafters import REGISTRY as DRAFTERS
from drafters import drafter_name
from evals.datasets import DATASETS, dataset_name, declared_lengths
from evals.pipeline.verify import fold_draft_sampling
from runners.registry import RUNNERS
from speclens.assets import cache_dir
from speclens.config import (
    LOGGERS,
    EngineConfig,
    ReplayConfig,
    RunConfig,
    SamplingConfig,
    TargetConfig,
    config_fingerprint,
)
from speclens.errors import ConfigError
from speclens.load_config import LoadConfig
from speclens.options import closest
from speclens.redact import redact_overrides

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


def cache_path(relative: str = "") -> str:
    return str(cache_dir() / relative)


def job_dirname(override_dirname: str) -> str:
    """A sweep job's folder name from its overrides: readable, one level, bounded length."""
    override_dirname = redact_overrides(override_dirname)
    name = override_dirname.replace("/", "_").replace("\\", "_") or "defaults"
    if len(name) > 120:
        name = name[:100] + "-" + hashlib.sha256(override_dirname.encode()).hexdigest()[:12]
    return name


def components() -> dict[str, dict[str, type]]:
    """Every group whose options are config classes: group -> option name -> class."""
    return {
        "drafter": {name: cls.config_class for name, cls in DRAFTERS.items()},
        "dataset": {name: spec.config_class for name, spec in DATASETS.items()},
        "runner": {name: runner.config_class for name, runner in RUNNERS.items()},
        "logger": LOGGERS,
    }


def choosable_groups() -> str:
    """The config groups users choose from, with their options, for the help pages (the schema/
    groups are internals)."""
    groups = {group: sorted(options) for group, options in components().items()}
    for folder in sorted(p for p in CONF_DIR.iterdir() if p.is_dir() and p.name != "hydra"):
        groups[folder.name] = sorted(f.stem for f in folder.glob("*.yaml"))
    return "\n".join(f"    {group:<11} {', '.join(options)}" for group, options in sorted(groups.items()))


def register_configs() -> None:
    """Register the schemas and components with Hydra's ConfigStore (idempotent)."""
    if not OmegaConf.has_resolver("speclens_cache"):
        OmegaConf.register_new_resolver("speclens_cache", cache_path)
    if not OmegaConf.has_resolver("speclens_job_dir"):
        OmegaConf.register_new_resolver("speclens_job_dir", job_dirname)
    if not OmegaConf.has_resolver("speclens_groups"):
        OmegaConf.register_new_resolver("speclens_groups", choosable_groups)
    if not OmegaConf.has_resolver("speclens_gpus"):
        # A job's GPUs: tensor x pipeline parallel (conf/hydra/launcher/slurm.yaml, ray_cluster.yaml).
        OmegaConf.register_new_resolver("speclens_gpus", lambda tp, pp: int(tp) * int(pp))
    cs = ConfigStore.instance()
    # Schemas of presets live under schema/ so they never show up as choices of a group.
    cs.store(group="schema", name="run", node=RunConfig)
    cs.store(group="schema", name="replay", node=ReplayConfig)
    cs.store(group="schema", name="load", node=LoadConfig)
    cs.store(group="schema", name="target", node=TargetConfig)
    cs.store(group="schema", name="sampling", node=SamplingConfig)
    cs.store(group="schema", name="engine", node=EngineConfig)
    for group, options in components().items():
        for name, config_class in options.items():
            cs.store(group=group, name=name, node=config_class)


def compose_config(overrides: list[str], config_name: str = "config", with_hydra: bool = False) -> DictConfig:
    """The config for `overrides`, composed as `python -m evals.run` (config_name="replay":
    `python -m evals.replay`) would, outside a Hydra app; `with_hydra`: with Hydra's own node."""

    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        try:
            return compose(config_name=config_name, overrides=overrides, return_hydra_config=with_hydra)
        except ConfigCompositionException as exc:
            message = unknown_override_message(exc)
            if message is None:
                raise
            raise ConfigError(message) from None


def unknown_override_message(exc: ConfigCompositionException) -> str | None:
    """One line for an override of a key its typed node does not have, with the nearest key's full
    dotted name where one is close; None for any other composition error (speclens/errors.py)."""
    cause: BaseException | None = exc.__cause__
    while cause is not None and not isinstance(cause, (ConfigKeyError, ConfigAttributeError)):
        cause = cause.__cause__
    kind = getattr(cause, "object_type", None)
    fields = getattr(kind, "__dataclass_fields__", None)
    full_key = getattr(cause, "full_key", None)
    if fields is None or not full_key:
        return None
    parent, _, name = str(full_key).rpartition(".")
    match = closest(name, fields)
    if match is None:
        return None
    # the rest of the override's key below the mistyped part (`engin.dtype`: `.dtype`)
    given = re.search(r"Could not override '([^']+)'", str(exc))
    rest = given.group(1)[len(full_key) :] if given and given.group(1).startswith(f"{full_key}.") else ""
    suggestion = f"{parent}.{match}{rest}" if parent else f"{match}{rest}"
    return f"{full_key}: no such key in {kind.__name__}; did you mean {suggestion}? (its keys: {', '.join(fields)})."


def unknown_keys(node: DictConfig, prefix: str = "") -> list[str]:
    """Keys of typed nodes that their schema does not have (`+sampling.max_tokenz=5` adds one,
    and converting to the typed object would silently drop it)."""
    kind = OmegaConf.get_type(node)
    fields = getattr(kind, "__dataclass_fields__", None)
    found = []
    for key in node.keys():
        path = f"{prefix}{key}"
        if fields is not None and key not in fields:
            match = closest(str(key), fields)
            hint = f"did you mean {prefix}{match}? " if match else ""
            found.append(f"{path} (not a key of {kind.__name__}; {hint}its keys: {', '.join(fields) or 'none'})")
            continue
        if OmegaConf.is_missing(node, key):
            continue
        child = node[key]
        if isinstance(child, DictConfig):
            found += unknown_keys(child, f"{path}.")
    return found


# Bounds of keys that otherwise run until killed (a sweep's every job is checked before the first).
# repeats: each repeat runs the speculative and plain passes over every prompt at every B again; a
# median over more than this many is no steadier.
MAX_REPEATS = 100
# request_rate: at a lower mean rate (one request per 100 s) a run of a few dozen prompts takes hours.
MIN_REQUEST_RATE = 0.01


def check_bounds(cfg: RunConfig) -> None:
    """Keys whose out-of-range values would keep a run going for hours or for ever, refused when the
    config is composed (evals/pipeline/plan.py checks the rest of each key's range before the engine starts)."""
    if cfg.repeats is not None and not 1 <= cfg.repeats <= MAX_REPEATS:
        raise ConfigError(
            f"repeats={cfg.repeats}: must be in 1..{MAX_REPEATS} (or null for once); each repeat runs every pass again."
        )
    rate = cfg.request_rate
    if rate is not None and not (math.isfinite(rate) and rate >= MIN_REQUEST_RATE):
        raise ConfigError(
            f"request_rate={rate}: must be a finite number of requests per second >= {MIN_REQUEST_RATE} "
            f"(one request per {1 / MIN_REQUEST_RATE:g} s; slower arrivals take hours)."
        )
    if isinstance(cfg, RunConfig):
        declared_lengths(cfg.dataset)  # lists of lengths, tiers or splits: each value checked


def to_run_config(cfg: DictConfig) -> Any:
    """The typed RunConfig (or ReplayConfig) of a composed config, verify.draft_sampling folded
    into drafter.sample_method in `cfg` itself first (evals/pipeline/verify.py), so the fingerprint taken
    from `cfg` after this is the same for both spellings."""
    extra = unknown_keys(cfg)
    if extra:
        raise ConfigError(f"unknown key {extra[0]}.")
    fold_draft_sampling(cfg)
    try:
        typed = OmegaConf.to_object(cfg)
    except MissingMandatoryValue as exc:
        raise ConfigError(f"{exc.full_key} has no value; set {exc.full_key}=<value> on the command line.") from None
    except OmegaConfBaseException as exc:
        raise ConfigError(f"invalid configuration: {exc}") from None
    check_bounds(typed)
    return typed


def component_names(cfg: RunConfig) -> dict[str, str]:
    """The chosen target, drafter and dataset by name (a target is named by its embedded key or
    `custom`, as conf/target/ names its presets)."""
    return {
        "target": cfg.target.embedded or "custom",
        "drafter": drafter_name(cfg.drafter),
        "dataset": dataset_name(cfg.dataset),
    }


def run_fingerprint(cfg: DictConfig, run_config: RunConfig, fitted: dict[str, Any] | None = None) -> str:
    """The run's identity: its composed config with the engine keys fitted to the target (the
    values it runs with; a default fitted to 4096 tokens is the 4096 earlier runs were stored with)."""
    resolved = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    for dotted, fit in (fitted or {}).items():
        group, key = dotted.split(".", 1)
        resolved[group][key] = fit["value"]
    return config_fingerprint(resolved, component_names(run_config))
