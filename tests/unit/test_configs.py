"""Every option of every config group composes and converts to its typed object (as
lightning-hydra-template's test_configs does), and each named component is its registry's class."""

from __future__ import annotations

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from drafters import REGISTRY as DRAFTERS
from evals.datasets import DATASETS
from evals.pipeline.compose import (
    CONF_DIR,
    components,
    compose_config,
    register_configs,
    to_run_config,
)
from runners.registry import RUNNERS, runner_of
from speclens.config import (
    LOGGERS,
    EngineConfig,
    ReplayConfig,
    RunConfig,
    SamplingConfig,
    TargetConfig,
)

REGISTRIES = components()
PRESETS = {"target": TargetConfig, "sampling": SamplingConfig, "engine": EngineConfig}
# Values a group option needs before it converts (mandatory keys).
NEEDS = {("target", "custom"): ["target.model=/models/any"]}


def group_options(group: str) -> list[str]:
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return sorted(GlobalHydra.instance().config_loader().get_group_options(group))


@pytest.mark.parametrize("group", sorted(REGISTRIES))
def test_named_components_are_exactly_their_registry(group):
    """Hydra's options of each group are the registry's names: no stray YAML restating a component."""
    assert group_options(group) == sorted(REGISTRIES[group])
    registry = {"drafter": DRAFTERS, "dataset": DATASETS, "runner": RUNNERS, "logger": LOGGERS}[group]
    assert set(REGISTRIES[group]) == set(registry)


@pytest.mark.parametrize("group, option", [(g, o) for g in [*REGISTRIES, *PRESETS] for o in group_options(g)])
@pytest.mark.parametrize("config_name, schema", [("config", RunConfig), ("replay", ReplayConfig)])
def test_every_option_composes_to_its_typed_object(group, option, config_name, schema):
    cfg = to_run_config(compose_config([f"{group}={option}", *NEEDS.get((group, option), [])], config_name))
    assert type(cfg) is schema
    node = getattr(cfg, group)
    expected = REGISTRIES[group][option] if group in REGISTRIES else PRESETS[group]
    assert type(node) is expected
    if group == "runner":  # the run decides its runner once, by its config's type; stamps record its name
        assert runner_of(cfg).name == option


def test_defaults_are_stated_once_in_the_schema():
    """The default presets restate nothing: composing them gives the schema's own defaults."""
    cfg = to_run_config(compose_config([]))
    assert cfg.sampling == SamplingConfig() and cfg.engine == EngineConfig()
    assert (cfg.d, cfg.seed, cfg.batch_sizes, cfg.baseline, cfg.force) == (3, 0, None, False, False)


@pytest.mark.parametrize(
    "command,first",
    [
        ("evals.run", "speclens run: measure how many draft tokens"),
        ("evals.replay", "speclens replay: the whole AL-vs-D curve"),
    ],
)
def test_help_is_speclens_own_page(command, first):
    import subprocess
    import sys
    from pathlib import Path

    from evals.pipeline.compose import components

    repo = Path(__file__).resolve().parents[2]
    page = subprocess.run(
        [sys.executable, "-m", command, "--help"], capture_output=True, text=True, cwd=repo, timeout=120
    ).stdout
    assert page.startswith(first) and "powered by Hydra" not in page and "schema" not in page.split("== Config ==")[0]
    groups = page.split("== Config groups you choose from (group=option) ==")[1].split("==")[0]
    for group, options in components().items():  # every choosable option, from the registries
        assert f"{group}  " in groups and all(name in groups for name in options)


@pytest.mark.parametrize(("launcher", "key"), [("slurm", "gpus_per_node"), ("ray_cluster", "ray.remote.num_gpus")])
def test_a_launched_job_asks_for_tensor_times_pipeline_parallel_gpus(launcher, key):
    from omegaconf import OmegaConf

    overrides = [f"hydra/launcher={launcher}", "engine.tensor_parallel_size=2", "engine.pipeline_parallel_size=3"]
    cfg = compose_config(overrides, with_hydra=True)
    assert OmegaConf.select(cfg, f"hydra.launcher.{key}") == 6
