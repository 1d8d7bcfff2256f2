"""Prompt sets by name (`dataset=<name>`): the one registry of loaders."""

from __future__ import annotations

from typing import Callable

from evals.datasets import humaneval, jsonl, mt_bench, sample
from evals.datasets.base import Prompt, fingerprint, select
from evals.errors import ConfigError

LOADERS: dict[str, Callable[[str | None], list[Prompt]]] = {
    "sample": sample.load,
    "mt_bench": mt_bench.load,
    "humaneval": humaneval.load,
    "jsonl": jsonl.load,
}


def load_prompts(name: str, path: str | None, num_requests: int | None, seed: int) -> list[Prompt]:
    if name not in LOADERS:
        raise ConfigError(f"dataset={name!r} is unknown; choose one of {', '.join(sorted(LOADERS))}.")
    if num_requests is not None and num_requests <= 0:
        raise ConfigError(f"dataset.num_requests={num_requests}: must be >= 1 (or null for all).")
    return select(LOADERS[name](path), num_requests, seed)


__all__ = ["LOADERS", "Prompt", "fingerprint", "load_prompts", "select"]
