"""SPEED-Bench (nvidia/SPEED-Bench): the qualitative split and the throughput splits.

Sources: the Hugging Face hub (through `datasets`, for users with hub access) or
`dataset.path=` a prepared local copy, parquet or jsonl, with `turns` (Model-Optimizer
specdec_bench's preparation output) or `messages` (NeMo-Skills' output). Rows from
non-redistributable sources hold a placeholder until rebuilt; they are refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from evals.datasets.domains import domain_of, long_context_domain
from evals.datasets.jsonl import check_unique, data_file, read_jsonl, text_turns
from speclens.config import Choice, DatasetConfig
from speclens.errors import ConfigError
from speclens.generation import ChatEncoder, Prompt

HUB_ID = "nvidia/SPEED-Bench"


class SpeedBenchSplit(Choice):
    """SPEED-Bench's configs: the qualitative categories, or one throughput length."""

    qualitative = "qualitative"
    throughput_1k = "throughput_1k"
    throughput_2k = "throughput_2k"
    throughput_8k = "throughput_8k"
    throughput_16k = "throughput_16k"
    throughput_32k = "throughput_32k"


PLACEHOLDER = "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH"
REBUILD_HINT = (
    "rebuild the data with NVIDIA's preparation script (Model-Optimizer "
    "examples/specdec_bench/prepare_data.py, or NeMo-Skills' speed-bench prepare.py) and point "
    "dataset.path at its output"
)
DATA_SUFFIXES = (".parquet", ".jsonl", ".json")


@dataclass
class SpeedBenchConfig(DatasetConfig):
    """From the hub (nvidia/SPEED-Bench, needs `datasets` and hub access) or dataset.path=<file or
    folder> with prepared rows (parquet/jsonl; `turns` or `messages`)."""

    # One config, or a list of throughput splits (one length bucket each), e.g.
    # [throughput_1k,throughput_32k] with dataset.path a folder holding both.
    config: Any = "qualitative"
    # Hub split to read when loading from the hub.
    split: str = "test"


def _read_file(file: Path) -> list[dict[str, Any]]:
    if file.suffix == ".parquet":
        try:
            return pd.read_parquet(data_file(file)).to_dict(orient="records")
        except (OSError, ValueError) as exc:  # pyarrow's errors for a file that is not parquet
            raise ConfigError(f"{file}: not a readable parquet file ({str(exc).splitlines()[0]}).") from None
    return read_jsonl(file)


def _data_file(folder: Path, config: str) -> Path:
    """`<folder>/<config>.<ext>`, `<folder>/<config>/<one file>`, or the folder's only data file."""
    candidates = [folder / f"{config}{s}" for s in DATA_SUFFIXES]
    candidates += (
        sorted(p for p in (folder / config).glob("*") if p.suffix in DATA_SUFFIXES)
        if (folder / config).is_dir()
        else []
    )
    found = [p for p in candidates if p.is_file()]
    if not found:
        found = sorted(p for p in folder.glob("*") if p.suffix in DATA_SUFFIXES)
        if len(found) != 1:
            raise ConfigError(
                f"dataset.path={folder}: no {config}.parquet / {config}.jsonl (or {config}/ folder) in it"
                + (f"; it holds {', '.join(p.name for p in found)}" if found else "")
                + "; point dataset.path at the file."
            )
    return found[0]


def _rows_from_hub(cfg: SpeedBenchConfig, split: str) -> list[dict[str, Any]]:
    # optional: only SPEED-Bench read from the hub needs `datasets`.
    try:
        from datasets import load_dataset
    except ImportError:
        raise ConfigError(
            "dataset=speed_bench without dataset.path reads the hub and needs `pip install datasets`."
        ) from None
    try:
        return [dict(r) for r in load_dataset(HUB_ID, split, split=cfg.split)]
    except Exception as exc:
        raise ConfigError(
            f"dataset=speed_bench: {HUB_ID} ({split}, split {cfg.split}) could not be read from the hub "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); without hub access, "
            "prepare a local copy and set dataset.path=<file or folder>."
        ) from None


