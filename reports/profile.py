"""speculation_profile.json: per mechanism, D and domain, the acceptance profile measured from the
step records — AL, the marginal per-position acceptance (P(the first k+1 drafts all accepted),
what vLLM's synthetic rejection sampler takes as `synthetic_acceptance_rates`) and the conditional
one (P(draft k+1 accepted | the first k were)) — with the vLLM speculative config that reproduces
it on any target: the zero-cost proposer (D free proposals per step) verified by the synthetic
sampler, so verification can be timed at this acceptance without a trained drafter.

Each profile also carries the keys of the speculation_profile.json proposed for NVIDIA
Model-Optimizer's specdec_bench (PR #2247, not merged): `num_speculative_tokens`,
`marginal_accept_rates`, `conditional_accept_rates`, `mean_accept_length`, so one entry can be
handed to tools reading that layout (`marginal_accept_rates` for vLLM's synthetic mode,
`conditional_accept_rates` for Dynamo's mocker).

For NVIDIA's planners (Model-Optimizer PRs #2313, #2315, #2316), each profile also says `method`
(the drafter), `acceptance_length_by_k` (AL at every k up to D, from the marginal rates: a serial
drafter's acceptance at a smaller k is a prefix of its acceptance at D; a parallel drafter's,
drafter.parallel_drafting=true, is not, so its profile holds its own D only and says
`measured_per_k`: true), `max_num_speculative_tokens`
(the largest k the profile holds: its D) and `measurement_conditions` (target, drafter checkpoint,
dataset, temperature, model runner, engine and its version). `dynamo_flags` gives a profile as
Dynamo's planner and mocker take it (`--aic-nextn`, `--aic-nextn-accept-rates`: conditional rates
in AIC's five slots, Dynamo PR #10436). `read_profiles` also reads files in Model-Optimizer's
proposed layout (one profile or a list, keyed `num_speculative_tokens`, `marginal_accept_rates` or
`conditional_accept_rates`, `method`), so `evals.whatif` and `acceptance.synthetic=` take profiles
other tools wrote.

Each profile also has `draft_share` (drafted steps / target passes, metrics.draft_share),
`tokens_per_step` and the `model_runner` that measured them: a speedup follows tokens per step,
1 + draft_share·(AL − 1), and on Model Runner V1 a lookup drafter drafts on some steps only.

Checked on writing: 1 + Σ marginal = AL and the marginal never increases.

Where the prompts state their lengths (long context), a run also has one profile per length
bucket over all its prompts of that length (`domain` all, with `length` and `input_tokens`), and a
ranked sweep's file gains `num_speculative_tokens_by_context`: the (B, context) -> D table of the
serve.json beside it, one row per mechanism and length bucket with the contexts it serves and its
`num_speculative_tokens_per_batch_size` (reports/serve.py `context_table`). Files without lengths
are as before (schema version 1: readers of it ignore the added key).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from reports.serve import SERVE_FILE, context_table
from runners.zero_cost_proposer import CLASS_PATH
from speclens import metrics
from speclens.acceptance import marginal_from_conditional
from speclens.errors import CorruptRecord
from speclens.files import write_json_atomic
from speclens.records import read_parquet
from speclens.run_files import REQUESTS_FILE, STEPS_FILE, read_stamp
from speclens.summary import RunSummary

PROFILE_FILE = "speculation_profile.json"
PROFILE_VERSION = 1


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
    }


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
    conditions = measurement_conditions(run_dir, summary)
    parallel = bool((read_stamp_or_empty(run_dir).get("speculative_config") or {}).get("parallel_drafting"))
    return [
        per_k(p, parallel) | {"measurement_conditions": conditions}
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


def read_stamp_or_empty(run_dir: Path) -> dict[str, Any]:
    """The stamp, or {} where it is missing or damaged: what a profile says of its conditions is then unknown."""
    try:
        return read_stamp(run_dir)
    except CorruptRecord:
        return {}


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


# What every profile entry holds (a run's file is checked for them before a sweep gathers it).
PROFILE_KEYS = ("drafter", "d", "domain", "al", "marginal")


# Model-Optimizer's proposed layout: what one of its profiles holds (with one of its rate lists).
FOREIGN_KEYS = ("num_speculative_tokens",)
FOREIGN_RATES = ("marginal_accept_rates", "conditional_accept_rates")


def from_foreign(entry: Any, path: Path) -> dict[str, Any]:
    """A profile in Model-Optimizer's proposed layout as speclens's (domain `all`; the drafter its
    `method`, else `unknown`), or CorruptRecord naming what it lacks or breaks."""
    if not isinstance(entry, dict) or "num_speculative_tokens" not in entry:
        raise CorruptRecord(f"{path}: a profile without num_speculative_tokens")
    d = entry["num_speculative_tokens"]
    if not isinstance(d, int) or isinstance(d, bool) or d < 1:
        raise CorruptRecord(f"{path}: num_speculative_tokens={d!r} is not a draft length (a whole number >= 1)")
    if entry.get("marginal_accept_rates") is not None:
        marginal = entry["marginal_accept_rates"]
    elif entry.get("conditional_accept_rates") is not None:
        marginal = marginal_from_conditional(list(entry["conditional_accept_rates"]))
    else:
        raise CorruptRecord(f"{path}: a profile with neither marginal_accept_rates nor conditional_accept_rates")
    if (
        not isinstance(marginal, list)
        or len(marginal) != d
        or not all(isinstance(m, (int, float)) and not isinstance(m, bool) and 0 <= m <= 1 for m in marginal)
        or any(b > a + 1e-9 for a, b in zip(marginal, marginal[1:]))
    ):
        raise CorruptRecord(
            f"{path}: its acceptance rates are not {d} non-increasing rates in [0, 1] (num_speculative_tokens={d})"
        )
    marginal = [float(m) for m in marginal]
    drafter = str(entry.get("method") or "unknown")
    return {
        "drafter": drafter,
        "d": d,
        "domain": "all",
        "segment": "all",
        "al": 1.0 + sum(marginal),
        "marginal": marginal,
        "conditional": metrics.conditional_acceptance(marginal),
        "source_layout": "model-optimizer",
        **{k: entry[k] for k in ("measurement_conditions",) if k in entry},
    }


def dynamo_flags(conditional: list[float | None], d: int) -> str:
    """A profile as Dynamo's mocker and planner take it (`--aic-nextn N --aic-nextn-accept-rates
    c1,…,c5`: conditional rates in AIC's five slots, zero-padded; N at most 5)."""
    slots = [0.0 if c is None else float(c) for c in conditional[:5]]
    slots += [0.0] * (5 - len(slots))
    return f"--aic-nextn {min(d, 5)} --aic-nextn-accept-rates " + ",".join(f"{c:.4g}" for c in slots)


def read_profiles(run_dir: Path) -> list[dict[str, Any]]:
    """A run's profiles from its speculation_profile.json (or a file of that name in
    Model-Optimizer's proposed layout), or CorruptRecord for a file that is not readable JSON in
    either layout (of this version or an earlier one)."""
    path = run_dir / PROFILE_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptRecord(f"{path} is unreadable ({exc})") from None
    entries = (
        data if isinstance(data, list) else [data] if isinstance(data, dict) and "schema_version" not in data else None
    )
    if entries is not None and entries and all(isinstance(e, dict) and "num_speculative_tokens" in e for e in entries):
        return [from_foreign(e, path) for e in entries]
    version = data.get("schema_version") if isinstance(data, dict) else None
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= PROFILE_VERSION:
        raise CorruptRecord(
            f"{path} has no schema_version this speclens reads (1 to {PROFILE_VERSION}; it has {version!r})"
        )
    profiles = data.get("profiles")
    if not isinstance(profiles, list) or not all(
        isinstance(p, dict) and all(k in p for k in PROFILE_KEYS) for p in profiles
    ):
        raise CorruptRecord(f"{path} does not hold a list of profiles (each with {', '.join(PROFILE_KEYS)})")
    return profiles


CONTEXT_TABLE_KEY = "num_speculative_tokens_by_context"


def context_table_beside(out_dir: Path) -> list[dict[str, Any]]:
    """The (B, context) -> D table of the serve.json in `out_dir` ([] without one, or without lengths)."""
    try:
        plan = json.loads((out_dir / SERVE_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return []
    return context_table(plan) if isinstance(plan, dict) else []


def write_profiles(profiles: list[dict[str, Any]], out_dir: Path) -> Path:
    """speculation_profile.json in `out_dir`, with the table of the serve.json there where it has one
    (a sweep's ranking is written before its profiles are gathered)."""
    path = out_dir / PROFILE_FILE
    data: dict[str, Any] = {"schema_version": PROFILE_VERSION, "profiles": profiles}
    table = context_table_beside(out_dir)
    if table:
        data[CONTEXT_TABLE_KEY] = table
    write_json_atomic(data, path)
    return path
