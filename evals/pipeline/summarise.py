"""Building a run's RunSummary (speclens/figures/summary.py) from its passes and records."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Protocol, Sequence, TypeVar

import pandas as pd

from evals.pipeline.stamp import RunOrigin
from speclens.figures import costs, metrics
from speclens.figures.account import SpeedupAccount, speedup_account
from speclens.figures.costs import PassMode
from speclens.figures.latency import Latency, latency_of
from speclens.figures.peer_figures import peer_figures
from speclens.figures.summary import (
    ContextWindow,
    DomainPoint,
    Fingerprints,
    LengthPoint,
    LosslessCheck,
    Mismatch,
    Numerics,
    OperatingPoint,
    ReasoningSplit,
    RunSummary,
    Timing,
)
from speclens.file_formats.summary_file import SUMMARY_VERSION
from speclens.generation import EngineStep, RecordGranularity, SpecCounters, TurnResult
from speclens.lossless import (
    DIVERGENCE,
    FOLLOWS_EARLIER_TURN,
    NEAR_TIE,
    UNEXPLAINED,
    classify,
    first_divergence,
    near_tie_bound,
)

# Mismatched outputs listed by name in summary.json (the count is always complete).
MISMATCHES_SHOWN = 20


class MeasuredPass(Protocol):
    """What the summary needs of a pass (evals.pipeline.passes.Pass): its batch size, results and throughput."""

    batch_size: int
    elapsed_s: float
    results: list[TurnResult]
    # Its engine steps, each with the length bucket it ran (EngineStep.input_tokens).
    engine_steps: list[EngineStep]
    warmup_s: float
    # Domain granularity: each domain's counter deltas, the domain's only acceptance record.
    domain_counters: dict[str, SpecCounters] | None
    record_granularity: RecordGranularity

    @property
    def output_tokens(self) -> int: ...

    @property
    def output_tokens_per_s(self) -> float: ...

    @property
    def generate_s(self) -> float: ...


def mismatched_turns(spec: Sequence[TurnResult], base: Sequence[TurnResult]) -> list[tuple[TurnResult, TurnResult]]:
    """(speculative, plain) results of each turn whose outputs differ."""
    base_by_key = {(r.request_id, r.turn): r for r in base}
    return [
        (r, base_by_key[(r.request_id, r.turn)])
        for r in spec
        if (r.request_id, r.turn) in base_by_key
        and base_by_key[(r.request_id, r.turn)].output_token_ids != r.output_token_ids
    ]


def lossless(
    spec: Sequence[TurnResult],
    base: Sequence[TurnResult],
    greedy: bool,
    batch_size: int = 0,
    margins: Mapping[tuple[str, int, int], float | None] | None = None,
    dtype: str | None = None,
) -> LosslessCheck:
    """Greedy speculative output must equal plain decoding token for token; each mismatch is
    explained by plain decoding's top-2 margin where it first differs (`margins`, keyed by request
    id, turn and batch size): a near-tie for `dtype`, or a divergence."""
    pairs = mismatched_turns(spec, base)
    explained = []
    for s, b in pairs:
        margin = (margins or {}).get((s.request_id, s.turn, batch_size))
        kind = (
            FOLLOWS_EARLIER_TURN if s.prompt_token_ids != b.prompt_token_ids else classify(margin, dtype or "float32")
        )
        explained.append(
            Mismatch(
                s.request_id, s.turn, batch_size, first_divergence(s.output_token_ids, b.output_token_ids), margin, kind
            )
        )
    near_ties = sum(m.classification == NEAR_TIE for m in explained)
    divergences = sum(m.classification in (DIVERGENCE, UNEXPLAINED) for m in explained)
    return LosslessCheck(
        checked=greedy,
        identical=(not pairs) if greedy else None,
        n_compared=len(spec),
        n_identical=len(spec) - len(pairs),
        mismatched=[f"{s.request_id}#{s.turn}" for s, _ in pairs][:MISMATCHES_SHOWN],
        mismatches=explained[:MISMATCHES_SHOWN] if greedy else [],
        n_near_ties=near_ties if greedy else 0,
        n_divergences=divergences if greedy else 0,
        dtype=dtype,
        near_tie_bound=near_tie_bound(dtype) if dtype else None,
    )


def merge_lossless(checks: Sequence[LosslessCheck]) -> LosslessCheck:
    """One lossless verdict over all operating points."""
    checked = all(c.checked for c in checks)
    return LosslessCheck(
        checked=checked,
        identical=all(c.identical for c in checks) if checked else None,
        n_compared=sum(c.n_compared for c in checks),
        n_identical=sum(c.n_identical for c in checks),
        mismatched=[m for c in checks for m in c.mismatched][:MISMATCHES_SHOWN],
        mismatches=[m for c in checks for m in c.mismatches][:MISMATCHES_SHOWN],
        n_near_ties=sum(c.n_near_ties for c in checks),
        n_divergences=sum(c.n_divergences for c in checks),
        dtype=checks[0].dtype if checks else None,
        near_tie_bound=checks[0].near_tie_bound if checks else None,
    )


def _domain_point(
    steps: pd.DataFrame,
    requests: pd.DataFrame,
    seed: int,
    point_costs: costs.PointCosts,
    counters: SpecCounters | None = None,
) -> DomainPoint:
    figures = metrics.group_summary(steps, requests, seed, counters)
    predicted, predicted_range = costs.predicted_speedup(
        figures.tokens_per_step, point_costs.t_verif, point_costs.t_step
    )
    return DomainPoint(**vars(figures), predicted_speedup=predicted, predicted_speedup_range=predicted_range)


def _length_point(
    length: int,
    steps: pd.DataFrame,
    requests: pd.DataFrame,
    engine_steps: pd.DataFrame,
    spec: MeasuredPass,
    base: MeasuredPass | None,
    b: int,
    d: int | None,
    seed: int,
    per_step: bool,
) -> LengthPoint:
    """One length bucket at batch size `b`: its acceptance, and its own steps' costs, throughput and
    (with a baseline) speedup: the pass ran this length's prompts on their own."""
    at_length = (
        engine_steps[engine_steps["input_tokens"] == length] if "input_tokens" in engine_steps.columns else engine_steps
    )
    point_costs = costs.operating_point_costs(at_length, b, d)
    figures = metrics.length_figures(steps, requests, seed, length, d, per_step)
    predicted, predicted_range = costs.predicted_speedup(
        figures.tokens_per_step, point_costs.t_verif, point_costs.t_step
    )
    ids = set(requests["request_id"])
    spec_rate = _length_rate(spec, ids, length)
    base_rate = _length_rate(base, ids, length) if base is not None else None
    held = costs.held(engine_steps, PassMode.speculative if d else PassMode.plain, b, length)
    return LengthPoint(
        **vars(figures),
        batch_size_held=held if held is not None and held != b else None,
        predicted_speedup=predicted,
        predicted_speedup_range=predicted_range,
        output_tokens_per_s=spec_rate,
        baseline_output_tokens_per_s=base_rate,
        speedup=spec_rate / base_rate if spec_rate and base_rate else None,
        **vars(point_costs),
    )


