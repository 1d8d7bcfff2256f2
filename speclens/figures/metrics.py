"""Every acceptance figure, defined once, computed from the per-step records.

- AL: mean over drafted steps of (accepted + 1), pooled over all requests
  (= 1 + num_accepted_tokens / num_drafts in vLLM's counters).
- request-weighted AL: mean over requests (conversations) of each request's AL.

Where an engine reports only each request's totals (record granularity `request`), AL, its
interval and the request-weighted AL come from those totals, which is the same arithmetic; where it
reports only counters (`domain`), AL comes from the counters of the requests it was given.
- tokens per target step: output tokens / target forward passes, counting the
  prefill step and undrafted steps.
- draft share: drafted steps / target forward passes (the passes tokens per step counts), so that
  tokens per step = 1 + draft_share · (AL − 1), less the accepted tokens cut at the turns' ends;
  below 1 by the prefill passes where every decode step drafts (model drafters, Model Runner V2's
  n-gram, which always proposes D), far below where a lookup finds no match (V1's n-gram).
- per-position acceptance: steps with more than k accepted / drafted steps.
- AL over emitted tokens (`al_emitted`): AL without the accepted drafts that max_tokens or the end
  of sequence cut from a turn's last step (vLLM's counters, and AL, count them).
- AL by position and by output position: AL of the steps starting in bins of context length, and
  of generated-token index.
- per segment (thinking, answer; speclens/segments.py for which step and token is where): the same
  figures over each segment's steps, its share of the output tokens.
- per length bucket (`by_length`): the same figures over the requests whose prompt set states
  that input length (dataset=long_context's input_tokens, SPEED-Bench's throughput splits), with
  per-position acceptance, and intervals on AL, tokens per step and each position's rate.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import field, replace
from typing import Annotated

import numpy as np
import pandas as pd
from pydantic import Field

from speclens.console import console
from speclens.errors import MeasurementError
from speclens.generation import COUNTER_NAMES, SpecCounters
from speclens.provenance import check_one_identity
from speclens.schema import AL, Count, NonNegative, Rate, record
from speclens.segments import SEGMENTS

BOOTSTRAP_SAMPLES = 2000
# Below this many requests an interval is not given: one request's resamples are all that request,
# and a zero-width interval would claim a certainty the data does not have.
MIN_REQUESTS_FOR_CI = 2
# Dataclass fields written to JSON only when set (speclens/figures/summary.py to_plain): absent, not null,
# where they do not apply.
OMITTED_WHEN_NONE = {"omit_when_none": True}


@record
class PositionBin:
    """AL of the drafted steps whose position at their start (context length, or generated-token
    index) is in [from, to) (`to` None: open-ended)."""

    from_: Annotated[int, Field(ge=0, alias="from")]
    to: Count | None
    n_steps: Count
    al: AL


@record
class SegmentFigures:
    """Acceptance within one segment (thinking or answer) of a group's outputs."""

    al: AL | None
    al_ci95: list[AL] | None
    # The segment's output tokens over its target passes (a segment's can pass 1 + d where a step
    # straddles the boundary).
    tokens_per_step: NonNegative | None
    per_position_acceptance: list[Rate] | None
    # Conversations with at least one token in the segment.
    n_requests: Count
    n_steps: Count
    output_tokens: Count
    share_of_output_tokens: Rate | None


@record
class GroupFigures:
    """Acceptance of a group of requests (all, or one domain)."""

    al: AL | None
    al_ci95: list[AL] | None
    tokens_per_step: NonNegative | None
    n_requests: Count
    n_steps: Count
    # With a reasoning boundary: the same per segment (thinking, answer).
    by_segment: dict[str, SegmentFigures] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    # The spread of AL over its requests (each request's own AL): p10, p50, p90, min, max, std.
    al_per_request: dict[str, float] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    # AL by generated-token index at each step's start (al_by_output_position).
    al_by_output_position: list[PositionBin] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    # A length bucket's (by_length): its input length, and beside AL's interval those of tokens per
    # step and of each position's acceptance rate (the same bootstrap over requests).
    input_tokens: Count | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    tokens_per_step_ci95: list[NonNegative] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    per_position_acceptance: list[Rate] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    per_position_ci95: list[list[Rate]] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    # The share of target passes that verified a draft (draft_share); absent where passes were not counted.
    draft_share: Rate | None = field(default=None, metadata=OMITTED_WHEN_NONE)


