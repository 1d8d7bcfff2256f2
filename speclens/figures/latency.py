"""Latency as a user of the served model feels it, per operating point: time to first token,
time per output token after the first, gaps between streamed chunks, end to end.

TPOT of a request = (end − first token) / (output tokens − 1), requests of one token left out.
With speculation a chunk may carry several tokens, so chunk gaps (ITL) are per chunk, not per token.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from speclens.generation import TurnResult
from speclens.schema import Milliseconds, NonNegative, record


@record
class Percentiles:
    p50: Milliseconds
    p90: Milliseconds
    p99: Milliseconds
    mean: Milliseconds


@record
class Latency:
    ttft_ms: Percentiles | None
    tpot_ms: Percentiles | None
    itl_ms: Percentiles | None
    e2e_ms: Percentiles | None
    output_tokens_per_s: NonNegative
    requests_per_s: NonNegative


def percentiles(values_s: Sequence[float]) -> Percentiles | None:
    if not len(values_s):
        return None
    ms = np.asarray(values_s, dtype=float) * 1000.0
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    return Percentiles(float(p50), float(p90), float(p99), float(ms.mean()))


def latency_of(results: Sequence[TurnResult], generate_s: float) -> Latency:
    """The latency figures of one pass's requests; rates over the pass's generation time."""
    tpot = [
        (r.latency_s - r.ttft_s) / (len(r.output_token_ids) - 1)
        for r in results
        if r.ttft_s is not None and len(r.output_token_ids) > 1
    ]
    tokens = sum(len(r.output_token_ids) for r in results)
    return Latency(
        ttft_ms=percentiles([r.ttft_s for r in results if r.ttft_s is not None]),
        tpot_ms=percentiles(tpot),
        itl_ms=percentiles([g for r in results for g in r.chunk_gaps_s]),
        e2e_ms=percentiles([r.latency_s for r in results]),
        output_tokens_per_s=tokens / generate_s if generate_s > 0 else 0.0,
        requests_per_s=len(results) / generate_s if generate_s > 0 else 0.0,
    )
