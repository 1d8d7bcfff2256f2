"""Bad input fails before any engine starts, naming the key and what to change."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from evals.errors import ConfigError, SpeclensError
from evals.run import run
from tests.unit.conftest import FakeEncoder, compose_run, write_checkpoint, write_questions

REPO = Path(__file__).resolve().parents[2]
ROWS = [{"question_id": 1, "category": "qa", "turns": ["what is two plus two"]}]


def never_called(plan, spec):
    raise AssertionError("an engine was started despite invalid input")


def attempt(tmp_path: Path, *overrides: str, rows=ROWS):
    target = tmp_path / "target"
    if not target.exists():
        write_checkpoint(target)
    questions = write_questions(tmp_path / "q.jsonl", rows)
    cfg = compose_run(
        "target=custom", f"target.model={target}", "dataset=jsonl", f"dataset.path={questions}", *overrides
    )
    return run(cfg, tmp_path / "run", factory=never_called, progress=lambda label: None, encoder_factory=FakeEncoder)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["d=0"], r"d=0: the draft length must be >= 1"),
        (["drafter=suffix", "d=30"], r"d=30 is above what drafter=suffix allows \(at most 24\)"),
        (["d=129"], r"at most 128"),
        (["drafter=draft_model"], r"drafter=draft_model needs drafter.model="),
        (["drafter=eagle3", "drafter.model=/nonexistent/head"], r"drafter.model=/nonexistent/head: no such checkpoint"),
        (["dataset.num_requests=0"], r"dataset.num_requests=0: must be >= 1"),
        (["sampling.temperature=-0.5"], r"sampling.temperature=-0.5: must be >= 0"),
        (["dataset.path=/no/such.jsonl"], r"dataset.path=/no/such.jsonl: no such file"),
        (["drafter=ngram", "drafter.prompt_lookup_min=4", "drafter.prompt_lookup_max=2"], r"prompt_lookup_min <= prompt_lookup_max"),
    ],
)
def test_invalid_settings_name_the_key(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        attempt(tmp_path, *overrides)


def test_draft_vocabulary_must_match_target(tmp_path):
    draft = write_checkpoint(tmp_path / "draft", vocab_size=55)
    with pytest.raises(ConfigError, match=r"vocab_size=55 but target.model=.* has vocab_size=100"):
        attempt(tmp_path, "drafter=draft_model", f"drafter.model={draft}")


def test_eagle_head_width_must_match_target(tmp_path):
    head = write_checkpoint(tmp_path / "head", hidden_size=8, architectures=["LlamaForCausalLMEagle3"])
    with pytest.raises(ConfigError, match=r"hidden_size=8 but target.model=.* has hidden_size=16"):
        attempt(tmp_path, "drafter=eagle3", f"drafter.model={head}")


def test_max_model_len_above_the_context_window_is_refused(tmp_path):
    write_checkpoint(tmp_path / "target", max_position_embeddings=512)
    with pytest.raises(ConfigError, match=r"engine.max_model_len=4096 is above target.model's context window \(max_position_embeddings=512\)"):
        attempt(tmp_path)


def test_folder_without_config_is_not_a_checkpoint(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"has no config.json"):
        attempt(tmp_path, "drafter=draft_model", f"drafter.model={tmp_path / 'empty'}")


def test_rows_lacking_fields_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"row 1 lacks category, turns"):
        attempt(tmp_path, rows=[{"question_id": 1}])


def test_too_long_prompts_say_how_many_and_what_to_change(tmp_path):
    rows = ROWS + [{"question_id": 2, "category": "qa", "turns": ["word " * 50]}]
    with pytest.raises(ConfigError, match=r"1 of 2 prompts do not fit engine.max_model_len=40: the longest needs 62 tokens.*Raise engine.max_model_len to at least 62"):
        attempt(tmp_path, "engine.max_model_len=40", "sampling.max_tokens=10", rows=rows)


def test_missing_mandatory_value_names_the_key(tmp_path):
    cfg = compose_run("target=custom")
    with pytest.raises(SpeclensError, match=r"target.model has no value"):
        run(cfg, tmp_path, factory=never_called, progress=lambda label: None, encoder_factory=FakeEncoder)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evals.run", *args], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_cli_unknown_drafter_lists_the_choices():
    proc = run_cli("drafter=eagle4")
    assert proc.returncode != 0
    assert "Could not find 'drafter/eagle4'" in proc.stderr
    assert "\teagle3\n" in proc.stderr and "schema" not in proc.stderr.split("Config search path")[0]


def test_cli_typo_in_key_fails_at_composition():
    proc = run_cli("drafter=ngram", "drafter.promt_lookup_min=3")
    assert proc.returncode != 0 and "Key 'promt_lookup_min' not in 'NgramConfig'" in proc.stderr


def test_cli_error_exits_2_with_message(tmp_path):
    proc = run_cli("d=0", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 2
    assert "speclens: error: d=0" in proc.stderr