def _length_rate(p: MeasuredPass, request_ids: set[str], length: int) -> float | None:
    """Output tokens/s of one length's requests in a pass, over that length's engine steps (the pass
    ran it on its own); None where the engine shows no steps (a server)."""
    seconds = sum(s.wall_s for s in p.engine_steps if s.input_tokens == length)
    tokens = sum(len(r.output_token_ids) for r in p.results if r.request_id in request_ids)
    return tokens / seconds if seconds > 0 else None


P = TypeVar("P", bound=DomainPoint)


def _corrected(point: P, account: SpeedupAccount | None) -> P:
    """The domain's point with its prediction times the corrections its operating point measured."""
    if account is None or point.predicted_speedup is None:
        return point
    return replace(
        point,
        predicted_corrected=point.predicted_speedup * account.correction,
        predicted_corrected_range=[v * account.correction for v in point.predicted_speedup_range],
    )


def operating_points(
    passes: Sequence[MeasuredPass],
    baseline: Sequence[MeasuredPass],
    steps: pd.DataFrame,
    requests: pd.DataFrame,
    engine_steps: pd.DataFrame,
    d: int | None,
    seed: int,
    lossless_checks: Mapping[int, LosslessCheck],
    request_rate: float | None = None,
    spreads: Mapping[int, list[float]] | None = None,
    k0_tax_note: str | None = None,
) -> list[OperatingPoint]:
    """Per batch size: acceptance, throughput, the cost decomposition and both speedups;
    `lossless_checks` holds each batch size's comparison with plain decoding, if it ran;
    `k0_tax_note`: why no idle pass ran beside the baseline (a server, Model Runner V2), if so."""
    base_by_size = {p.batch_size: p for p in baseline}
    steps_by_size = dict(tuple(steps.groupby("batch_size", sort=False)))
    requests_by_size = dict(tuple(requests.groupby("batch_size", sort=False)))
    records = _RunRecords(engine_steps, d, seed, request_rate)
    points = []
    for p in passes:
        b = p.batch_size
        at_b = _AtBatchSize(p, base_by_size.get(b), steps_by_size.get(b, steps.iloc[0:0]), requests_by_size[b])
        points.append(_operating_point(at_b, records, lossless_checks.get(b), (spreads or {}).get(b), k0_tax_note))
    return points


