"""Prompt sets: SPEED-Bench layouts and placeholders, Spec-Bench, sampling, named domains."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from evals.datasets import load_prompts
from evals.datasets.domains import domain_of, long_context_domain
from evals.datasets.jsonl import JsonlConfig, SpecBenchConfig
from evals.datasets.selection import select
from evals.datasets.speed_bench import PLACEHOLDER, SpeedBenchConfig
from speclens.config import DatasetConfig
from speclens.errors import ConfigError
from speclens.generation import Prompt

SPEC_BENCH = Path(__file__).resolve().parents[3] / "shared" / "data" / "spec_bench" / "question.jsonl"
QUALITATIVE = ["coding", "math", "summarization", "writing"]


def speed_rows(config: str = "qualitative", per_category: int = 5, placeholders: dict | None = None) -> list[dict]:
    """SPEED-Bench-schema rows with made-up text (no SPEED-Bench text in the repository)."""
    cats = QUALITATIVE if config == "qualitative" else ["low_entropy", "mixed", "high_entropy"]
    rows = []
    for c in cats:
        for i in range(per_category):
            text = PLACEHOLDER if i < (placeholders or {}).get(c, 0) else f"{c} question {i}?"
            rows.append(
                {
                    "question_id": f"{c}-{i}",
                    "category": c,
                    "sub_category": "x",
                    "turns": [text],
                    "source": "made-up",
                    "src_id": i,
                    "difficulty": "easy",
                    "multiturn": False,
                }
            )
    return rows


def as_messages(rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        r = {k: v for k, v in r.items() if k != "turns"}
        r["messages"] = [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": f"{r['category']} asks"},
        ]
        out.append(r)
    return out


def load(cfg: DatasetConfig, seed: int = 0) -> list[Prompt]:
    return load_prompts(cfg, seed, encoder=None)


def test_speed_bench_jsonl_with_turns(tmp_path):
    file = tmp_path / "qualitative.jsonl"
    file.write_text("".join(json.dumps(r) + "\n" for r in speed_rows()))
    prompts = load(SpeedBenchConfig(path=str(file)))
    assert len(prompts) == 20
    assert Counter(p.domain for p in prompts) == {c: 5 for c in QUALITATIVE}
    assert prompts[0].turns == ("coding question 0?",)


def test_speed_bench_parquet_with_messages_from_a_folder(tmp_path):
    pd.DataFrame(as_messages(speed_rows())).to_parquet(tmp_path / "qualitative.parquet")
    prompts = load(SpeedBenchConfig(path=str(tmp_path)))
    assert len(prompts) == 20
    # the system message goes before the first user turn
    assert prompts[0].turns == ("Be brief.\n\ncoding asks",)


def test_throughput_domains_carry_tier_and_length(tmp_path):
    file = tmp_path / "t.jsonl"
    file.write_text("".join(json.dumps(r) + "\n" for r in speed_rows("throughput_32k", 2)))
    prompts = load(SpeedBenchConfig(config="throughput_32k", path=str(file)))
    assert {p.domain for p in prompts} == {"low_entropy@32k", "mixed@32k", "high_entropy@32k"}
    assert {p.category for p in prompts} == {"low_entropy", "mixed", "high_entropy"}


def test_placeholder_rows_are_refused_with_counts_and_categories(tmp_path):
    file = tmp_path / "q.jsonl"
    file.write_text("".join(json.dumps(r) + "\n" for r in speed_rows(placeholders={"coding": 2, "summarization": 5})))
    with pytest.raises(
        ConfigError,
        match=r"7 of 20 rows still hold the SPEED-Bench placeholder.*coding: 2, summarization: 5.*prepare_data.py",
    ):
        load(SpeedBenchConfig(path=str(file)))


def test_unknown_config_and_category_are_named(tmp_path):
    file = tmp_path / "q.jsonl"
    file.write_text("".join(json.dumps(r) + "\n" for r in speed_rows()))
    with pytest.raises(ConfigError, match=r"dataset.config='throughput_4k' is unknown; choose one of qualitative"):
        load(SpeedBenchConfig(config="throughput_4k", path=str(file)))
    with pytest.raises(
        ConfigError, match=r"dataset.categories: rag not in dataset=speed_bench; its categories are coding, math"
    ):
        load(SpeedBenchConfig(path=str(file), categories=["rag"]))


def test_category_filter_and_stratified_sampling(tmp_path):
    file = tmp_path / "q.jsonl"
    file.write_text("".join(json.dumps(r) + "\n" for r in speed_rows(per_category=10)))
    picked = load(SpeedBenchConfig(path=str(file), categories=["coding", "math"], num_requests=6))
    assert Counter(p.category for p in picked) == {"coding": 3, "math": 3}
    again = load(SpeedBenchConfig(path=str(file), categories=["coding", "math"], num_requests=6))
    assert [p.request_id for p in picked] == [p.request_id for p in again]
    other_seed = load(SpeedBenchConfig(path=str(file), categories=["coding", "math"], num_requests=6), seed=1)
    assert [p.request_id for p in other_seed] != [p.request_id for p in picked]


def test_stratified_sampling_is_balanced_when_categories_are_uneven():
    prompts = [Prompt(f"{c}{i}", c, c, ("t",)) for c, n in (("a", 30), ("b", 3), ("c", 10)) for i in range(n)]
    counts = Counter(p.category for p in select(prompts, 12, seed=0))
    assert counts == {"a": 5, "b": 3, "c": 4}  # b runs out; the others stay within one of each other


def test_named_domains_merge_sources_and_keep_the_category():
    assert domain_of("humaneval") == "coding" and domain_of("Summarization") == "summarization"
    assert domain_of("roleplay") == "roleplay"
    assert long_context_domain("low_entropy", 32000) == "low_entropy@32k"
    assert long_context_domain("mixed", 1500) == "mixed@1500"


def test_spec_bench_layout_and_domains(tmp_path):
    """Spec-Bench's question.jsonl layout (MT-Bench rows plus its own categories), written here."""
    rows = [
        {"question_id": 81, "category": "writing", "turns": ["Compose a blog post.", "Rewrite it."]},
        {"question_id": 121, "category": "coding", "turns": ["Write a function."]},
        {"question_id": 161, "category": "summarization", "turns": ["Summarize: the article."]},
        {"question_id": 241, "category": "math_reasoning", "turns": ["What is 2 + 2?"]},
    ]
    path = tmp_path / "question.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    prompts = load(SpecBenchConfig(path=str(path)))
    assert [(p.request_id, p.domain, len(p.turns)) for p in prompts] == [
        ("81", "writing", 2),
        ("121", "coding", 1),
        ("161", "summarization", 1),
        ("241", "math_reasoning", 1),
    ]