def al_spread(totals: pd.DataFrame) -> dict[str, float] | None:
    """p10, p50, p90, min, max and std (population) of the requests' own ALs."""
    if totals.empty:
        return None
    als = 1.0 + totals["accepted"].to_numpy(dtype=float) / totals["drafts"].to_numpy(dtype=float)
    p10, p50, p90 = np.percentile(als, [10, 50, 90])
    return {
        "p10": float(p10),
        "p50": float(p50),
        "p90": float(p90),
        "min": float(als.min()),
        "max": float(als.max()),
        "std": float(als.std()),
    }


def per_request(steps: pd.DataFrame, requests: pd.DataFrame | None = None) -> pd.DataFrame:
    """Each request (conversation) with at least one drafted step: its accepted tokens and drafted
    steps, by request id. From the step records where there are any, else from the requests'
    totals (request granularity). Rows of runs of different identities are refused (check_one_identity)."""
    check_one_identity(steps, "these steps")
    if not steps.empty or requests is None or "drafted_steps" not in requests.columns:
        _check_counts(steps["num_accepted"], "steps.num_accepted")
        # factorize + bincount: a sweep's summaries take hundreds of these, and groupby.agg costs
        # a millisecond each before it counts anything
        codes, ids = pd.factorize(steps["request_id"], sort=True)
        accepted = np.bincount(codes, weights=steps["num_accepted"].to_numpy(), minlength=len(ids))
        drafts = np.bincount(codes, minlength=len(ids))
        return pd.DataFrame(
            {"accepted": accepted.astype("int64"), "drafts": drafts.astype("int64")},
            index=pd.Index(ids, name="request_id"),
        )
    for column in ("num_accepted", "drafted_steps"):
        _check_counts(requests[column].dropna(), f"requests.{column}")
    drafted = requests[requests["drafted_steps"].fillna(0) > 0]
    grouped = drafted.groupby("request_id", sort=True)[["num_accepted", "drafted_steps"]].sum()
    return grouped.set_axis(["accepted", "drafts"], axis=1).astype("int64")


def _check_counts(values: pd.Series, name: str) -> None:
    """Token and step counts are finite and not negative: a NaN would otherwise read as 0 accepted."""
    array = values.to_numpy(dtype=float)
    if array.size and not (np.isfinite(array).all() and (array >= 0).all()):
        raise ValueError(f"{name} holds a count that is not a finite number >= 0 (NaN, infinite or negative)")


def acceptance_length(steps: pd.DataFrame, requests: pd.DataFrame | None = None) -> float | None:
    """AL: the mean over drafted steps of (accepted + 1), pooled over requests, i.e.
    1 + accepted tokens / drafted steps (`requests`: from each request's totals where the engine
    recorded no steps). None without a drafted step. Public as `speclens.al` (docs/definitions.md);
    rows of runs with different identities (read_sweep's frames) are refused, not pooled."""
    return _al_of(per_request(steps, requests))


