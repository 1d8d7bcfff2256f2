"""Checkpoint references (local folder or hub id): resolve, read config.json, fingerprint."""

from __future__ import annotations

import fnmatch
import hashlib
import json
from pathlib import Path
from typing import Any

from speclens.assets import cache_dir
from speclens.errors import ConfigError
from speclens.files import write_text_atomic

# Files that define what a checkpoint computes; their contents go into its fingerprint (a chat
# template in chat_template.jinja decides what the target is asked).
FINGERPRINT_SUFFIXES = (
    ".safetensors",
    ".bin",
    ".pt",
    ".json",
    ".model",
    ".txt",
    ".gguf",
    ".jinja",
    ".tiktoken",
    ".py",  # a checkpoint's own modelling code (config.json auto_map), run with trust_remote_code
)
# What vLLM and transformers load from a hub checkpoint: configs and tokenizer files (chat templates
# kept in chat_template.jinja, tiktoken vocabularies), the checkpoint's own code (auto_map's .py
# modules), and one set of weights: safetensors where the repository has them, else PyTorch's
# .bin/.pt (vLLM's own example EAGLE-3 head ships those).
HUB_FILES = ("*.json", "*.model", "*.txt", "*.jinja", "*.tiktoken", "*.py")
HUB_WEIGHTS = (("*.safetensors",), ("*.bin", "*.pt"))


def hub_patterns(files: list[str] | None, config_only: bool = False) -> list[str]:
    """snapshot_download's allow_patterns for a repository holding `files` (None: not listed,
    offline: whatever the local cache holds of either kind of weights)."""
    if config_only:
        return ["config.json"]
    if files is None:
        return [*HUB_FILES, *(w for kind in HUB_WEIGHTS for w in kind)]
    for kind in HUB_WEIGHTS:
        if any(fnmatch.fnmatch(f, w) for f in files for w in kind):
            return [*HUB_FILES, *kind]
    return list(HUB_FILES)


def resolve(ref: str, key: str, config_only: bool = False) -> Path:
    """A local folder holding config.json for `ref`; hub ids come from the local HF cache
    or, where the hub is reachable, are downloaded there (`config_only`: config.json alone).
    `key` names the config key in errors."""
    path = Path(ref).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ConfigError(f"{key}={ref}: the folder has no config.json, so it is not a model checkpoint.")
        return path
    if path.exists() or ref.startswith(("/", ".", "~")) or ref.count("/") != 1:
        raise ConfigError(f"{key}={ref}: no such checkpoint folder (expected a local folder or a hub id org/name).")
    # optional: only hub ids (not local folders) need huggingface_hub.
    try:
        from huggingface_hub import list_repo_files, snapshot_download

        try:
            files = None if config_only else list_repo_files(ref)
        except Exception:  # offline: the cache answers below, or nothing does
            files = None
        return Path(snapshot_download(ref, allow_patterns=hub_patterns(files, config_only)))
    except Exception as exc:  # offline, gated, missing: all mean "not loadable here"
        raise ConfigError(
            f"{key}={ref}: not a local folder, and the Hugging Face hub could not provide it "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}). "
            f"Download it where the hub is reachable and set {key}=<local folder>."
        ) from None


# Fields every check reads as counts: when present (and not null) each is a whole number >= 1.
COUNT_FIELDS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
)
# Where a config nests its language model (speclens/model_facts.py text_config reads them).
NESTED_CONFIGS = ("text_config", "transformer_layer_config")
# A tokenizer transformers can load from a folder has one of these.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "*.tiktoken")


def read_config(path: Path, key: str) -> dict[str, Any]:
    """The checkpoint's config.json, checked: an object, its nested language-model config an object,
    every count a whole number >= 1, query heads a multiple of KV heads. The one reader of
    checkpoint configs (evals.run, evals.guidelines, evals.selfcheck); each problem one line."""
    where = f"{key}={path}: config.json"
    try:
        data = json.loads((path / "config.json").read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where} is not UTF-8 text (byte {exc.start}).") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{where} is unreadable ({exc}).") from None
    check_config(data, where)
    return data


def check_config(data: Any, where: str) -> None:
    """A model config as speclens reads it: an object, its nested language-model config an object,
    `architectures` a list of names, every count a whole number >= 1, query heads a multiple of KV
    heads (each problem one line, starting with `where`)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where} holds a {type(data).__name__}, not a JSON object of model settings.")
    parts = [("", data)]
    for nested in NESTED_CONFIGS:
        value = data.get(nested)
        if value is not None and not isinstance(value, dict):
            raise ConfigError(f"{where}: {nested} must be an object of model settings, not {type(value).__name__}.")
        if value:
            parts.append((f"{nested}.", value))
    architectures = data.get("architectures")
    if architectures is not None and (
        not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures)
    ):
        raise ConfigError(f"{where}: architectures={json.dumps(architectures)} must be a list of class names.")
    for prefix, part in parts:
        for field in COUNT_FIELDS:
            value = part.get(field)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{where}: {prefix}{field}={value!r} is impossible; it must be a whole number >= 1.")
        heads, kv_heads = part.get("num_attention_heads"), part.get("num_key_value_heads")
        if heads is not None and kv_heads is not None and heads % kv_heads:
            raise ConfigError(
                f"{where}: {prefix}num_attention_heads={heads} is not a multiple of "
                f"{prefix}num_key_value_heads={kv_heads}; every KV head must serve the same number of query heads."
            )


def check_tokenizer(path: Path, key: str) -> None:
    """The checkpoint folder holds a tokenizer (the target's prompts are rendered with it)."""
    if not any(file.is_file() for name in TOKENIZER_FILES for file in path.glob(name)):
        raise ConfigError(
            f"{key}={path}: the folder holds no tokenizer ({', '.join(TOKENIZER_FILES)}); copy the model's "
            "tokenizer files beside its config.json."
        )


# The weight files vLLM's loaders read from a checkpoint folder.
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf")


def check_weights_present(path: Path, key: str) -> None:
    """The checkpoint folder holds weights (a config.json alone fails in vLLM's loader)."""
    if not any(file.is_file() for name in WEIGHT_FILES for file in path.glob(name)):
        raise ConfigError(
            f"{key}={path}: the folder holds no weights (no .safetensors, .bin or .pt file beside its "
            "config.json); download or export the checkpoint whole, weights included."
        )


def fingerprint(path: Path) -> str:
    """sha256 over the names and contents of the checkpoint's files.

    File digests are cached by (path, size, mtime) so re-runs do not re-read
    large weights; a fine-tuned checkpoint written in place gets a new mtime.
    """
    cache_file = cache_dir() / "fingerprints.json"
    try:
        cache = json.loads(cache_file.read_text())
    except (OSError, json.JSONDecodeError):
        cache = {}
    known = len(cache)
    total = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in FINGERPRINT_SUFFIXES):
        stat = file.stat()
        cache_key = f"{file.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
        digest = cache.get(cache_key)
        if digest is None:
            h = hashlib.sha256()
            with file.open("rb") as f:
                for chunk in iter(lambda: f.read(1 << 22), b""):
                    h.update(chunk)
            digest = cache[cache_key] = h.hexdigest()
        total.update(f"{file.relative_to(path)}\0{digest}\n".encode())
    if len(cache) != known:  # only new digests are worth a write
        write_text_atomic(cache_file, json.dumps(cache))
    return "sha256:" + total.hexdigest()
