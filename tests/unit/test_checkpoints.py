"""Hub checkpoints as published: what is downloaded of them, and what their fingerprint covers."""

from __future__ import annotations

from speclens.checkpoints import fingerprint, hub_patterns


def test_one_set_of_weights_and_every_tokenizer_and_template_file_are_downloaded():
    both = ["config.json", "model.safetensors", "pytorch_model.bin", "tokenizer.json", "chat_template.jinja"]
    assert hub_patterns(both) == ["*.json", "*.model", "*.txt", "*.jinja", "*.tiktoken", "*.safetensors"]
    # vLLM's example EAGLE-3 head for Llama-3.1-8B: PyTorch weights only
    head = ["config.json", "pytorch_model.bin"]
    assert hub_patterns(head)[-2:] == ["*.bin", "*.pt"] and "*.safetensors" not in hub_patterns(head)
    assert hub_patterns(["config.json", "tokenizer.tiktoken"]) == [
        "*.json",
        "*.model",
        "*.txt",
        "*.jinja",
        "*.tiktoken",
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
