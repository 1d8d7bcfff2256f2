"""Finding and reading finished runs (run dirs holding summary.json) and replays under a folder."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from core.errors import CorruptRecord, SpeclensError
from core.summary import (
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
)


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

    def get(self, dotted: str) -> Any:
        node: Any = {"fingerprints": asdict(self.fingerprints), "config": self.stamp.get("config", {})}
        for part in dotted.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        return node


# Runs at different sampling temperatures are one more axis of curves and rankings, not a conflict.
CONSISTENT_ACROSS_TEMPERATURES = tuple(k for k in CONSISTENT_KEYS if k != "config.sampling.temperature")


@dataclass(frozen=True)
class Run(Measured):
    summary: RunSummary


@dataclass(frozen=True)
class Replay(Measured):
    record: ReplayRecord


def _stamp(run_dir: Path) -> dict[str, Any]:
    stamp_file = run_dir / "stamp.json"
    if not stamp_file.is_file():
        return {}
    try:
        stamp = json.loads(stamp_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptRecord(f"{stamp_file} is unreadable ({exc})") from None
    if not isinstance(stamp, dict) or not isinstance(stamp.get("config", {}), dict):
        raise CorruptRecord(f"{stamp_file} does not have the layout of a run stamp")
    drafter = stamp.get("config", {}).get("drafter")
    if isinstance(drafter, dict):
        # Stamps before summary schema 3 restated the drafter's name inside its settings; keys added
        # since, unset, say nothing the older stamps did not (compared as absent in both).
        drafter.pop("name", None)
        if drafter.get("schedule", "set") is None:
            drafter.pop("schedule")
    return stamp


def find_runs(root: Path) -> list[Run]:
    """Every finished run under `root` (a run dir, or a sweep dir holding several)."""
    if not root.is_dir():
        raise SpeclensError(f"{root}: no such folder.")
    runs = []
    for summary_file in sorted(root.rglob(SUMMARY_FILE)):
        summary = read_summary(summary_file.parent)
        runs.append(Run(summary_file.parent, summary.fingerprints, _stamp(summary_file.parent), summary))
    return runs


def find_replays(root: Path) -> list[Replay]:
    """Every replay (replay.json beside its curves) under `root`."""
    replays = []
    for replay_file in sorted(root.rglob(REPLAY_FILE)):
        record = read_replay(replay_file.parent)
        replays.append(Replay(replay_file.parent, record.summary.fingerprints, record.stamp, record))
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
            shown = "; ".join(f"{v} in {', '.join(names[:3])}{' …' if len(names) > 3 else ''}" for v, names in by_value.items())
            differing.append(f"{key} differs ({shown})")
    if differing:
        raise SpeclensError(
            "these runs were measured under different settings and cannot be compared: "
            + " | ".join(differing)
            + ". Aggregate each setting from its own sweep dir."
        )
