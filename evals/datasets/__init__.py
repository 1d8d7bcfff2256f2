"""Prompt sets by name (`dataset=<name>`): the one registry of loaders and their config classes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from evals.datasets.agentic import AgenticConfig
from evals.datasets.agentic import load as load_agentic
from evals.datasets.humaneval import HumanEvalConfig
from evals.datasets.humaneval import load as load_humaneval
from evals.datasets.jsonl import JsonlConfig, SpecBenchConfig
from evals.datasets.jsonl import load as load_jsonl
from evals.datasets.long_context import LongContextConfig
from evals.datasets.long_context import declared_lengths as long_context_lengths
from evals.datasets.long_context import load as load_long_context
from evals.datasets.mt_bench import MtBenchConfig
from evals.datasets.mt_bench import load as load_mt_bench
from evals.datasets.sample import SampleConfig
from evals.datasets.sample import load as load_sample
from evals.datasets.selection import check_group_names, filter_categories, select_per_length
from evals.datasets.speed_bench import SpeedBenchConfig
from evals.datasets.speed_bench import declared_lengths as speed_bench_lengths
from evals.datasets.speed_bench import load as load_speed_bench
from speclens.config import DatasetConfig
from speclens.errors import ConfigError
from speclens.generation import ChatEncoder, Prompt


@dataclass(frozen=True)
class DatasetSpec:
    config_class: type[DatasetConfig]
    load: Callable[..., list[Prompt]]  # (config, encoder) -> prompts
    # dataset.path=<file> is required.
    needs_path: bool = False
    # The prompts' stated lengths, known from the config before any prompt is built (checked
    # against the target's window first); None: the set states none.
    lengths: Callable[..., list[int]] | None = None


DATASETS: dict[str, DatasetSpec] = {
    "sample": DatasetSpec(SampleConfig, load_sample),
    "mt_bench": DatasetSpec(MtBenchConfig, load_mt_bench),
    "humaneval": DatasetSpec(HumanEvalConfig, load_humaneval),
    "jsonl": DatasetSpec(JsonlConfig, load_jsonl, needs_path=True),
    "spec_bench": DatasetSpec(SpecBenchConfig, load_jsonl, needs_path=True),
    "speed_bench": DatasetSpec(SpeedBenchConfig, load_speed_bench, lengths=speed_bench_lengths),
    "long_context": DatasetSpec(LongContextConfig, load_long_context, lengths=long_context_lengths),
    "agentic": DatasetSpec(AgenticConfig, load_agentic),
}


def dataset_name(cfg: DatasetConfig) -> str:
    """The registry name of a dataset config (its identity)."""
    for name, spec in DATASETS.items():
        if type(cfg) is spec.config_class:
            return name
    raise ConfigError(
        f"dataset: {type(cfg).__name__} is not a registered prompt set; choose one of {', '.join(DATASETS)}."
    )


def load_prompts(cfg: DatasetConfig, seed: int, encoder: ChatEncoder) -> list[Prompt]:
    """The prompts `cfg` names: loaded, filtered by category, then the seeded stratified subset (of
    each length, where the prompts state several: evals/datasets/selection.py select_per_length)."""
    name = dataset_name(cfg)
    spec = DATASETS[name]
    if spec.needs_path and not cfg.path:
        raise ConfigError(f"dataset={name} needs dataset.path=<file>.")
    prompts = spec.load(cfg, encoder)
    check_group_names(prompts, f"dataset={name}")
    prompts = filter_categories(prompts, cfg.categories, f"dataset={name}")
    return select_per_length(prompts, cfg.num_requests, seed)


def declared_lengths(cfg: DatasetConfig) -> list[int]:
    """The lengths the prompt set states for its prompts, read from its config alone ([] for sets
    that state none)."""
    spec = DATASETS[dataset_name(cfg)]
    return spec.lengths(cfg) if spec.lengths is not None else []
