"""Views over a ladder's records (load.json, load_requests.parquet): the crossover rows, the load
policy they give (serve.json's `load_policy`), the schedule arm held against the static ones, and
the text printed at the end of `python -m evals.load`, decision first."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

from reports.table import text_table
from speclens.figures.load_ladder import crossover
from speclens.file_formats.load_file import CrossoverRow, LoadPolicy, LoadStage
from speclens.provenance import Provenance

ALL_DOMAINS = "all"
# The schedule arm is worse than a static one "beyond the noise" where the gap in output tokens/s
# exceeds this many standard errors of the difference (per-request contributions).
NOISE_SIGMAS = 2.0
# A domain gets crossover rows of its own only where each arm's stage at every rung holds at least
# this many of its requests (fewer, and its resamples are one or two requests').
MIN_DOMAIN_REQUESTS = 3


def arm_label(kind: str, drafter: str, d: int | None) -> str:
    """How an arm is named wherever it is shown: plain decoding, `<drafter> d=<D>`, or that with (schedule)."""
    if kind == "plain":
        return "plain decoding"
    return f"{drafter} d={d}" + (" (schedule)" if kind == "schedule" else "")


def _samples(rows: pd.DataFrame) -> tuple[list[float], list[float]]:
    """Per-request samples of a stage set: output tokens/s contributions (tokens x requests / the
    stage's seconds: their mean is the stage's output tokens/s, over its domain's requests) and TPOT in ms."""
    throughput = (rows["output_tokens"] * rows["stage_requests"] / rows["stage_seconds"]).astype(float).tolist()
    tpot = (rows["tpot_s"].dropna().astype(float) * 1000.0).tolist()
    return throughput, tpot


def crossover_rows(
    stages: Sequence[LoadStage], requests: pd.DataFrame, rates: Sequence[float], seed: int
) -> list[CrossoverRow]:
    """Per drafter, D and domain (`all`, and each domain where the prompts span several and each
    stage holds MIN_DOMAIN_REQUESTS of its requests), where the drafter's output tokens/s and TPOT
    advantages over plain decoding vanish along the ladder."""
    rows: list[CrossoverRow] = []
    plain = requests[requests["arm"] == "plain"]
    domains = sorted(requests["domain"].unique())
    scopes = [ALL_DOMAINS, *(domains if len(domains) > 1 else [])]
    static = sorted({(s.drafter, s.d) for s in stages if s.arm == "static"}, key=lambda pair: pair[1] or 0)
    for drafter, d in static:
        arm = requests[(requests["arm"] == "static") & (requests["drafter"] == drafter) & (requests["d"] == d)]
        provenance = next(s.provenance for s in stages if s.arm == "static" and s.drafter == drafter and s.d == d)
        for domain in scopes:
            row = _crossover_row(arm, plain, rates, drafter, d, domain, provenance, seed)
            if row is not None:
                rows.append(row)
    return rows


def _crossover_row(
    arm: pd.DataFrame,
    plain: pd.DataFrame,
    rates: Sequence[float],
    drafter: str,
    d: int,
    domain: str,
    provenance: Provenance,
    seed: int,
) -> CrossoverRow | None:
    mine = arm if domain == ALL_DOMAINS else arm[arm["domain"] == domain]
    theirs = plain if domain == ALL_DOMAINS else plain[plain["domain"] == domain]
    spec_tput, spec_tpot, plain_tput, plain_tpot = [], [], [], []
    for rate in rates:
        a, b = _samples(mine[mine["request_rate"] == rate]), _samples(theirs[theirs["request_rate"] == rate])
        least = 1 if domain == ALL_DOMAINS else MIN_DOMAIN_REQUESTS
        if min(len(a[0]), len(b[0])) < least or not (a[1] and b[1]):
            return None  # too few of this domain's requests at a rung: no crossover over it
        spec_tput.append(a[0]), spec_tpot.append(a[1]), plain_tput.append(b[0]), plain_tpot.append(b[1])
    tput = crossover(rates, spec_tput, plain_tput, higher_is_better=True, seed=seed)
    tpot = crossover(rates, spec_tpot, plain_tpot, higher_is_better=False, seed=seed + 1)
    return CrossoverRow(
        drafter=drafter,
        d=d,
        domain=domain,
        throughput_rate=tput.rate,
        throughput_interval=list(tput.interval) if tput.interval else None,
        tpot_rate=tpot.rate,
        tpot_interval=list(tpot.interval) if tpot.interval else None,
        below_ladder=tput.below_ladder or tpot.below_ladder,
        reached=tput.reached or tpot.reached,
        throughput_lead_at_top=tput.advantage_at_top,
        tpot_lead_at_top_ms=tpot.advantage_at_top,
        provenance=provenance,
    )


def switch_rate(row: CrossoverRow) -> tuple[float | None, str | None, list[float] | None]:
    """Where speculation stops paying on one crossover row: the lower of its two crossovers (the
    first advantage to vanish), which one, and its interval; (None, None, None) where neither is reached."""
    found = [
        (rate, name, interval)
        for rate, name, interval in (
            (row.throughput_rate, "throughput", row.throughput_interval),
            (row.tpot_rate, "tpot", row.tpot_interval),
        )
        if rate is not None
    ]
    if not found:
        return None, None, None
    return min(found, key=lambda item: item[0])


def mean_in_flight(stages: Sequence[LoadStage], drafter: str, d: int, kind: str = "static") -> list[list[float]]:
    """[rate, mean requests in flight] of one arm at each rung (repeats averaged)."""
    held: dict[float, list[float]] = defaultdict(list)
    for s in stages:
        if s.arm == kind and s.drafter == drafter and s.d == d:
            held[s.request_rate].append(s.mean_in_flight)
    return [[rate, float(np.mean(values))] for rate, values in sorted(held.items())]


def in_flight_at(points: list[list[float]], rate: float) -> float:
    """The requests in flight at `rate`, linear between the rungs around it (held flat outside)."""
    rates, held = [p[0] for p in points], [p[1] for p in points]
    return float(np.interp(rate, rates, held))


def policy_schedule(d: int, switch_at: int | None, below_ladder: bool, max_num_seqs: int) -> list[list[int]]:
    """vLLM's num_speculative_tokens_per_batch_size for the policy: k = d up to `switch_at` requests
    in flight, 0 above (every batch size one way where the crossover was not reached or is below the ladder)."""
    if below_ladder:
        return [[1, max_num_seqs, 0]]
    if switch_at is None or switch_at >= max_num_seqs:
        return [[1, max_num_seqs, d]]
    return [[1, switch_at, d], [switch_at + 1, max_num_seqs, 0]]


def load_policy(
    rows: Sequence[CrossoverRow],
    stages: Sequence[LoadStage],
    specs: dict[int, dict[str, Any] | None],
    max_num_seqs: int,
    arrivals: str,
) -> LoadPolicy | None:
    """The policy from the whole-workload crossovers: the D that pays up to the highest rate (one
    never overtaken first; ties to the larger lead at the top rate), speculating below its switch
    rate and off above; None without a drafter's arm."""
    overall = [r for r in rows if r.domain == ALL_DOMAINS]
    if not overall:
        return None

    def reach(row: CrossoverRow) -> tuple[float, float]:
        rate, _, _ = switch_rate(row)
        return (math.inf if rate is None else (0.0 if row.below_ladder else rate), row.throughput_lead_at_top)

    best = max(overall, key=reach)
    rate, decided_by, interval = switch_rate(best)
    points = mean_in_flight(stages, best.drafter, best.d)
    switch_at = None
    if rate is not None and not best.below_ladder:
        switch_at = max(1, int(round(in_flight_at(points, rate))))
    schedule = policy_schedule(best.d, switch_at, best.below_ladder, max_num_seqs)
    spec = specs.get(best.d)
    return LoadPolicy(
        drafter=best.drafter,
        d=best.d,
        speculate_below_rate=(0.0 if best.below_ladder else rate),
        interval=interval,
        decided_by=decided_by,
        reached=best.reached,
        below_ladder=best.below_ladder,
        in_flight_at_rate=points,
        switch_at_in_flight=switch_at,
        num_speculative_tokens_per_batch_size=schedule,
        speculative_config=None if spec is None else spec | {"num_speculative_tokens_per_batch_size": schedule},
        arrivals=arrivals,
        provenance=best.provenance,
    )


def policy_sentence(policy: LoadPolicy) -> str:
    what = f"{policy.drafter} d={policy.d}"
    schedule = f"num_speculative_tokens_per_batch_size={policy.num_speculative_tokens_per_batch_size}"
    source = f"{policy.provenance.source}, {policy.arrivals} arrivals"
    if policy.below_ladder:
        return (
            f"load policy ({source}): serve plain decoding; {what} did not pay even at the lowest rate measured "
            f"({schedule})."
        )
    if policy.speculate_below_rate is None:
        return f"load policy ({source}): speculate with {what} at every rate measured; it paid up to the top rate ({schedule})."
    interval = f" (95 % {policy.interval[0]:.2f}-{policy.interval[1]:.2f})" if policy.interval else ""
    why = (
        "plain decoding's output tokens/s overtakes it"
        if policy.decided_by == "throughput"
        else "its TPOT advantage vanishes"
    )
    return (
        f"load policy ({source}): speculate with {what} below {policy.speculate_below_rate:.2f} req/s{interval}, "
        f"plain decoding above ({why} there, at about {policy.switch_at_in_flight} in flight); {schedule}."
    )


@dataclass(frozen=True)
class ScheduleGap:
    """Where the schedule arm falls short of the better static arm at one rate beyond the noise."""

    rate: float
    better: str
    shortfall: float  # share of the better arm's output tokens/s
    in_flight: float


def schedule_gaps(requests: pd.DataFrame, stages: Sequence[LoadStage]) -> list[ScheduleGap]:
    """Per rate, the schedule arm against the better of plain decoding and its static D in output
    tokens/s: a gap beyond NOISE_SIGMAS standard errors of the difference is reported."""
    sched = [s for s in stages if s.arm == "schedule"]
    if not sched:
        return []
    d = sched[0].d
    gaps = []
    for rate in sorted({s.request_rate for s in sched}):
        at = requests[requests["request_rate"] == rate]
        arms = {
            "schedule": at[at["arm"] == "schedule"],
            "plain decoding": at[at["arm"] == "plain"],
            f"{sched[0].drafter} d={d}": at[(at["arm"] == "static") & (at["d"] == d)],
        }
        samples = {name: np.asarray(_samples(rows)[0]) for name, rows in arms.items() if len(rows)}
        if "schedule" not in samples or len(samples) < 2:
            continue
        better = max((n for n in samples if n != "schedule"), key=lambda n: samples[n].mean())
        a, b = samples["schedule"], samples[better]
        se = math.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b)) if len(a) > 1 and len(b) > 1 else 0.0
        if b.mean() - a.mean() > NOISE_SIGMAS * se and b.mean() > 0:
            held = float(np.mean([s.mean_in_flight for s in sched if s.request_rate == rate]))
            gaps.append(ScheduleGap(rate, better, float((b.mean() - a.mean()) / b.mean()), held))
    return gaps


