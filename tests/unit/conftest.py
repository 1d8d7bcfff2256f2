"""Unit-test helpers: a fake target checkpoint folder, prompt files and fake-runner scripts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.embedded.target import PREPARED_MARKER, smollm2_path
from evals.pipeline.compose import compose_config
from runners import fake_engine

# The embedded target `make test` prepared (`make target`) before the suite, in the cache the suite
# was started with: each test's own empty cache links to it, or every test on the default target
# converted it again (about a minute each).
PREPARED_TARGET = smollm2_path()


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    cache = tmp_path.with_name(f"{tmp_path.name}-cache")  # beside tmp_path: tests see all of that folder
    monkeypatch.setenv("SPECLENS_CACHE", str(cache))
    if (PREPARED_TARGET / PREPARED_MARKER).is_file():
        (cache / "models").mkdir(parents=True)
        (cache / "models" / PREPARED_TARGET.name).symlink_to(PREPARED_TARGET, target_is_directory=True)


def write_checkpoint(folder: Path, vocab_size: int = 100, hidden_size: int = 16, **extra) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": vocab_size,
        "hidden_size": hidden_size,
        "num_hidden_layers": 2,
    } | extra
    (folder / "config.json").write_text(json.dumps(config))
    return folder


# reports.compare's note where both sides ran on the fake engine (speclens/provenance.py).
FAKE_PAIR_NOTE = "both sides' figures are fake (scripted engine, runner=fake), not measured"


def compose_run(*overrides: str):
    return compose_config(list(overrides))


def write_questions(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_script(path: Path, script: dict) -> Path:
    """A `runner.script` file for the fake runner: request#turn -> decode steps."""
    path.write_text(
        json.dumps({key: [list(s) if isinstance(s, tuple) else s for s in steps] for key, steps in script.items()})
    )
    return path


def fake_overrides(
    tmp_path: Path, rows: list[dict], script: dict | None = None, name: str = "q", **target_config
) -> list[str]:
    """runner=fake on a fake target (config.json with `target_config`), these prompt rows and
    this script (if any)."""
    target = tmp_path / "target"
    if not target.exists():
        write_checkpoint(target, **target_config)
    questions = write_questions(tmp_path / f"{name}.jsonl", rows)
    overrides = ["runner=fake", "target=custom", f"target.model={target}", "dataset=jsonl", f"dataset.path={questions}"]
    if script is not None:
        overrides.append(f"runner.script={write_script(tmp_path / f'{name}_script.json', script)}")
    return overrides


@pytest.fixture
def engines_started(monkeypatch) -> list:
    """The speculative config of every fake engine started in the test, in order (None: plain)."""
    started: list = []
    original = fake_engine.fake_factory

    def recording(*args, **kwargs):
        inner = original(*args, **kwargs)

        def factory(model_dir, spec):
            started.append(spec)
            return inner(model_dir, spec)

        return factory

    monkeypatch.setattr(fake_engine, "fake_factory", recording)
    return started


@pytest.fixture
def encoder_with(tmp_path):
    """A ChatTokenizer whose chat template is the text given (a one-word-per-token vocabulary)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from runners.chat import ChatTokenizer

    def make(template: str) -> ChatTokenizer:
        tok = Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")
        fast.chat_template = template
        folder = tmp_path / f"tok{abs(hash(template))}"
        fast.save_pretrained(str(folder))
        return ChatTokenizer(folder)

    return make


def word_tokenizer(words: list[str]):
    """A whitespace word-level fast tokenizer over `words` (the first is the unknown token)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[0]))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=words[0])
