"""Latency figures against hand-computed values."""

from __future__ import annotations

import pytest

from speclens.figures.latency import latency_of
from speclens.generation import TurnResult


def result(tokens: int, ttft_s: float, e2e_s: float, gaps: list[float]) -> TurnResult:
    return TurnResult("r", 0, 10, list(range(tokens)), "", [], len(gaps) + 1, e2e_s, ttft_s, gaps)


def test_ttft_tpot_itl_and_rates():
    results = [result(5, 0.1, 0.5, [0.2, 0.2]), result(3, 0.3, 0.5, [0.1, 0.1]), result(1, 0.2, 0.2, [])]
    latency = latency_of(results, generate_s=2.0)
    # TPOT: (0.5 - 0.1) / 4 = 100 ms and (0.5 - 0.3) / 2 = 100 ms; the one-token request has none
    assert latency.tpot_ms.p50 == pytest.approx(100.0) and latency.tpot_ms.mean == pytest.approx(100.0)
    assert latency.ttft_ms.p50 == pytest.approx(200.0) and latency.ttft_ms.mean == pytest.approx(200.0)
    assert latency.itl_ms.mean == pytest.approx(150.0) and latency.e2e_ms.p90 == pytest.approx(500.0)
    assert latency.output_tokens_per_s == pytest.approx(9 / 2.0) and latency.requests_per_s == pytest.approx(1.5)


def test_a_pass_without_tokens_has_no_percentiles():
    latency = latency_of([], generate_s=0.0)
    assert latency.ttft_ms is None and latency.output_tokens_per_s == 0.0