def gap_sentence(gap: ScheduleGap, policy: LoadPolicy | None) -> str:
    switch = (
        ""
        if policy is None or policy.switch_at_in_flight is None
        else (f"; its schedule switches at {policy.switch_at_in_flight} in flight")
    )
    return (
        f"schedule arm at {gap.rate:g} req/s: {gap.shortfall:.0%} fewer output tokens/s than {gap.better} "
        f"(beyond {NOISE_SIGMAS:g} standard errors); it held {gap.in_flight:.1f} requests in flight on average, "
        f"and vLLM keys the draft length on the batch of each step, not the mean{switch}."
    )


def crossover_line(row: CrossoverRow) -> str:
    def one(rate: float | None, interval: list[float] | None, lead: float, unit: str) -> str:
        if rate is None:
            return f"not reached (lead at the top rate {lead:+.1f} {unit})"
        bound = "<= " if row.below_ladder else ""
        spread = f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else ""
        return f"{bound}{rate:.2f} req/s{spread}"

    return (
        f"  {row.drafter} d={row.d} [{row.domain}]: throughput crossover "
        f"{one(row.throughput_rate, row.throughput_interval, row.throughput_lead_at_top, 'tok/s')}; TPOT crossover "
        f"{one(row.tpot_rate, row.tpot_interval, row.tpot_lead_at_top_ms, 'ms')}"
    )


