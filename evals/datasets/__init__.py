"""Prompt sets by name (`dataset=<name>`): the one registry of loaders and their schemas."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from evals.datasets import humaneval, jsonl, long_context, mt_bench, sample, speed_bench
from evals.datasets.base import ChatEncoder, DatasetConfig, Prompt, filter_categories, fingerprint, select
from evals.errors import ConfigError


@dataclass(frozen=True)
class DatasetSpec:
    config_class: type[DatasetConfig]
    load: Callable[..., list[Prompt]]  # (config, encoder) -> prompts


DATASETS: dict[str, DatasetSpec] = {
    "sample": DatasetSpec(DatasetConfig, sample.load),
    "mt_bench": DatasetSpec(DatasetConfig, mt_bench.load),
    "humaneval": DatasetSpec(DatasetConfig, humaneval.load),
    "jsonl": DatasetSpec(DatasetConfig, jsonl.load),
    # Spec-Bench's question.jsonl has the jsonl layout; see conf/dataset/spec_bench.yaml.
    "spec_bench": DatasetSpec(DatasetConfig, jsonl.load),
    "speed_bench": DatasetSpec(speed_bench.SpeedBenchConfig, speed_bench.load),
    "long_context": DatasetSpec(long_context.LongContextConfig, long_context.load),
}


def load_prompts(cfg: DatasetConfig, seed: int, encoder: ChatEncoder) -> list[Prompt]:
    """The prompts `cfg` names: loaded, filtered by category, then the seeded stratified subset."""
    if cfg.name not in DATASETS:
        raise ConfigError(f"dataset={cfg.name!r} is unknown; choose one of {', '.join(sorted(DATASETS))}.")
    prompts = DATASETS[cfg.name].load(cfg, encoder)
    prompts = filter_categories(prompts, cfg.categories, f"dataset={cfg.name}")
    return select(prompts, cfg.num_requests, seed)


__all__ = ["DATASETS", "ChatEncoder", "DatasetConfig", "Prompt", "fingerprint", "load_prompts", "select"]
