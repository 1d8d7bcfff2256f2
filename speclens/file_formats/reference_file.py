"""Reference ALs for the nightly's gate (issue 68, `reference=` / `write_reference=`), in the form
public reference files use: YAML keyed model -> thinking mode -> K -> AL. speclens keeps one such
file per drafter and domain under two more levels, so that a public file's K -> AL mapping sits
unchanged at the bottom:

    SmolLM2-135M-Instruct:         # the target, as the run names it (or its folder's name)
      default:                     # thinking mode: default, thinking or non_thinking
        ngram:                     # drafter
          all:                     # domain
            3: 2.71                # K (the draft length D) -> AL

A damaged file (not YAML, another shape, a K that is not a whole number >= 1, an AL below 1) is
refused in one line naming the file and the place."""

from __future__ import annotations

import math
from pathlib import Path

import yaml

from speclens.errors import ConfigError
from speclens.files import write_text_atomic

THINKING_MODES = ("default", "thinking", "non_thinking")
# (model, thinking mode, drafter, domain, K) -> AL
References = dict[tuple[str, str, str, str, int], float]


def _mapping(node, where: str, path: Path) -> dict:
    if not isinstance(node, dict) or not node:
        raise ConfigError(
            f"reference={path}: {where} must map names to the next level (model -> thinking mode -> drafter -> domain -> K -> AL)."
        )
    return node


def read_references(path: Path) -> References:
    if not path.is_file():
        raise ConfigError(f"reference={path}: no such file.")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"reference={path}: not readable YAML ({str(exc).splitlines()[0]}).") from None
    found: References = {}
    for model, modes in _mapping(raw, "the file", path).items():
        for mode, drafters in _mapping(modes, f"{model}", path).items():
            if mode not in THINKING_MODES:
                raise ConfigError(
                    f"reference={path}: {model}.{mode}: a thinking mode is one of {', '.join(THINKING_MODES)}."
                )
            for drafter, domains in _mapping(drafters, f"{model}.{mode}", path).items():
                for domain, ks in _mapping(domains, f"{model}.{mode}.{drafter}", path).items():
                    for k, al in _mapping(ks, f"{model}.{mode}.{drafter}.{domain}", path).items():
                        where = f"{model}.{mode}.{drafter}.{domain}.{k}"
                        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
                            raise ConfigError(f"reference={path}: {where}: K must be a whole number >= 1.")
                        if isinstance(al, bool) or not isinstance(al, (int, float)) or not math.isfinite(al) or al < 1:
                            raise ConfigError(f"reference={path}: {where}: {al!r} is not an AL (a number >= 1).")
                        found[(str(model), str(mode), str(drafter), str(domain), k)] = float(al)
    return found


def write_references(path: Path, references: References) -> None:
    nested: dict = {}
    for (model, mode, drafter, domain, k), al in sorted(references.items()):
        nested.setdefault(model, {}).setdefault(mode, {}).setdefault(drafter, {}).setdefault(domain, {})[k] = round(
            al, 4
        )
    write_text_atomic(path, yaml.safe_dump(nested, sort_keys=True))