def stage_cells(s: LoadStage) -> list[str]:
    """One stage's figures as a table shows them: achieved rate, tok/s, TPOT and TTFT p50, in flight, AL, saturated."""
    return [
        f"{s.achieved_rate:.2f}",
        f"{s.output_tokens_per_s:.1f}",
        "-" if s.tpot_ms is None else f"{s.tpot_ms.p50:.1f}",
        f"{s.ttft_ms.p50:.0f}",
        f"{s.mean_in_flight:.1f}",
        "-" if s.al is None else f"{s.al:.2f}",
        "yes" if s.saturated else "",
    ]


STAGE_HEADER = ["achieved", "tok/s", "TPOT p50 ms", "TTFT p50 ms", "in flight", "AL", "saturated"]


def stage_table(stages: Sequence[LoadStage]) -> list[str]:
    rows = [
        [
            f"{s.request_rate:g}",
            arm_label(s.arm, s.drafter, s.d),
            *stage_cells(s),
        ]
        for s in sorted(stages, key=lambda s: (s.request_rate, s.repeat, s.arm != "plain", s.arm, s.d or 0))
    ]
    return text_table(["req/s", "arm", *STAGE_HEADER], rows).splitlines()


def ladder_text(
    stages: Sequence[LoadStage], rows: Sequence[CrossoverRow], policy: LoadPolicy | None, gaps: Sequence[ScheduleGap]
) -> str:
    lines = []
    if policy is not None:
        lines.append(policy_sentence(policy))
    if rows:
        lines.append("crossovers (rate where the drafter's lead over plain decoding vanishes, 95 % interval):")
        lines += [crossover_line(r) for r in rows]
    lines += [gap_sentence(g, policy) for g in gaps]
    source = stages[0].provenance.source if stages else "unknown"
    lines.append(f"stages ({source}, {stages[0].arrivals if stages else ''} arrivals):")
    lines += stage_table(stages)
    return "\n".join(lines)


