"""Unit-test helpers: a fake target checkpoint folder and a fake chat encoder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from evals.config import compose_config
from runners.fake_engine import FakeEngine

@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path / "cache"))


def write_checkpoint(folder: Path, vocab_size: int = 100, hidden_size: int = 16, **extra) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    config = {"architectures": ["LlamaForCausalLM"], "vocab_size": vocab_size, "hidden_size": hidden_size,
              "num_hidden_layers": 2} | extra
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def compose_run(*overrides: str):
    return compose_config(list(overrides))


class FakeEncoder:
    """Stands in for the target's chat tokenizer: the fake engine's encoding."""

    def __init__(self, target_dir=None):
        self._engine = FakeEngine(None, {})

    def chat_token_ids(self, messages):
        return self._engine.chat_token_ids(messages)


def write_questions(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
