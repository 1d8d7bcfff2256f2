"""What a vLLM server reports, turned into speclens's records: its Prometheus `/metrics` counters
(summed over every `engine=` series, i.e. data-parallel ranks) and one request's streamed chunks
plus its per-request speculative metrics (`--per-request-spec-decode-metrics detailed`)."""

from __future__ import annotations

import re
from typing import Iterator, Sequence

from speclens.generation import DraftedStep, SpecCounters

COUNTER_PREFIX = "vllm:spec_decode_"
_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][\w:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def prometheus_samples(text: str) -> Iterator[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample line of a Prometheus text page."""
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match:
            yield match["name"], dict(_LABEL.findall(match["labels"] or "")), float(match["value"])


def parse_counters(text: str) -> SpecCounters:
    """vLLM's speculative counters from a `/metrics` page, summed over its engine series."""
    totals = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0}
    per_pos: dict[int, int] = {}
    for full_name, labels, value in prometheus_samples(text):
        if not full_name.startswith(COUNTER_PREFIX) or not full_name.endswith("_total"):
            continue
        name = full_name[len(COUNTER_PREFIX) : -len("_total")]
        if name == "num_accepted_tokens_per_pos":
            position = int(labels.get("position", 0))
            per_pos[position] = per_pos.get(position, 0) + int(value)
        elif name in totals:
            totals[name] += int(value)
    positions = [per_pos.get(k, 0) for k in range(max(per_pos) + 1)] if per_pos else []
    return SpecCounters(totals["num_drafts"], totals["num_draft_tokens"], totals["num_accepted_tokens"], positions)


def drafted_steps(
    prompt_tokens: int, chunks: Sequence[int], accepted: Sequence[int], drafted: Sequence[int]
) -> tuple[list[DraftedStep], int, bool]:
    """One request's drafted steps with their start positions, its target forward passes, and
    whether the positions are exact.

    `chunks` are the token counts of the streamed chunks (one per engine step while the client keeps
    up; the first is the prefill's token); `accepted`/`drafted` the per-step arrays, drafted steps
    only. A chunk of n > 1 tokens is a drafted step that accepted n - 1; a one-token chunk is an
    undrafted step or a drafted one that accepted nothing, which nothing the server sends tells
    apart. Where the chunks can be matched to the arrays in order (the last chunk may be cut short
    by max_tokens or a stop), each drafted step's position is the context length before its chunk
    (a step that accepted nothing takes the earliest one-token chunk it can: its position may be a
    few tokens early where undrafted steps came first), and the passes are the chunks. Where they
    cannot (the server merged chunks), positions assume no undrafted step came between drafted
    ones, and the passes are 1 + drafted steps + the tokens no drafted step accounts for."""
    plan = _match(list(chunks), list(accepted))
    output = sum(chunks)
    if plan is not None:
        steps, position, j = [], prompt_tokens, 0
        for i, n in enumerate(chunks):
            if i > 0 and plan[i]:
                steps.append(DraftedStep(position, drafted[j], accepted[j]))
                j += 1
            position += n
        return steps, len(chunks), True
    steps, position = [], prompt_tokens + 1
    for a, d in zip(accepted, drafted):
        steps.append(DraftedStep(position, d, a))
        position += a + 1
    undrafted = max(0, output - 1 - sum(a + 1 for a in accepted))
    return steps, 1 + len(accepted) + undrafted, False


def _match(chunks: list[int], accepted: list[int]) -> list[bool] | None:
    """For each chunk, whether it is a drafted step, matching `accepted` in order (drafted steps
    taken as early as they can be); None when no matching exists."""
    n_chunks = len(chunks)
    if n_chunks <= 1:
        return [False] * n_chunks if not accepted else None
    if chunks[0] != 1:  # the prefill step samples one token: a larger first chunk is merged
        return None

    def fits(i: int, j: int) -> bool:
        # chunk i can be drafted step j: it carried accepted + 1 tokens, fewer only if cut at the end
        return chunks[i] == accepted[j] + 1 or (i == n_chunks - 1 and chunks[i] <= accepted[j] + 1)

    # feasible[i][j]: chunks i.. can carry drafted steps j.. (with undrafted one-token chunks between)
    feasible = [[False] * (len(accepted) + 1) for _ in range(n_chunks + 1)]
    feasible[n_chunks][len(accepted)] = True
    for i in range(n_chunks - 1, 0, -1):
        for j in range(len(accepted), -1, -1):
            undrafted = chunks[i] == 1 and feasible[i + 1][j]
            as_step = j < len(accepted) and fits(i, j) and feasible[i + 1][j + 1]
            feasible[i][j] = undrafted or as_step
    if not feasible[1][0]:
        return None
    plan, j = [False], 0
    for i in range(1, n_chunks):
        take = j < len(accepted) and fits(i, j) and feasible[i + 1][j + 1]
        plan.append(take)
        j += take
    return plan


# A vLLM server's gauges of what it holds (vllm/v1/metrics/loggers.py), summed over its engines.
IN_FLIGHT_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting")
KV_CACHE_GAUGE = "vllm:kv_cache_usage_perc"


def gauges(text: str) -> dict[str, float]:
    """`in_flight` (requests running + waiting) and `kv_cache_usage` (0..1, the mean over engines)
    from a metrics page, each where the page has it."""
    in_flight, kv = [], []
    for name, _, value in prometheus_samples(text):
        if name in IN_FLIGHT_GAUGES:
            in_flight.append(value)
        elif name == KV_CACHE_GAUGE:
            kv.append(value)
    found = {}
    if in_flight:
        found["in_flight"] = float(sum(in_flight))
    if kv:
        found["kv_cache_usage"] = float(sum(kv) / len(kv))
    return found
