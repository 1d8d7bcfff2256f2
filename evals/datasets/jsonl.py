"""Rows with question_id, category and turns (the Spec-Bench / MT-Bench question.jsonl layout)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from evals.datasets.domains import domain_of
from speclens.config import DatasetConfig
from speclens.errors import ConfigError
from speclens.generation import ChatEncoder, Prompt

REQUIRED_FIELDS = ("question_id", "category", "turns")


def text_turns(value: Any, where: str) -> list[str]:
    """A row's turns: one string or a list of strings, none of them blank."""
    turns = [value] if isinstance(value, str) else value
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
        raise ConfigError(f"{where}: turns must be a string or a non-empty list of strings, not {_kind(value)}.")
    if any(not t.strip() for t in turns):
        raise ConfigError(f"{where}: a turn is empty or only whitespace.")
    return turns


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list holding " + ", ".join(sorted({type(v).__name__ for v in value}) or ["nothing"])
    return f"{type(value).__name__} {value!r}"


def check_unique(prompts: list[Prompt], source: str, key: str) -> None:
    """Two rows with one id would merge into one mixed-up conversation: refused, naming the ids."""
    seen: set[str] = set()
    duplicated = sorted({p.request_id for p in prompts if p.request_id in seen or seen.add(p.request_id)})
    if duplicated:
        raise ConfigError(
            f"{source}: {key} values are not unique: {', '.join(duplicated[:10])}"
            + (f" and {len(duplicated) - 10} more" if len(duplicated) > 10 else "")
            + "."
        )


def prompts_from_rows(
    rows: Iterable[dict[str, Any]], source: str, to_domain: Callable[[str], str] = domain_of
) -> list[Prompt]:
    prompts = []
    for line_no, row in enumerate(rows, start=1):
        missing = [f for f in REQUIRED_FIELDS if row.get(f) is None]
        if missing:
            raise ConfigError(
                f"{source}: row {line_no} lacks {', '.join(missing)} (or holds null); every row needs "
                f"{', '.join(REQUIRED_FIELDS)}."
            )
        turns = text_turns(row["turns"], f"{source}: row {line_no}")
        category = str(row["category"])
        prompts.append(
            Prompt(
                request_id=str(row["question_id"]), domain=to_domain(category), category=category, turns=tuple(turns)
            )
        )
    check_unique(prompts, source, "question_id")
    return prompts


def data_file(path: Path, key: str = "dataset.path") -> Path:
    if not path.exists():
        raise ConfigError(f"{key}={path}: no such file.")
    if not path.is_file():
        raise ConfigError(f"{key}={path}: is a folder, not a file.")
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON object on each non-blank line; errors name the file and the line."""
    rows = []
    try:
        with data_file(path).open(encoding="utf-8") as f:
            for line_no, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{path}: line {line_no} is not JSON ({exc}).") from None
                if not isinstance(row, dict):
                    raise ConfigError(f"{path}: line {line_no} is not a JSON object but {_kind(row)}.")
                rows.append(row)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}).") from None
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
    file = data_file(Path(cfg.path).expanduser())
    prompts = prompts_from_rows(read_jsonl(file), source=str(file))
    if not prompts:
        raise ConfigError(f"dataset.path={cfg.path}: the file has no rows.")
    return prompts