# The real rows live in the workspace's ../shared (not redistributed in this repository); the
# layout test above covers the parsing wherever they are absent.
@pytest.mark.skipif(
    not SPEC_BENCH.is_file(),
    reason="Spec-Bench's 240 rows (../shared/data/spec_bench, not redistributed here) are not beside this checkout",
)
def test_spec_bench_from_shared_data():
    prompts = load(SpecBenchConfig(path=str(SPEC_BENCH)))
    assert len(prompts) == 240
    domains = Counter(p.domain for p in prompts)
    assert domains["summarization"] == 80 and domains["math_reasoning"] == 80 and domains["coding"] == 10
    assert {p.category for p in prompts if p.domain == "writing"} == {"writing"}


def _jsonl_lines(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


GOOD = '{"question_id": "a", "category": "qa", "turns": ["hello"]}'


@pytest.mark.parametrize(
    "lines, message",
    [
        ([GOOD, "[1, 2]"], r"bad.jsonl: line 2 is not a JSON object but a list"),
        (
            ['{"question_id": "a", "category": "qa", "turns": 42}'],
            r"row 1: turns must be a string or a non-empty list of strings, not int 42",
        ),
        (['{"question_id": "a", "category": "qa", "turns": {"x": "y"}}'], r"row 1: turns must be .* not a mapping"),
        (['{"question_id": "a", "category": "qa", "turns": ["  \\n "]}'], r"row 1: a turn is empty or only whitespace"),
        (['{"question_id": null, "category": "qa", "turns": ["hi"]}'], r"row 1 lacks question_id \(or holds null\)"),
        (['{"question_id": "a", "category": null, "turns": ["hi"]}'], r"row 1 lacks category \(or holds null\)"),
        ([GOOD, GOOD.replace('"qa"', '"math"')], r"question_id values are not unique: a\."),
    ],
)
def test_malformed_jsonl_rows_are_named(tmp_path, lines, message):
    with pytest.raises(ConfigError, match=message):
        load(JsonlConfig(path=str(_jsonl_lines(tmp_path, *lines))))


def test_unreadable_prompt_files_are_named(tmp_path):
    with pytest.raises(ConfigError, match=r"dataset.path=.*: is a folder, not a file"):
        load(JsonlConfig(path=str(tmp_path)))
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"question_id": "a", "category": "qa", "turns": ["caf\xe9"]}\n')
    with pytest.raises(ConfigError, match=r"latin.jsonl: not UTF-8 text"):
        load(JsonlConfig(path=str(latin)))
    fake = tmp_path / "qualitative.parquet"
    fake.write_text("not parquet at all")
    with pytest.raises(ConfigError, match=r"qualitative.parquet: not a readable parquet file"):
        load(SpeedBenchConfig(path=str(fake)))


def test_speed_bench_rows_with_one_id_twice_or_bad_messages_are_refused(tmp_path):
    rows = speed_rows(per_category=2)
    rows[1]["question_id"] = rows[0]["question_id"]
    file = tmp_path / "q.jsonl"
    file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ConfigError, match=r"question_id values are not unique: coding-0\."):
        load(SpeedBenchConfig(path=str(file)))
    bad = [{k: v for k, v in r.items() if k != "turns"} | {"messages": "hello"} for r in speed_rows(per_category=1)]
    file.write_text("".join(json.dumps(r) + "\n" for r in bad))
    with pytest.raises(ConfigError, match=r"row 1: messages must be a list of \{role, content\} objects"):
        load(SpeedBenchConfig(path=str(file)))
