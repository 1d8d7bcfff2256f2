"""A run's acceptance profiles, built from its step records, as speculation_profile.json holds them
(the file format, its reader, checks and writer: speclens/file_formats/profile_file.py): all its prompts and
each domain, per reasoning segment and per length bucket, each with the vLLM speculative config
that reproduces it (the zero-cost proposer verified by the synthetic sampler), its planner fields,
measurement conditions and provenance; and a sweep's file written with the (B, context) -> D
table of the serve.json beside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from runners.zero_cost_proposer import CLASS_PATH
from speclens.errors import CorruptRecord
from speclens.figures import metrics
from speclens.figures.summary import RunSummary
from speclens.file_formats.profile_file import planner_fields, read_stamp_or_empty, write_profile_file
from speclens.file_formats.records import read_parquet
from speclens.file_formats.run_files import REQUESTS_FILE, STEPS_FILE
from speclens.file_formats.serve_file import context_table_beside


def synthetic_config(d: int, marginal: list[float]) -> dict[str, Any]:
    """vLLM's speculative config that accepts drafts with these per-position rates (its synthetic
    rejection sampler) behind D free proposals per step (speclens's zero-cost proposer)."""
    return {
        "method": "custom_class",
        "model": CLASS_PATH,
        "num_speculative_tokens": d,
        "rejection_sample_method": "synthetic",
        "synthetic_acceptance_rates": marginal,
    }


def profile(
    drafter: str,
    d: int,
    domain: str,
    steps: pd.DataFrame,
    segment: str = "all",
    requests: pd.DataFrame | None = None,
    model_runner: str | None = None,
) -> dict[str, Any] | None:
    """One profile from drafted steps (None without any); `segment`: of the whole output (`all`),
    or of its thinking or answer steps (speclens/segments.py). With the requests of those steps,
    the share of target passes that drafted and tokens per step (whole outputs only)."""
    if steps.empty:
        return None
    al = metrics.acceptance_length(steps)
    marginal = metrics.per_position_acceptance(steps, d)
    if abs(1 + sum(marginal) - al) > 1e-9 or any(b > a for a, b in zip(marginal, marginal[1:])):
        raise CorruptRecord(
            f"drafter={drafter} d={d} {domain}: per-position acceptance {marginal} is not a "
            f"profile of AL {al} (accepted counts above D in the step records?)"
        )
    conditional = metrics.conditional_acceptance(marginal)
    return {
        "drafter": drafter,
        "d": d,
        "domain": domain,
        "segment": segment,
        "al": al,
        "n_steps": int(len(steps)),
        "marginal": marginal,
        "conditional": conditional,
        "vllm_speculative_config": synthetic_config(d, marginal),
        # Model-Optimizer's proposed layout (module docstring): after a position nothing reaches, 0.
        "num_speculative_tokens": d,
        "mean_accept_length": al,
        "marginal_accept_rates": marginal,
        "conditional_accept_rates": [0.0 if c is None else c for c in conditional],
        "method": drafter,
        "acceptance_length_by_k": {str(k): 1.0 + sum(marginal[:k]) for k in range(1, d + 1)},
        "max_num_speculative_tokens": d,
        # A speedup follows tokens per step, 1 + draft_share·(AL − 1), not AL: a lookup drafter on
        # Model Runner V1 drafts on some steps only (V2 always proposes D).
        "draft_share": None if requests is None else metrics.draft_share(requests),
        "tokens_per_step": None if requests is None else metrics.tokens_per_step(requests),
        "model_runner": model_runner,
    } | planner_fields(d, al, conditional, None if requests is None else metrics.draft_share(requests))


def run_profiles(run_dir: Path, summary: RunSummary) -> list[dict[str, Any]]:
    """A run's profiles: all its prompts and each domain, at its largest batch size (acceptance
    does not depend on B under greedy decoding; one set per run). None where the run has no
    per-step records (no drafter, or a server that reports coarser). With a reasoning boundary,
    each of those per segment too."""
    steps_file = run_dir / STEPS_FILE
    if summary.d is None or summary.record_granularity != "step" or not steps_file.is_file():
        return []
    steps = read_parquet(steps_file)
    if steps.empty:
        return []
    largest = steps.batch_size.max()
    steps = steps[steps.batch_size == largest]
    requests = _requests_at(run_dir, largest)
    runner = summary.numerics.model_runner if summary.numerics else None
    groups = [("all", steps)] + [(domain, group) for domain, group in steps.groupby("domain", sort=True)]
    segmented = "segment" in steps.columns
    parts = [(domain, "all", group) for domain, group in groups]
    parts += [
        (domain, segment, part)
        for domain, group in groups
        if segmented
        for segment, part in group.groupby("segment", sort=True)
    ]
    profiles = []
    for domain, segment, group in parts:
        mine = None
        if requests is not None and segment == "all":
            mine = requests if domain == "all" else requests[requests.domain == domain]
        found = profile(summary.mechanism, summary.d, domain, group, segment, mine, runner)
        if found is not None:
            profiles.append(found)
    stamp = read_stamp_or_empty(run_dir)
    conditions = measurement_conditions(run_dir, summary)
    parallel = bool((stamp.get("speculative_config") or {}).get("parallel_drafting"))
    what = summary.provenance_of(stamp).to_dict()
    return [
        per_k(p, parallel) | {"measurement_conditions": conditions, "provenance": what}
        for p in profiles + length_profiles(summary, steps, requests, runner)
    ]


def per_k(profile: dict[str, Any], parallel: bool) -> dict[str, Any]:
    """A parallel drafter's profile (drafter.parallel_drafting=true) holds AL at its own D only,
    `measured_per_k`: it drafts all D tokens in one pass, so its acceptance at a smaller k is not
    a prefix of its acceptance at D (measure each k). A serial drafter's AL at every k up to D
    follows from its marginal rates."""
    if not parallel:
        return profile | {"measured_per_k": False}
    return profile | {"acceptance_length_by_k": {str(profile["d"]): profile["al"]}, "measured_per_k": True}


def measurement_conditions(run_dir: Path, summary: RunSummary) -> dict[str, Any]:
    """What a profile was measured under, for a reader that has only the profile."""
    stamp = read_stamp_or_empty(run_dir)
    config = stamp.get("config") or {}
    return {
        "target": summary.target,
        "drafter": summary.mechanism,
        "drafter_model": (config.get("drafter") or {}).get("model"),
        "dataset": summary.dataset,
        "temperature": (config.get("sampling") or {}).get("temperature"),
        "model_runner": summary.numerics.model_runner if summary.numerics else None,
        "runner": summary.runner,
        "engine": "vllm" if summary.runner in ("vllm", "server") else summary.runner,
        "engine_version": summary.versions.get("vllm"),
        "n_requests": summary.n_requests,
    }


def _requests_at(run_dir: Path, batch_size: int) -> pd.DataFrame | None:
    """The run's requests at one batch size (None without a requests file)."""
    path = run_dir / REQUESTS_FILE
    if not path.is_file():
        return None
    requests = read_parquet(path)
    return requests[requests.batch_size == batch_size]


def length_profiles(
    summary: RunSummary,
    steps: pd.DataFrame,
    requests: pd.DataFrame | None = None,
    model_runner: str | None = None,
) -> list[dict[str, Any]]:
    """One profile per length bucket of the steps (all their prompts of that length), shortest
    first; [] where the records carry no lengths."""
    if "input_tokens" not in steps.columns:
        return []
    out = []
    for tokens, group in steps.dropna(subset=["input_tokens"]).groupby("input_tokens", sort=True):
        mine = None
        if requests is not None and "input_tokens" in requests.columns:
            mine = requests[requests.input_tokens == tokens]
        found = profile(summary.mechanism, summary.d, "all", group, requests=mine, model_runner=model_runner)
        if found is not None:
            out.append(found | {"length": metrics.length_label(int(tokens)), "input_tokens": int(tokens)})
    return out


def write_profiles(profiles: list[dict[str, Any]], out_dir: Path) -> Path:
    """speculation_profile.json in `out_dir`, with the table of the serve.json there where it has one
    (a sweep's ranking is written before its profiles are gathered)."""
    return write_profile_file(profiles, out_dir, context_table_beside(out_dir))