@dataclass(frozen=True)
class _RunRecords:
    """What every operating point of a run is computed from beside its own pass."""

    engine_steps: pd.DataFrame
    d: int | None
    seed: int
    request_rate: float | None


@dataclass(frozen=True)
class _AtBatchSize:
    """One batch size's speculative pass, its plain-decoding baseline (if it ran) and records."""

    measured: MeasuredPass
    base: MeasuredPass | None
    steps: pd.DataFrame
    requests: pd.DataFrame

    @property
    def speedup(self) -> float | None:
        """Measured: output tokens/s against plain decoding's at the same batch size."""
        if self.base is None or self.base.output_tokens_per_s <= 0:
            return None
        return self.measured.output_tokens_per_s / self.base.output_tokens_per_s


def _operating_point(
    at_b: _AtBatchSize,
    records: _RunRecords,
    lossless: LosslessCheck | None,
    spread: list[float] | None,
    k0_tax_note: str | None,
) -> OperatingPoint:
    """One batch size's point: its figures over all prompts, per domain and per length, its costs,
    and the account of its measured speedup against the predicted one."""
    p, base, b, d = at_b.measured, at_b.base, at_b.measured.batch_size, records.d
    point_costs = costs.operating_point_costs(records.engine_steps, b, d)
    domain_counters = p.domain_counters or {}
    pooled = sum(domain_counters.values(), SpecCounters()) if p.domain_counters else None
    overall = _domain_point(at_b.steps, at_b.requests, records.seed, point_costs, pooled)
    latency = latency_of(p.results, p.generate_s)
    account = None if base is None else _account(at_b, base, records, overall, point_costs)
    by_domain = {
        domain: _domain_point(domain_steps, group, records.seed, point_costs, domain_counters.get(domain))
        for domain, group, domain_steps in metrics.split_by_domain(at_b.steps, at_b.requests)
    }
    overall = _corrected(overall, account)
    by_domain = {domain: _corrected(point, account) for domain, point in by_domain.items()}
    held = costs.held(records.engine_steps, PassMode.speculative if d else PassMode.plain, b)
    return OperatingPoint(
        **vars(overall),
        batch_size=b,
        batch_size_held=held if held is not None and held != b else None,
        request_rate=records.request_rate,
        output_tokens_per_s=p.output_tokens_per_s,
        generate_s=p.generate_s,
        elapsed_s=p.elapsed_s,
        baseline_output_tokens_per_s=base.output_tokens_per_s if base else None,
        speedup=at_b.speedup,
        speedup_range=_range(spread),
        speedup_repeats=spread if spread is not None and len(spread) > 1 else None,
        latency_speedup=_tpot_ratio(latency_of(base.results, base.generate_s) if base else None, latency),
        speedup_gap=costs.speedup_gap(overall.predicted_speedup, at_b.speedup),
        gap_above_tolerance=costs.gap_above_tolerance(overall.predicted_speedup, at_b.speedup),
        **vars(point_costs),
        lossless=lossless,
        by_domain=by_domain,
        latency=latency,
        speedup_account=account,
        by_length=_by_length(at_b, records) or None,
        k0_tax_note=_k0_tax_note(point_costs, base is not None and d is not None, k0_tax_note),
    )


