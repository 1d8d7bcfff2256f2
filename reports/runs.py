"""Finding and reading finished runs (run dirs holding summary.json) under a folder."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.errors import SpeclensError
from evals.records import SCHEMA_VERSION

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
class Run:
    path: Path
    summary: dict[str, Any]
    stamp: dict[str, Any]

    def get(self, dotted: str) -> Any:
        node: Any = {"fingerprints": self.summary.get("fingerprints", {}), "config": self.stamp.get("config", {})}
        for part in dotted.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        return node


def find_runs(root: Path) -> list[Run]:
    """Every finished run under `root` (a run dir, or a sweep dir holding several)."""
    if not root.is_dir():
        raise SpeclensError(f"{root}: no such folder.")
    runs = []
    for summary_file in sorted(root.rglob("summary.json")):
        summary = json.loads(summary_file.read_text())
        if summary.get("schema_version") != SCHEMA_VERSION:
            raise SpeclensError(
                f"{summary_file}: schema version {summary.get('schema_version')}, this speclens reads "
                f"{SCHEMA_VERSION}; re-run it or use a matching speclens release."
            )
        stamp_file = summary_file.with_name("stamp.json")
        stamp = json.loads(stamp_file.read_text()) if stamp_file.is_file() else {}
        runs.append(Run(summary_file.parent, summary, stamp))
    return runs


def check_consistent(runs: list[Run], keys: tuple[str, ...] = CONSISTENT_KEYS) -> None:
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