def turns_of(row: dict[str, Any], where: str = "row") -> list[str]:
    """User turns from `turns` or from `messages` (a system message is put before the first turn)."""
    if row.get("turns") is not None:
        return text_turns(_plain(row["turns"]), where)
    messages = _plain(row.get("messages"))
    if messages is None:
        return []
    if not isinstance(messages, list) or not all(
        isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages
    ):
        raise ConfigError(f"{where}: messages must be a list of {{role, content}} objects.")
    system = [m["content"] for m in messages if m.get("role") == "system"]
    user = [m["content"] for m in messages if m.get("role") == "user"]
    if system and user:
        user[0] = "\n\n".join(system + [user[0]])
    return text_turns(user, where) if user else []


def _plain(value: Any) -> Any:
    """Parquet gives arrays where JSON gives lists."""
    return value.tolist() if hasattr(value, "tolist") else value


def prompts_from_rows(rows: list[dict[str, Any]], config: str, source: str) -> list[Prompt]:
    length = split_length(config)
    prompts, placeholders = [], {}
    for i, row in enumerate(rows, start=1):
        turns = turns_of(row, f"{source}: row {i}")
        if not turns or row.get("category") is None:
            raise ConfigError(f"{source}: row {i} lacks category or turns/messages (SPEED-Bench schema).")
        category = str(row["category"])
        if any(PLACEHOLDER in t for t in turns):
            placeholders[category] = placeholders.get(category, 0) + 1
            continue
        domain = long_context_domain(category, length) if length else domain_of(category)
        request_id = str(next((row[k] for k in ("question_id", "id") if row.get(k) is not None), i))
        prompts.append(Prompt(request_id, domain, category, tuple(turns), input_tokens=length))
    check_unique(prompts, source, "question_id")
    if placeholders:
        counts = ", ".join(f"{c}: {n}" for c, n in sorted(placeholders.items()))
        raise ConfigError(
            f"{source}: {sum(placeholders.values())} of {len(rows)} rows still hold the SPEED-Bench placeholder "
            f"text instead of the prompt (by category: {counts}); {REBUILD_HINT}."
        )
    return prompts


def splits_of(value: Any) -> list[str]:
    """dataset.config as a list of SPEED-Bench configs: one, or several throughput splits, each once."""
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    shown = "[" + ",".join(map(str, values)) + "]"
    if not values:
        raise ConfigError("dataset.config=[]: give a SPEED-Bench config, e.g. throughput_8k.")
    splits = [SpeedBenchSplit.of(v, "dataset.config").value for v in values]
    if len(splits) > 1 and SpeedBenchSplit.qualitative.value in splits:
        raise ConfigError(
            f"dataset.config={shown}: only throughput splits combine (one length bucket each); run qualitative on its own."
        )
    if len(set(splits)) != len(splits):
        raise ConfigError(f"dataset.config={shown}: give each split once.")
    return splits


def split_length(split: str) -> int | None:
    """A throughput split's prompt length (throughput_8k -> 8000); None for qualitative."""
    length = re.fullmatch(r"throughput_(\d+)k", split)
    return int(length.group(1)) * 1000 if length else None


def declared_lengths(cfg: SpeedBenchConfig) -> list[int]:
    """The throughput splits' lengths (SPEED-Bench counts them in o200k_base tokens: a target's own
    tokenizer may give more or fewer)."""
    return [n for n in map(split_length, splits_of(cfg.config)) if n is not None]


def load(cfg: SpeedBenchConfig, encoder: ChatEncoder) -> list[Prompt]:
    return [p for split in splits_of(cfg.config) for p in _load_split(cfg, split)]


def _load_split(cfg: SpeedBenchConfig, split: str) -> list[Prompt]:
    if cfg.path:
        path = Path(cfg.path).expanduser()
        if not path.exists():
            raise ConfigError(f"dataset.path={cfg.path}: no such file or folder.")
        file = _data_file(path, split) if path.is_dir() else path
        rows, source = _read_file(file), str(file)
    else:
        rows, source = _rows_from_hub(cfg, split), f"{HUB_ID}:{split}"
    prompts = prompts_from_rows(rows, split, source)
    if not prompts:
        raise ConfigError(f"{source}: no rows.")
    return prompts
