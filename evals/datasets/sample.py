"""The default prompt set: MT-Bench (its own categories as domains) plus HumanEval (`coding`)."""

from __future__ import annotations

from evals.datasets import humaneval, mt_bench
from evals.datasets.base import Prompt


def load(path: str | None = None) -> list[Prompt]:
    return mt_bench.load() + humaneval.load()