def al_ci95(
    steps: pd.DataFrame, seed: int, samples: int = BOOTSTRAP_SAMPLES, requests: pd.DataFrame | None = None
) -> list[float] | None:
    """95% percentile bootstrap over requests (conversations), pooled AL in each resample; None
    with fewer than two requests. `seed` is an integer >= 0, `samples` an integer >= 1."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"al_ci95: seed must be an integer >= 0, not {seed!r}")
    if isinstance(samples, bool) or not isinstance(samples, (int, np.integer)) or samples < 1:
        raise ValueError(f"al_ci95: samples must be an integer >= 1, not {samples!r}")
    return _ci95_of(per_request(steps, requests), seed, samples)


def _al_of(totals: pd.DataFrame) -> float | None:
    if totals.empty:
        return None
    return 1.0 + float(totals["accepted"].sum()) / float(totals["drafts"].sum())


def _ci95_of(totals: pd.DataFrame, seed: int, samples: int = BOOTSTRAP_SAMPLES) -> list[float] | None:
    if len(totals) < MIN_REQUESTS_FOR_CI:
        return None
    accepted = totals["accepted"].to_numpy(dtype=float)
    counts = totals["drafts"].to_numpy(dtype=float)
    idx = resample_indices(seed, samples, len(accepted))
    resampled = 1.0 + accepted[idx].sum(axis=1) / counts[idx].sum(axis=1)
    lo, hi = np.percentile(resampled, [2.5, 97.5])
    return [float(lo), float(hi)]


@functools.lru_cache(maxsize=8)
def resample_indices(seed: int, samples: int, n: int) -> np.ndarray:
    """The bootstrap's draws for `n` requests: a function of (seed, samples, n) only, so groups
    of the same size share them (a sweep's report computes hundreds of CIs)."""
    idx = np.random.default_rng(seed).integers(0, n, size=(samples, n))
    idx.flags.writeable = False
    return idx


def request_weighted_al(steps: pd.DataFrame, requests: pd.DataFrame | None = None) -> float | None:
    """The mean over requests (conversations) of each request's AL (not specdec_bench's Average_AL,
    a request-weighted tokens per step: docs/definitions.md#request-weighted-al)."""
    totals = per_request(steps, requests)
    if totals.empty:
        return None
    return float(1.0 + (totals["accepted"] / totals["drafts"]).mean())


def tokens_per_step(requests: pd.DataFrame) -> float | None:
    """Output tokens / target forward passes that produced tokens (prefill, undrafted and drafted
    steps): what the speedup model multiplies by."""
    check_one_identity(requests, "these requests")
    passes = requests["target_steps"].sum()
    return float(requests["output_tokens"].sum() / passes) if passes else None


def draft_share(requests: pd.DataFrame) -> float | None:
    """Drafted steps / target forward passes that produced tokens (the prefill pass, undrafted and
    drafted steps: tokens per step's denominator), the share of passes AL describes, so that
    tokens per step = 1 + draft_share·(AL − 1) less the accepted tokens cut at the turns' ends.
    None where passes or drafted steps are not counted."""
    if "drafted_steps" not in requests.columns or requests.empty:
        return None
    if requests["target_steps"].isna().any() or requests["drafted_steps"].isna().any():
        return None
    passes = int(requests["target_steps"].sum())
    return float(requests["drafted_steps"].sum() / passes) if passes else None


def per_position_acceptance(steps: pd.DataFrame, d: int) -> list[float] | None:
    """[k] for k = 0 .. d-1: the share of drafted steps that accepted more than k tokens."""
    check_one_identity(steps, "these steps")
    if steps.empty:
        return None
    accepted = steps["num_accepted"].to_numpy()
    return [float((accepted > k).sum() / len(accepted)) for k in range(d)]


def conditional_acceptance(per_position: list[float]) -> list[float | None]:
    """P(k accepted | k-1 accepted), from the per-position rates."""
    out: list[float | None] = []
    previous = 1.0
    for rate in per_position:
        out.append(rate / previous if previous else None)
        previous = rate
    return out


def acceptance_histogram(steps: pd.DataFrame, d: int) -> list[int]:
    """[j] for j = 0 .. d: how many drafted steps accepted exactly j tokens."""
    check_one_identity(steps, "these steps")
    counts = np.bincount(steps["num_accepted"].to_numpy(dtype=np.int64), minlength=d + 1)
    return [int(c) for c in counts]


# Context-length bins for AL by position (acceptance decays over long contexts).
POSITION_EDGES = (0, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
# Generated-token index bins for AL by output position (acceptance moves as an answer goes on).
OUTPUT_POSITION_EDGES = (0, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
# What a step's row is keyed by in the requests frame: its operating point, request and turn.
TURN_KEY = ["batch_size", "request_id", "turn"]


def al_by_position(steps: pd.DataFrame) -> list[PositionBin]:
    """AL of the drafted steps whose context length at the step's start falls in each bin
    [from, to) of POSITION_EDGES (`to` None: open-ended); empty bins left out."""
    return _binned_al(steps["position"].to_numpy(), steps["num_accepted"].to_numpy(), POSITION_EDGES)


def al_by_output_position(steps: pd.DataFrame, requests: pd.DataFrame) -> list[PositionBin]:
    """AL of the drafted steps by how many tokens their turn had generated at the step's start, in
    the bins of OUTPUT_POSITION_EDGES; empty bins left out."""
    if steps.empty or not set(TURN_KEY) <= set(steps.columns) & set(requests.columns):
        return []  # records without their turns (a replay's): no generated-token index to bin by
    return _binned_al(output_positions(steps, requests), steps["num_accepted"].to_numpy(), OUTPUT_POSITION_EDGES)


def output_positions(steps: pd.DataFrame, requests: pd.DataFrame) -> np.ndarray:
    """Each drafted step's generated-token index at its start: its context length less its turn's prompt."""
    prompts = steps[TURN_KEY].merge(requests[TURN_KEY + ["prompt_tokens"]], on=TURN_KEY, how="left")
    if prompts["prompt_tokens"].isna().any():
        raise MeasurementError("a step record has no request row for its request and turn: the records disagree")
    return steps["position"].to_numpy() - prompts["prompt_tokens"].to_numpy(dtype=np.int64)


def _binned_al(positions: np.ndarray, accepted: np.ndarray, edges: Sequence[int]) -> list[PositionBin]:
    bounds = np.array(edges)
    bins = np.searchsorted(bounds, positions, side="right") - 1
    out = []
    for b in np.unique(bins):
        mask = bins == b
        upper = int(bounds[b + 1]) if b + 1 < len(bounds) else None
        out.append(PositionBin(int(bounds[b]), upper, int(mask.sum()), float(1.0 + accepted[mask].mean())))
    return out


def last_steps(steps: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """Each turn's last drafted step (TURN_KEY, num_accepted) and `kept`: the output tokens from its
    start on (more than num_accepted + 1 where undrafted steps came after it)."""
    last = steps.loc[steps.groupby(TURN_KEY, sort=False)["position"].idxmax()]
    rows = last[TURN_KEY + ["position", "num_accepted"]].merge(
        requests[TURN_KEY + ["prompt_tokens", "output_tokens"]], on=TURN_KEY, how="left"
    )
    rows["kept"] = rows["output_tokens"] - (rows["position"] - rows["prompt_tokens"])
    return rows[TURN_KEY + ["num_accepted", "kept"]]


def accepted_cut(steps: pd.DataFrame, requests: pd.DataFrame) -> pd.Series:
    """Per turn (TURN_KEY): accepted draft tokens its last drafted step verified but the output did
    not keep, cut by max_tokens or the end of sequence. vLLM's counters (and AL) count them."""
    if steps.empty:
        return pd.Series(dtype="int64")
    rows = last_steps(steps, requests)
    # the output keeps the step's accepted drafts first, then its bonus token
    cut = (rows["num_accepted"] - rows["kept"]).clip(lower=0, upper=rows["num_accepted"])
    return pd.Series(cut.to_numpy(dtype=np.int64), index=pd.MultiIndex.from_frame(rows[TURN_KEY]))


def al_emitted(steps: pd.DataFrame, requests: pd.DataFrame) -> float | None:
    """AL over the tokens the outputs kept: AL less the accepted tokens cut at the end (accepted_cut)."""
    if steps.empty:
        return None
    accepted = int(steps["num_accepted"].sum()) - int(accepted_cut(steps, requests).sum())
    return 1.0 + accepted / len(steps)


def group_summary(
    steps: pd.DataFrame, requests: pd.DataFrame, seed: int, counters: SpecCounters | None = None
) -> GroupFigures:
    """A group's figures; with `counters` (domain granularity: the group's counter deltas are its
    only acceptance record), AL from them and no interval."""
    if counters is not None:
        al = 1.0 + counters.num_accepted_tokens / counters.num_drafts if counters.num_drafts else None
        return GroupFigures(
            al=al,
            al_ci95=None,
            tokens_per_step=tokens_per_step(requests),
            n_requests=int(requests["request_id"].nunique()),
            n_steps=counters.num_drafts,
            draft_share=draft_share(requests),
        )
    totals = per_request(steps, requests)
    return GroupFigures(
        al=_al_of(totals),
        al_ci95=_ci95_of(totals, seed),
        tokens_per_step=tokens_per_step(requests),
        n_requests=int(requests["request_id"].nunique()),
        n_steps=int(totals["drafts"].sum()),
        al_per_request=al_spread(totals),
        al_by_output_position=al_by_output_position(steps, requests) or None,
        draft_share=draft_share(requests),
    )


def by_domain(
    steps: pd.DataFrame,
    requests: pd.DataFrame,
    seed: int,
    counters: dict[str, SpecCounters] | None = None,
    d: int | None = None,
    per_step: bool = True,
) -> dict[str, GroupFigures]:
    """Each domain's figures, with its segments' (`d`: for their per-position acceptance)."""
    out = {}
    for domain, group, domain_steps in split_by_domain(steps, requests):
        figures = group_summary(domain_steps, group, seed, counters[domain] if counters else None)
        out[domain] = replace(figures, by_segment=by_segment(domain_steps, group, seed, d, per_step))
    return out


def length_label(tokens: int) -> str:
    """A length bucket's name: 32000 -> '32k'; lengths that are not whole thousands stay as numbers."""
    return f"{tokens // 1000}k" if tokens % 1000 == 0 else str(tokens)


def split_by_length(steps: pd.DataFrame, requests: pd.DataFrame) -> list[tuple[int, pd.DataFrame, pd.DataFrame]]:
    """(input length, its requests, its steps) for every length bucket of `requests`, shortest
    first; [] where the records carry no lengths."""
    if "input_tokens" not in requests.columns or requests["input_tokens"].isna().all():
        return []
    steps_of = dict(tuple(steps.groupby("input_tokens", sort=False))) if "input_tokens" in steps.columns else {}
    empty = steps.iloc[0:0]
    return [
        (int(length), group, steps_of.get(length, empty))
        for length, group in requests.dropna(subset=["input_tokens"]).groupby("input_tokens", sort=True)
    ]


def length_figures(
    steps: pd.DataFrame, requests: pd.DataFrame, seed: int, length: int, d: int | None, per_step: bool = True
) -> GroupFigures:
    """One length bucket's figures: the group's, with per-position acceptance (step records) and the
    intervals of tokens per step and of each position's rate."""
    figures = replace(
        group_summary(steps, requests, seed),
        input_tokens=length,
        tokens_per_step_ci95=_ratio_ci95(requests, "output_tokens", "target_steps", seed),
    )
    if d and per_step and not steps.empty:
        figures = replace(
            figures,
            per_position_acceptance=per_position_acceptance(steps, d),
            per_position_ci95=_per_position_ci95(steps, d, seed),
        )
    return figures


def by_length(
    steps: pd.DataFrame, requests: pd.DataFrame, seed: int, d: int | None, per_step: bool = True
) -> dict[str, GroupFigures] | None:
    """Each length bucket's figures keyed by its label ('1k', '32k'); None where the records carry no lengths."""
    buckets = split_by_length(steps, requests)
    if not buckets:
        return None
    return {
        length_label(length): length_figures(group_steps, group, seed, length, d, per_step)
        for length, group, group_steps in buckets
    }


def _ratio_ci95(requests: pd.DataFrame, numerator: str, denominator: str, seed: int) -> list[float] | None:
    """95% bootstrap interval over requests (conversations) of a pooled ratio of two request columns."""
    if requests[denominator].isna().any():
        return None
    totals = requests.groupby("request_id", sort=True)[[numerator, denominator]].sum()
    if len(totals) < MIN_REQUESTS_FOR_CI:
        return None
    top, bottom = totals[numerator].to_numpy(dtype=float), totals[denominator].to_numpy(dtype=float)
    idx = resample_indices(seed, BOOTSTRAP_SAMPLES, len(totals))
    sums = bottom[idx].sum(axis=1)
    ratios = top[idx].sum(axis=1) / np.where(sums > 0, sums, np.nan)
    lo, hi = np.nanpercentile(ratios, [2.5, 97.5])
    return [float(lo), float(hi)]


def _per_position_ci95(steps: pd.DataFrame, d: int, seed: int) -> list[list[float]] | None:
    """Each position's 95% bootstrap interval over requests (steps accepting more than k / drafted steps)."""
    codes, ids = pd.factorize(steps["request_id"], sort=True)
    if len(ids) < MIN_REQUESTS_FOR_CI:
        return None
    accepted = steps["num_accepted"].to_numpy()
    drafts = np.bincount(codes, minlength=len(ids)).astype(float)
    idx = resample_indices(seed, BOOTSTRAP_SAMPLES, len(ids))
    resampled_drafts = drafts[idx].sum(axis=1)
    out = []
    for k in range(d):
        beyond = np.bincount(codes, weights=(accepted > k).astype(float), minlength=len(ids))
        lo, hi = np.percentile(beyond[idx].sum(axis=1) / resampled_drafts, [2.5, 97.5])
        out.append([float(lo), float(hi)])
    return out


def by_segment(
    steps: pd.DataFrame, requests: pd.DataFrame, seed: int, d: int | None, per_step: bool = True
) -> dict[str, SegmentFigures] | None:
    """Each segment's figures; None where the records hold no reasoning boundary. Without step
    records (`per_step` false: request or domain granularity) a segment's AL is unknown, its tokens are not."""
    if "thinking_tokens" not in requests.columns:
        return None
    per_step = per_step and "segment" in steps.columns
    total = int(requests["output_tokens"].sum())
    out = {}
    for segment in SEGMENTS:
        tokens = requests[f"{segment}_tokens"]
        passes = requests[f"{segment}_target_steps"]
        seg_steps = steps[steps["segment"] == segment] if per_step else steps.iloc[0:0]
        totals = per_request(seg_steps) if per_step else None
        known_passes = not passes.isna().any() and int(passes.sum()) > 0
        out[segment] = SegmentFigures(
            al=_al_of(totals) if per_step else None,
            al_ci95=_ci95_of(totals, seed) if per_step else None,
            tokens_per_step=float(tokens.sum() / passes.sum()) if known_passes else None,
            per_position_acceptance=per_position_acceptance(seg_steps, d) if per_step and d else None,
            n_requests=int(requests.loc[tokens > 0, "request_id"].nunique()),
            n_steps=int(len(seg_steps)),
            output_tokens=int(tokens.sum()),
            share_of_output_tokens=float(tokens.sum() / total) if total else None,
        )
    return out


def by_turn(steps: pd.DataFrame, requests: pd.DataFrame, seed: int) -> dict[str, GroupFigures] | None:
    """Each assistant-turn index of agent trajectories (`agent_turn`), keyed by it as text; None
    where the prompts are not cut points of trajectories."""
    if "agent_turn" not in requests.columns:
        return None
    steps_of = dict(tuple(steps.groupby("agent_turn", sort=False))) if "agent_turn" in steps.columns else {}
    return {
        str(int(turn)): group_summary(steps_of.get(turn, steps.iloc[0:0]), group, seed)
        for turn, group in requests.groupby("agent_turn", sort=True)
    }


def split_by_domain(steps: pd.DataFrame, requests: pd.DataFrame) -> list[tuple[str, pd.DataFrame, pd.DataFrame]]:
    """(domain, its requests, its steps) for every domain of `requests`, in name order."""
    steps_of = dict(tuple(steps.groupby("domain", sort=False)))
    empty = steps.iloc[0:0]
    return [(domain, group, steps_of.get(domain, empty)) for domain, group in requests.groupby("domain", sort=True)]


def counters_from_steps(steps: pd.DataFrame, d: int) -> SpecCounters:
    accepted = steps["num_accepted"].to_numpy()
    return SpecCounters(
        num_drafts=int(len(steps)),
        num_draft_tokens=int(steps["num_drafted"].sum()),
        num_accepted_tokens=int(accepted.sum()),
        num_accepted_tokens_per_pos=[int((accepted > k).sum()) for k in range(d)],
    )


def counters_from_histograms(histograms: Sequence[Sequence[int]]) -> SpecCounters:
    """Requests' accepted-draft histograms ([k]: steps accepting exactly k) pooled as counters: a
    step that accepted k accepted at positions 0 .. k-1."""
    pooled: list[int] = []
    for histogram in histograms:
        pooled += [0] * (len(histogram) - len(pooled))
        for k, n in enumerate(histogram):
            pooled[k] += int(n)
    per_pos = [sum(pooled[k + 1 :]) for k in range(max(len(pooled) - 1, 0))]
    return SpecCounters(sum(pooled), 0, sum(k * n for k, n in enumerate(pooled)), per_pos)


def per_position_from_counters(counters: SpecCounters, d: int) -> list[float] | None:
    """Per-position acceptance from counters (domain granularity), where they count per position."""
    per_pos = counters.num_accepted_tokens_per_pos
    if not counters.num_drafts or not per_pos:
        return None
    return [(per_pos[k] if k < len(per_pos) else 0) / counters.num_drafts for k in range(d)]


def check_counters(
    steps: pd.DataFrame,
    counters: SpecCounters,
    d: int,
    where: str = "",
    enforce: bool = True,
    requests: pd.DataFrame | None = None,
    counted: tuple[str, ...] = COUNTER_NAMES,
) -> None:
    """The records must sum to the engine's counters exactly, or the run is not trusted: every
    counter from per-step records; drafts and accepted tokens from per-request totals (request
    granularity, given as `requests` with no step records); of these, those the engine keeps
    (`counted`). Where other traffic may share the engine (`enforce` false), a difference is
    reported, not enforced."""
    if steps.empty and requests is not None and "drafted_steps" in requests.columns:
        totals = per_request(steps, requests)
        from_records = SpecCounters(int(totals["drafts"].sum()), 0, int(totals["accepted"].sum()))
        names = ("num_drafts", "num_accepted_tokens")
        kind = "per-request totals"
    else:
        from_records, names, kind = counters_from_steps(steps, d), COUNTER_NAMES, "per-step records"
    diffs = [
        f"{name}: records {getattr(from_records, name)} vs engine {getattr(counters, name)}"
        for name in names
        if name in counted and getattr(from_records, name) != getattr(counters, name)
    ]
    if not diffs:
        return
    problem = (
        f"{kind}{' at ' + where if where else ''} do not sum to the engine's speculative counters ("
        + "; ".join(diffs)
        + ")"
    )
    if not enforce:
        print(
            f"speclens: warning: {problem}; not enforced, as the engine is not exclusive to this run "
            "(runner.exclusive=false).",
            file=console(),
        )
        return
    raise MeasurementError(problem + ". The run's AL cannot be trusted; the records were kept for inspection.")
