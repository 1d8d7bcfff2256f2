"""Rows with question_id, category and turns (the Spec-Bench / MT-Bench question.jsonl layout)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from core.config import DatasetConfig
from core.errors import ConfigError
from core.generation import ChatEncoder, Prompt
from evals.datasets.domains import domain_of

REQUIRED_FIELDS = ("question_id", "category", "turns")


def prompts_from_rows(
    rows: Iterable[dict[str, Any]], source: str, to_domain: Callable[[str], str] = domain_of
) -> list[Prompt]:
    prompts = []
    for line_no, row in enumerate(rows, start=1):
        missing = [f for f in REQUIRED_FIELDS if f not in row]
        if missing:
            raise ConfigError(
                f"{source}: row {line_no} lacks {', '.join(missing)}; every row needs "
                f"{', '.join(REQUIRED_FIELDS)}."
            )
        turns = row["turns"]
        if isinstance(turns, str):
            turns = [turns]
        if not turns or not all(isinstance(t, str) and t for t in turns):
            raise ConfigError(f"{source}: row {line_no} has empty or non-text turns.")
        category = str(row["category"])
        prompts.append(
            Prompt(request_id=str(row["question_id"]), domain=to_domain(category), category=category, turns=tuple(turns))
        )
    ids = [p.request_id for p in prompts]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{source}: question_id values are not unique.")
    return prompts


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}: line {line_no} is not JSON ({exc}).") from None
    return rows


@dataclass
class JsonlConfig(DatasetConfig):
    """Rows with question_id, category, turns (Spec-Bench / MT-Bench layout); category is the domain.
    dataset.path=<file> is required."""


@dataclass
class SpecBenchConfig(JsonlConfig):
    """Spec-Bench's question.jsonl: dataset.path=<question.jsonl>. MT-Bench's 80 rows keep their own
    categories."""


def load(cfg: JsonlConfig, encoder: ChatEncoder) -> list[Prompt]:
    file = Path(cfg.path).expanduser()
    if not file.exists():
        raise ConfigError(f"dataset.path={cfg.path}: no such file.")
    prompts = prompts_from_rows(read_jsonl(file), source=str(file))
    if not prompts:
        raise ConfigError(f"dataset.path={cfg.path}: the file has no rows.")
    return prompts
