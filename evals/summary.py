"""summary.json: every headline figure of a run, written last and atomically.

A run dir without summary.json is an incomplete run.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

import pandas as pd

from evals import costs, metrics
from evals.records import SCHEMA_VERSION
from runners.engine import SpecCounters, TurnResult


class MeasuredPass(Protocol):
    """What the summary needs of a pass (evals.passes.Pass): its batch size and throughput."""

    batch_size: int
    elapsed_s: float

    @property
    def output_tokens_per_s(self) -> float: ...

    @property
    def generate_s(self) -> float: ...

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


def merge_lossless(checks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One lossless verdict over all operating points."""
    checked = all(c["checked"] for c in checks)
    return {
        "checked": checked,
        "identical": all(c["identical"] for c in checks) if checked else None,
        "n_compared": sum(c["n_compared"] for c in checks),
        "n_identical": sum(c["n_identical"] for c in checks),
        "mismatched": [m for c in checks for m in c["mismatched"]][:20],
    }


def _domain_point(steps: pd.DataFrame, requests: pd.DataFrame, seed: int, point_costs: dict) -> dict[str, Any]:
    figures = metrics.group_summary(steps, requests, seed)
    predicted, predicted_range = costs.predicted_speedup(
        figures["tokens_per_step"], point_costs["t_verif"], point_costs["t_step"]
    )
    return figures | {"predicted_speedup": predicted, "predicted_speedup_range": predicted_range}


def operating_points(
    passes: Sequence[MeasuredPass],
    baseline: Sequence[MeasuredPass],
    steps: pd.DataFrame,
    requests: pd.DataFrame,
    engine_steps: pd.DataFrame,
    d: int | None,
    seed: int,
    lossless_checks: Mapping[int, dict[str, Any]],
) -> list[dict[str, Any]]:
    """Per batch size: acceptance, throughput, the cost decomposition and both speedups;
    `lossless_checks` holds each batch size's comparison with plain decoding, if it ran."""
    base_by_size = {p.batch_size: p for p in baseline}
    steps_by_size = dict(tuple(steps.groupby("batch_size", sort=False)))
    requests_by_size = dict(tuple(requests.groupby("batch_size", sort=False)))
    points = []
    for p in passes:
        b = p.batch_size
        at_b_steps, at_b_requests = steps_by_size.get(b, steps.iloc[0:0]), requests_by_size[b]
        point_costs = costs.operating_point_costs(engine_steps, b, d)
        point = {"batch_size": b} | _domain_point(at_b_steps, at_b_requests, seed, point_costs)
        base = base_by_size.get(b)
        measured = None
        if base is not None and base.output_tokens_per_s > 0:
            measured = p.output_tokens_per_s / base.output_tokens_per_s
        gap = costs.speedup_gap(point["predicted_speedup"], measured)
        point |= {
            "output_tokens_per_s": p.output_tokens_per_s,
            "generate_s": p.generate_s,
            # Start to end of the pass: the engine's steps plus the harness between them.
            "elapsed_s": p.elapsed_s,
            "baseline_output_tokens_per_s": base.output_tokens_per_s if base else None,
            "speedup": measured,
            "speedup_gap": gap,
            "gap_above_tolerance": gap is not None and abs(gap) > costs.GAP_TOLERANCE,
            **point_costs,
            "lossless": lossless_checks.get(b),
            "by_domain": {
                domain: _domain_point(domain_steps, group, seed, point_costs)
                for domain, group, domain_steps in metrics.split_by_domain(at_b_steps, at_b_requests)
            },
        }
        points.append(point)
    return points


def pooled_timing(passes: Sequence[MeasuredPass], baseline: Sequence[MeasuredPass]) -> dict[str, float]:
    """Generation time and throughput over all batch sizes together, and their speedup (per batch
    size: operating_points)."""

    def pooled(group: Sequence[MeasuredPass]) -> tuple[float, float]:
        seconds = sum(p.generate_s for p in group)
        tokens = sum(p.output_tokens_per_s * p.generate_s for p in group)
        return seconds, tokens / seconds if seconds > 0 else 0.0

    generate_s, tokens_per_s = pooled(passes)
    timing = {"generate_s": generate_s, "output_tokens_per_s": tokens_per_s}
    if baseline:
        base_s, base_tokens_per_s = pooled(baseline)
        timing |= {"baseline_generate_s": base_s, "baseline_output_tokens_per_s": base_tokens_per_s}
        if base_tokens_per_s > 0:
            timing["speedup"] = tokens_per_s / base_tokens_per_s
    return timing


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
    operating_points: list[dict[str, Any]] | None = None,
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
        "al_by_position": metrics.al_by_position(steps),
        "n_steps": overall["n_steps"],
        "by_domain": metrics.by_domain(steps, requests, seed),
        "vllm_counters": asdict(counters) if counters is not None else None,
        "lossless": lossless_check,
        "speedup": speedup,
        "operating_points": operating_points or [],
        "timing": timing,
        "versions": versions,
        "fingerprints": fingerprints,
        "git_sha": git_sha,
    }


def write_json_atomic(data: dict[str, Any], path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)
