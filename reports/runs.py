"""Finding and reading finished runs (run dirs holding summary.json) and replays under a folder."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Collection, Hashable, Iterable

from speclens.config import dotted_get
from speclens.errors import SpeclensError
from speclens.run_files import holding, read_stamp
from speclens.summary import (
    REPLAY_FILE,
    SUMMARY_FILE,
    Fingerprints,
    ReplayRecord,
    RunSummary,
    read_replay,
    read_summary,
)

# What must be the same across runs that are drawn or ranked together.
CONSISTENT_KEYS = (
    "fingerprints.target",
    "fingerprints.dataset",
    "config.sampling.temperature",
    "config.sampling.top_p",
    "config.sampling.max_tokens",
    "config.seed",
    # Where thinking ends: segment figures split one way only.
    "config.reasoning",
)
# Keys added to run configs after runs were first stored, with the value older stamps meant.
LATER_KEY_DEFAULTS: dict[str, Any] = {
    "config.reasoning": {"parser": None, "end": None, "start": None},
    "config.chat_template_kwargs": {},
    "config.engine.model_runner": "auto",
    "config.engine.kv_cache_dtype": "auto",
    "config.verify.method": "standard",
    # A drafter without probabilities (n-gram, suffix) drafts as greedy drafting does: one-hot.
    "config.drafter.sample_method": "greedy",
    "config.drafter.parallel_drafting": False,
    # Unquantized checkpoints (stamps before the stamp said).
    "quantization.target": None,
    "quantization.draft": None,
}


@dataclass(frozen=True)
class Measured:
    """A run or a replay: where it is, what it measured with (fingerprints) and its stamp."""

    path: Path
    fingerprints: Fingerprints
    stamp: dict[str, Any]

    @property
    def temperature(self) -> float:
        """The sampling temperature it was measured at (0: greedy)."""
        return float(self.get("config.sampling.temperature") or 0.0)

    @property
    def template(self) -> str:
        """The chat_template_kwargs it rendered prompts with, as `key=value, ...` ('': the
        template's defaults). Like the temperature, an axis: runs in different modes (thinking on,
        off) are never drawn in one curve or ranked in one table."""
        return template_label(self.get("config.chat_template_kwargs") or {})

    @property
    def setting(self) -> str:
        """The settings it changed from their defaults (setting_label; '': none). An axis like the
        temperature: runs with an FP8 KV cache are never drawn in one curve with bf16's."""
        return setting_label({key: self.get(key) for key in SETTING_KEYS})

    def get(self, dotted: str) -> Any:
        node = dotted_get(
            {
                "fingerprints": asdict(self.fingerprints),
                "config": self.stamp.get("config", {}),
                "quantization": self.stamp.get("quantization") or {},
            },
            dotted,
        )
        return LATER_KEY_DEFAULTS.get(dotted) if node is None else node


def template_label(kwargs: dict[str, Any]) -> str:
    """chat_template_kwargs as `key=value, ...` (JSON values, keys sorted; '' for none)."""
    return ", ".join(f"{k}={json.dumps(v, sort_keys=True)}" for k, v in sorted(kwargs.items()))


# Settings that are an axis of their own (issue 49: the KV cache, verification, draft sampling,
# parallel drafting, the checkpoints' quantization), like the temperature and the chat template: a
# run's `setting` names those it changed from the default, and curves, rankings and serve.json hold
# one line per setting; the report pairs each against the default's run (reports/settings.py).
SETTING_KEYS = {
    "config.engine.kv_cache_dtype": "kv_cache_dtype",
    "config.verify.method": "verify.method",
    # verify.draft_sampling is stored as drafter.sample_method (evals/verify.py fold_draft_sampling).
    "config.drafter.sample_method": "verify.draft_sampling",
    "config.drafter.parallel_drafting": "drafter.parallel_drafting",
    # The checkpoints' weight quantization, from their config.json (stamp.json `quantization`).
    "quantization.target": "target.quantization",
    "quantization.draft": "drafter.quantization",
}
# Runs at different sampling temperatures are one more axis of curves and rankings, not a conflict.
CONSISTENT_ACROSS_TEMPERATURES = tuple(k for k in CONSISTENT_KEYS if k != "config.sampling.temperature")


def setting_label(values: dict[str, Any]) -> str:
    """`kv_cache_dtype=fp8, verify.method=block`: the SETTING_KEYS (dotted) a run changed from their
    defaults, by their short names ('': every default)."""
    changed = [
        f"{name}={values[key] if isinstance(values[key], str) else json.dumps(values[key])}"
        for key, name in SETTING_KEYS.items()
        if values.get(key) is not None and values[key] != LATER_KEY_DEFAULTS[key]
    ]
    return ", ".join(changed)


def config_setting(config: dict[str, Any], quantization: dict[str, Any] | None = None) -> str:
    """setting_label of a resolved run config (a stamp's `config`) and its checkpoints'
    quantization (a stamp's `quantization`), for what is written before a stamp."""
    found = {"config": config, "quantization": quantization or {}}
    return setting_label({key: dotted_get(found, key) for key in SETTING_KEYS})