def _account(
    at_b: _AtBatchSize, base: MeasuredPass, records: _RunRecords, overall: DomainPoint, point_costs: costs.PointCosts
) -> SpeedupAccount:
    """Where the measured speedup parts from the predicted one, at a batch size with a baseline."""
    p = at_b.measured
    return speedup_account(
        records.engine_steps,
        p.batch_size,
        overall.predicted_speedup,
        overall.tokens_per_step,
        at_b.speedup,
        (p.output_tokens, base.output_tokens),
        (p.elapsed_s, base.elapsed_s),
        point_costs,
    )


def _by_length(at_b: _AtBatchSize, records: _RunRecords) -> dict[str, LengthPoint]:
    """The point's figures per length bucket, where the prompts state their lengths."""
    p, b = at_b.measured, at_b.measured.batch_size
    per_step = p.record_granularity == RecordGranularity.step
    return {
        metrics.length_label(length): _length_point(
            length, length_steps, group, records.engine_steps, p, at_b.base, b, records.d, records.seed, per_step
        )
        for length, group, length_steps in metrics.split_by_length(at_b.steps, at_b.requests)
    }


def _k0_tax_note(point_costs: costs.PointCosts, baseline: bool, why: str | None) -> str | None:
    """Why a point measured with a baseline has no K=0 tax (None where it has one, or no baseline)."""
    if not baseline or point_costs.k0_tax is not None:
        return None
    if why is not None:
        return why
    return f"fewer than {costs.MIN_STEADY_STEPS} steady steps in the idle or plain pass at this B"


def _range(speedups: list[float] | None) -> list[float] | None:
    """[min, max] of the repeats' speedups; None for a single measurement (no spread to show)."""
    return [min(speedups), max(speedups)] if speedups and len(speedups) > 1 else None


def _tpot_ratio(base: Latency | None, spec: Latency) -> float | None:
    """Plain decoding's median time per output token over the speculative one's, at the same B."""
    if base is None or base.tpot_ms is None or spec.tpot_ms is None or spec.tpot_ms.p50 <= 0:
        return None
    return base.tpot_ms.p50 / spec.tpot_ms.p50


def pooled_timing(
    load_s: float, passes: Sequence[MeasuredPass], baseline: Sequence[MeasuredPass]
) -> tuple[Timing, float | None]:
    """Generation time and throughput over all batch sizes together, and their speedup (per batch
    size: operating_points)."""

    def pooled(group: Sequence[MeasuredPass]) -> tuple[float, float]:
        seconds = sum(p.generate_s for p in group)
        tokens = sum(p.output_tokens_per_s * p.generate_s for p in group)
        return seconds, tokens / seconds if seconds > 0 else 0.0

    generate_s, tokens_per_s = pooled(passes)
    base_s, base_tokens_per_s = pooled(baseline) if baseline else (None, None)
    timing = Timing(
        generate_s=generate_s,
        output_tokens_per_s=tokens_per_s,
        load_s=load_s,
        baseline_generate_s=base_s,
        baseline_output_tokens_per_s=base_tokens_per_s,
        warmup_s=sum(p.warmup_s for p in [*passes, *baseline]),
    )
    speedup = tokens_per_s / base_tokens_per_s if base_tokens_per_s else None
    return timing, speedup