def predicted_ladder_lines(result: dict[str, Any]) -> list[str]:
    """A predicted ladder (whatif.json's `ladder` and `crossover`), crossover first."""
    setting = result["ladder_setting"]
    gpu = result["gpu"]["name"]
    lines = [
        f"predicted ladder on {gpu} x{result['tp']} ({setting['input_tokens']} input, {setting['output_tokens']} "
        f"output tokens, {setting['arrivals']} arrivals; simulated continuous batching; ranges: {setting['range']}):"
    ]
    for row in result["crossover"]:
        parts = []
        for key, name in (
            ("throughput_rate", "plain decoding's output tokens/s overtakes it"),
            ("tpot_rate", "its TPOT advantage vanishes"),
        ):
            rate, spread = row[key], row.get(f"{key}_range")
            where = "not reached" if rate is None else f"{'<= ' if row['below_ladder'] else ''}{rate:.2f} req/s"
            if spread:
                where += f" (range {spread[0]:.2f}-{spread[1]:.2f})"
            parts.append(f"{name}: {where}")
        lines.append(f"  {row['drafter']} d={row['d']}: " + "; ".join(parts))
        if row.get("range_note"):
            lines.append(f"    ({row['range_note']})")
    header = ["req/s", "arm", "achieved", "tok/s", "tok/s range", "TPOT p50 ms", "in flight", "saturated"]
    rows = [
        [
            f"{s['request_rate']:g}",
            "plain" if s["arm"] == "plain" else f"{s['drafter']} d={s['d']}",
            f"{s['achieved_rate']:.2f}",
            f"{s['output_tokens_per_s']:.0f}",
            f"{s['output_tokens_per_s_range'][0]:.0f}-{s['output_tokens_per_s_range'][1]:.0f}",
            "-" if s["tpot_ms"] is None else f"{s['tpot_ms']['p50']:.2f}",
            f"{s['mean_in_flight']:.1f}",
            "yes" if s["saturated"] else "",
        ]
        for s in sorted(result["ladder"], key=lambda s: (s["request_rate"], s["arm"] != "plain", s["d"] or 0))
    ]
    return lines + text_table(header, rows).splitlines()
