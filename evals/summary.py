"""summary.json: every headline figure of a run, written last and atomically.

A run dir without summary.json is an incomplete run.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from evals import metrics
from evals.records import SCHEMA_VERSION
from runners.engine import SpecCounters, TurnResult

SUMMARY_FILE = "summary.json"


def lossless(spec: Sequence[TurnResult], base: Sequence[TurnResult], greedy: bool) -> dict[str, Any]:
    """Greedy speculative output must equal plain decoding token for token."""
    base_by_key = {(r.request_id, r.turn): r.output_token_ids for r in base}
    mismatches = [
        f"{r.request_id}#{r.turn}" for r in spec if base_by_key.get((r.request_id, r.turn)) != r.output_token_ids
    ]
    return {
        "checked": greedy,
        "identical": (not mismatches) if greedy else None,
        "n_compared": len(spec),
        "n_identical": len(spec) - len(mismatches),
        "mismatched": mismatches[:20],
    }


def build_summary(
    *,
    drafter: str,
    d: int | None,
    target: str,
    dataset: str,
    steps: pd.DataFrame,
    requests: pd.DataFrame,
    counters: SpecCounters | None,
    seed: int,
    timing: dict[str, float],
    versions: dict[str, str | None],
    fingerprints: dict[str, str | None],
    git_sha: str | None,
    lossless_check: dict[str, Any] | None = None,
    speedup: float | None = None,
) -> dict[str, Any]:
    overall = metrics.group_summary(steps, requests, seed)
    per_position = metrics.per_position_acceptance(steps, d) if d else None
    return {
        "schema_version": SCHEMA_VERSION,
        "drafter": drafter,
        "d": d,
        "target": target,
        "dataset": dataset,
        "n_requests": overall["n_requests"],
        "al": overall["al"],
        "al_ci95": overall["al_ci95"],
        "al_request_weighted": metrics.request_weighted_al(steps),
        "tokens_per_step": overall["tokens_per_step"],
        "per_position_acceptance": per_position,
        "conditional_acceptance": metrics.conditional_acceptance(per_position) if per_position else None,
        "acceptance_histogram": metrics.acceptance_histogram(steps, d) if d else None,
        "n_steps": overall["n_steps"],
        "by_domain": metrics.by_domain(steps, requests, seed),
        "vllm_counters": asdict(counters) if counters is not None else None,
        "lossless": lossless_check,
        "speedup": speedup,
        "timing": timing,
        "versions": versions,
        "fingerprints": fingerprints,
        "git_sha": git_sha,
    }


def write_json_atomic(data: dict[str, Any], path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)
