"""Hub checkpoints as published: what is downloaded of them, and what their fingerprint covers."""

from __future__ import annotations

from pathlib import Path

from speclens.checkpoints import fingerprint, hub_patterns


def test_one_set_of_weights_and_every_tokenizer_and_template_file_are_downloaded():
    both = ["config.json", "model.safetensors", "pytorch_model.bin", "tokenizer.json", "chat_template.jinja"]
    assert hub_patterns(both) == ["*.json", "*.model", "*.txt", "*.jinja", "*.tiktoken", "*.py", "*.safetensors"]
    # vLLM's example EAGLE-3 head for Llama-3.1-8B: PyTorch weights only
    head = ["config.json", "pytorch_model.bin"]
    assert hub_patterns(head)[-2:] == ["*.bin", "*.pt"] and "*.safetensors" not in hub_patterns(head)
    assert hub_patterns(["config.json", "tokenizer.tiktoken"]) == [
        "*.json",
        "*.model",
        "*.txt",
        "*.jinja",
        "*.tiktoken",
        "*.py",
    ]
    assert hub_patterns(None)[-3:] == ["*.safetensors", "*.bin", "*.pt"]  # not listed (offline): the cache decides
    assert hub_patterns(both, config_only=True) == ["config.json"]


def test_a_fine_tune_that_changes_only_the_chat_template_changes_the_fingerprint(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path / "cache"))
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text("{}")
    (target / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    before = fingerprint(target)
    (target / "chat_template.jinja").write_text("<|user|>{{ messages[0]['content'] }}")
    assert fingerprint(target) != before
    # its own modelling code (trust_remote_code) is part of what it computes too
    (target / "modeling_x.py").write_text("SCALE = 1\n")
    with_code = fingerprint(target)
    (target / "modeling_x.py").write_text("SCALE = 2\n")
    assert fingerprint(target) != with_code != before


# Resolved in a child process: huggingface_hub reads HF_ENDPOINT when it is imported.
_RESOLVE = """
import json, sys
from speclens.checkpoints import resolve
print(json.dumps([str(resolve(ref, key)) for ref, key in json.loads(sys.argv[1])]))
"""


def test_hub_checkpoints_come_down_as_published_from_a_hub_standin(tmp_path):
    """A head published with only pytorch_model.bin, and a target whose chat template lives in
    chat_template.jinja, from a hub stand-in on 127.0.0.1: both load as vLLM and transformers would."""
    import json
    import os
    import subprocess
    import sys

    from runners.chat import ChatTokenizer
    from tests.fixtures.hub_standin import HubStandin
    from tests.unit.conftest import word_tokenizer
    from tests.unit.test_reasoning import THINKING_TEMPLATE, WORDS

    head = tmp_path / "repos" / "head"
    head.mkdir(parents=True)
    (head / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"]}))
    (head / "pytorch_model.bin").write_bytes(b"head weights")
    (head / "README.md").write_text("a model card: not loaded")
    target = tmp_path / "repos" / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    (target / "model.safetensors").write_bytes(b"safetensors weights")
    (target / "pytorch_model.bin").write_bytes(b"the same weights again: not downloaded")
    tokenizer = word_tokenizer(WORDS)
    tokenizer.chat_template = THINKING_TEMPLATE
    tokenizer.save_pretrained(str(target))  # transformers 5 keeps the template in chat_template.jinja
    assert (target / "chat_template.jinja").is_file()
    assert "chat_template" not in json.loads((target / "tokenizer_config.json").read_text())

    hub = HubStandin({"org/head": head, "org/target": target})
    try:
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_XET": "1"}
        refs = [["org/head", "drafter.model"], ["org/target", "target.model"]]
        proc = subprocess.run(
            [sys.executable, "-c", _RESOLVE, json.dumps(refs)], env=env, capture_output=True, text=True, check=True
        )
    finally:
        hub.close()
    got_head, got_target = (Path(p) for p in json.loads(proc.stdout.strip().splitlines()[-1]))
    assert sorted(p.name for p in got_head.iterdir()) == ["config.json", "pytorch_model.bin"]
    assert (got_head / "pytorch_model.bin").read_bytes() == b"head weights"
    downloaded = sorted(p.name for p in got_target.iterdir())
    assert "chat_template.jinja" in downloaded and "model.safetensors" in downloaded
    assert "pytorch_model.bin" not in downloaded  # one set of weights
    assert sorted(hub.requested) == sorted(
        [f"org/head/{name}" for name in ("config.json", "pytorch_model.bin")]
        + [f"org/target/{name}" for name in downloaded]
    )
    # the downloaded target renders prompts with its template
    chat = ChatTokenizer(got_target)
    assert chat.has_template and chat.chat_text([{"role": "user", "content": "hello"}]) == "user hello assistant"


def test_a_checkpoint_only_its_own_code_defines_is_refused_until_its_code_is_trusted(tmp_path):
    import pytest

    from evals.pipeline.compose import to_run_config
    from evals.pipeline.plan import make_plan as plan_of
    from speclens.errors import ConfigError
    from tests.unit.conftest import compose_run, fake_overrides
    from tests.unit.test_commands_fake import ROWS

    def make_plan(cfg):
        return plan_of(to_run_config(cfg))

    custom = {"model_type": "speclens_toy", "auto_map": {"AutoModelForCausalLM": "modeling_toy.ToyForCausalLM"}}
    overrides = fake_overrides(tmp_path, ROWS, **custom)
    with pytest.raises(
        ConfigError, match=r"model_type='speclens_toy' that only its own code defines \(modeling_toy.py\)"
    ):
        make_plan(compose_run(*overrides))
    trusted = make_plan(compose_run(*overrides, "+engine.extra_args.trust_remote_code=true"))
    assert trusted.config.engine.extra_args["trust_remote_code"] is True
    # a model type transformers knows needs none of its shipped code
    known = fake_overrides(tmp_path / "known", ROWS, model_type="llama", auto_map={"AutoConfig": "configuration_x.X"})
    assert make_plan(compose_run(*known)).config.target.model == str(tmp_path / "known" / "target")
    # a speculators head (an EAGLE-3 head as speclens builds it): auto_map to its config.py, no model_type
    head = {"auto_map": {"": "config.Eagle3SpeculatorConfig"}, "speculators_config": {"algorithm": "eagle3"}}
    assert make_plan(compose_run(*fake_overrides(tmp_path / "head", ROWS, **head))).config.target.model
