"""The embedded drafters' training prompts are disjoint from every prompt set speclens evaluates on."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from drafters.training.corpus import shared_passages, training_prompts
from evals.datasets.humaneval import problems
from evals.datasets.long_context import SOURCE_MODULES, TASKS, _docstrings
from evals.datasets.mt_bench import questions
from evals.embedded.drafter_builds import BUDGETS

SPEC_BENCH = Path(__file__).resolve().parents[3] / "shared" / "data" / "spec_bench" / "question.jsonl"


@pytest.fixture(scope="module")
def training_texts() -> list[str]:
    # Every prompt the largest budget trains or holds out on.
    full = BUDGETS["full"]
    return [p.text for p in training_prompts(full.prompts + full.heldout, seed=0)]


def _turns(prompts) -> list[str]:
    return [turn for p in prompts for turn in p.turns]


def _long_context_sources() -> list[str]:
    texts = [doc for name in SOURCE_MODULES for doc in _docstrings(name)]
    for tier, task in TASKS.items():
        made = task(0, random.Random(tier), min_chars=2000)
        texts += [made.head, made.tail]
    return texts


@pytest.mark.parametrize(
    "name, evaluation",
    [
        ("mt_bench", lambda: _turns(questions())),
        ("humaneval", lambda: _turns(problems())),
        ("long_context", _long_context_sources),
    ],
)
def test_no_evaluation_prompt_is_in_the_training_prompts(training_texts, name, evaluation):
    texts = evaluation()
    assert len(texts) > 50
    assert shared_passages(training_texts, texts) == []


def test_no_spec_bench_row_is_in_the_training_prompts(training_texts):
    if not SPEC_BENCH.is_file():
        pytest.skip("Spec-Bench's rows are read from ../shared beside the checkout")
    rows = [json.loads(line) for line in SPEC_BENCH.read_text().splitlines() if line.strip()]
    assert len(rows) == 240
    assert shared_passages(training_texts, [t for r in rows for t in r["turns"]]) == []


def test_the_check_finds_an_evaluation_prompt_planted_in_the_training_prompts(training_texts):
    planted = questions()[7].turns[0]
    long_question = problems()[3].turns[0]
    contaminated = [*training_texts[:100], f"Please answer: {planted}", long_question[:200]]
    found = shared_passages(contaminated, [planted, long_question, questions()[9].turns[0]])
    assert found == [planted, long_question]


def test_training_prompts_are_distinct_deterministic_and_cover_every_domain():
    first = training_prompts(200, seed=0)
    assert first == training_prompts(200, seed=0)
    assert len({p.text for p in first}) == 200
    assert {p.domain for p in first} == {
        "writing",
        "roleplay",
        "reasoning",
        "math",
        "coding",
        "extraction",
        "stem",
        "humanities",
        "chat",
    }
    assert training_prompts(200, seed=1) != first
