"""The default prompt set: MT-Bench (its own categories) plus HumanEval (domain `coding`)."""

from __future__ import annotations

from evals.datasets import humaneval, mt_bench
from evals.datasets.base import ChatEncoder, DatasetConfig, Prompt


def load(cfg: DatasetConfig, encoder: ChatEncoder) -> list[Prompt]:
    return mt_bench.questions() + humaneval.problems()