def per_position_of(
    steps: pd.DataFrame,
    d: int | None,
    record_granularity: RecordGranularity,
    counters: SpecCounters | None,
    request_histograms: list[tuple[int, ...]] | None,
) -> list[float] | None:
    """The run's per-position acceptance from the finest record it has: its steps, the engine's
    per-position counters, or each request's accepted-draft histogram (None without any of them:
    per-request totals alone do not say how far into each draft acceptance went)."""
    if not d:
        return None
    if record_granularity == RecordGranularity.step:
        return metrics.per_position_acceptance(steps, d)
    if record_granularity == RecordGranularity.domain and counters is not None:
        return metrics.per_position_from_counters(counters, d)
    if request_histograms:
        return metrics.per_position_from_counters(metrics.counters_from_histograms(request_histograms), d)
    return None


def build_summary(
    *,
    drafter: str,
    d: int | None,
    target: str,
    dataset: str,
    runner: str,
    steps: pd.DataFrame,
    requests: pd.DataFrame,
    counters: SpecCounters | None,
    seed: int,
    timing: Timing,
    record_granularity: RecordGranularity = RecordGranularity.step,
    domain_counters: dict[str, SpecCounters] | None = None,
    schedule: list[list[int]] | None = None,
    origin: RunOrigin,
    lossless_check: LosslessCheck | None = None,
    speedup: float | None = None,
    operating_points: list[OperatingPoint] | None = None,
    numerics: Numerics | None = None,
    reasoning: ReasoningSplit | None = None,
    request_histograms: list[tuple[int, ...]] | None = None,
    context_window: ContextWindow | None = None,
) -> RunSummary:
    """The run's summary.json. `request_histograms`: at request granularity, each request's
    accepted-draft histogram where the engine gave one for every request (per-position acceptance
    follows from them)."""
    pooled = counters if domain_counters is not None else None
    overall = metrics.group_summary(steps, requests, seed, pooled)
    per_position = per_position_of(steps, d, record_granularity, counters, request_histograms)
    per_step = record_granularity == RecordGranularity.step
    return RunSummary(
        schema_version=SUMMARY_VERSION,
        drafter=drafter,
        d=d,
        target=target,
        dataset=dataset,
        n_requests=overall.n_requests,
        al=overall.al,
        al_ci95=overall.al_ci95,
        al_request_weighted=None if pooled else metrics.request_weighted_al(steps, requests),
        al_per_request=overall.al_per_request,
        tokens_per_step=overall.tokens_per_step,
        per_position_acceptance=per_position,
        conditional_acceptance=metrics.conditional_acceptance(per_position) if per_position else None,
        acceptance_histogram=metrics.acceptance_histogram(steps, d) if d and per_step else None,
        al_by_position=metrics.al_by_position(steps),
        n_steps=overall.n_steps,
        by_domain=metrics.by_domain(steps, requests, seed, domain_counters, d, per_step),
        vllm_counters=counters,
        lossless=lossless_check,
        speedup=speedup,
        operating_points=operating_points or [],
        timing=timing,
        versions=origin.versions,
        fingerprints=Fingerprints(**origin.fingerprints),
        git_sha=origin.git_sha,
        config_fingerprint=origin.config_fingerprint,
        runner=runner,
        record_granularity=str(record_granularity.value),
        schedule=schedule,
        numerics=numerics,
        by_segment=metrics.by_segment(steps, requests, seed, d, per_step),
        by_turn=metrics.by_turn(steps, requests, seed) if pooled is None else None,
        reasoning=reasoning,
        al_by_output_position=overall.al_by_output_position,
        al_emitted=metrics.al_emitted(steps, requests) if per_step and d else None,
        accepted_tokens_cut=int(metrics.accepted_cut(steps, requests).sum()) if per_step and d else None,
        peer_figures=peer_figures(steps, requests) if pooled is None and d else None,
        by_length=metrics.by_length(steps, requests, seed, d, per_step),
        context_window=context_window,
        draft_share=overall.draft_share,
    )