@dataclass(frozen=True)
class Run(Measured):
    summary: RunSummary


@dataclass(frozen=True)
class Replay(Measured):
    record: ReplayRecord


def _found(root: Path, name: str, exclude: Collection[Path]) -> list[Path]:
    """The folders under `root` holding `name`, but for those in (or under) `exclude`."""
    left_out = {Path(p).resolve() for p in exclude}
    folders = []
    for folder in holding(root, name):
        resolved = folder.resolve()
        if resolved not in left_out and left_out.isdisjoint(resolved.parents):
            folders.append(folder)
    return folders


def find_runs(root: Path, exclude: Collection[Path] = ()) -> list[Run]:
    """Every finished run under `root` (a run dir, or a sweep dir holding several), but for those
    in `exclude` (a sweep's jobs that failed: what their dirs hold is not this sweep's result)."""
    if not root.is_dir():
        raise SpeclensError(f"{root}: no such folder.")
    runs = []
    for run_dir in _found(root, SUMMARY_FILE, exclude):
        summary = read_summary(run_dir)
        runs.append(Run(run_dir, summary.fingerprints, read_stamp(run_dir), summary))
    return runs


def measured_runs(runs: list[Run]) -> list[Run]:
    """The runs whose acceptance was measured: a run at synthetic acceptance (acceptance.synthetic)
    timed a drafter at rates the user set, which no curve, ranking or comparison of acceptance takes."""
    return [run for run in runs if run.summary.synthetic_acceptance is None]


def find_replays(root: Path, exclude: Collection[Path] = ()) -> list[Replay]:
    """Every replay (replay.json beside its curves) under `root`, but for those in `exclude`."""
    replays = []
    for replay_dir in _found(root, REPLAY_FILE, exclude):
        record = read_replay(replay_dir)
        replays.append(Replay(replay_dir, record.summary.fingerprints, record.stamp, record))
    return replays


def check_consistent(runs: list[Measured], keys: tuple[str, ...] = CONSISTENT_KEYS) -> None:
    """Refuse runs measured under different settings, naming each differing key and its values."""
    differing = []
    for key in keys:
        values = {json.dumps(run.get(key), sort_keys=True) for run in runs}
        if len(values) > 1:
            by_value: dict[str, list[str]] = {}
            for run in runs:
                by_value.setdefault(json.dumps(run.get(key)), []).append(run.path.name)
            shown = "; ".join(
                f"{v} in {', '.join(names[:3])}{' …' if len(names) > 3 else ''}" for v, names in by_value.items()
            )
            differing.append(f"{key} differs ({shown})")
    if differing:
        raise SpeclensError(
            "these runs were measured under different settings and cannot be compared: "
            + " | ".join(differing)
            + ". Aggregate each setting from its own sweep dir."
        )


def _flat(node: Any, prefix: str = "") -> dict[str, str]:
    """Dotted key -> JSON value of every leaf of a nested dict."""
    if not isinstance(node, dict):
        return {prefix: json.dumps(node, sort_keys=True)}
    flat: dict[str, str] = {}
    for key, value in node.items():
        flat |= _flat(value, f"{prefix}.{key}" if prefix else str(key))
    return flat


def settings(run: Measured) -> dict[str, str]:
    """Everything a run was measured with, flattened: its config keys (as the command line names
    them), the runner and the content fingerprints."""
    return (
        _flat(run.stamp.get("config", {}))
        | {"runner": json.dumps(run.stamp.get("runner"))}
        | _flat(asdict(run.fingerprints), "fingerprints")
    )


def differing_settings(a: Measured, b: Measured, shown: int = 4) -> str:
    """The keys two runs were measured with different values of, each with both values."""
    mine, theirs = settings(a), settings(b)
    keys = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
    if not keys:
        return "the same settings"
    listed = "; ".join(f"{k}: {mine.get(k, 'unset')} vs {theirs.get(k, 'unset')}" for k in keys[:shown])
    return f"different {', '.join(keys[:shown])}{f' (and {len(keys) - shown} more keys)' if len(keys) > shown else ''} ({listed})"


def check_one_each(
    runs: list[Measured],
    keys_of: Callable[[Measured], Iterable[Hashable]],
    describe: Callable[[Hashable], str],
    advice: str,
) -> None:
    """Refuse two runs that give the same entry (`keys_of`: the entries a run gives), naming the
    settings they differ in, rather than silently keeping one of them."""
    seen: dict[Hashable, Measured] = {}
    for run in runs:
        for key in keys_of(run):
            other = seen.setdefault(key, run)
            if other is not run:
                raise SpeclensError(
                    f"{describe(key)} was measured twice ({other.path} and {run.path}), with "
                    f"{differing_settings(other, run)}; {advice}"
                )
