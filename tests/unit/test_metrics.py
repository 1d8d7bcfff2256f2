"""Acceptance figures against values computed by hand from a small step table.

Request A (domain x) accepted 3, 1, 0 of d=3; request B (domain y) accepted 2, 2.
"""

import pandas as pd
import pytest

from speclens.figures import metrics
from speclens.generation import SpecCounters

D = 3


@pytest.fixture
def steps():
    rows = [("A", "x", 3), ("A", "x", 1), ("A", "x", 0), ("B", "y", 2), ("B", "y", 2)]
    return pd.DataFrame(
        [(r, dom, 0, i, 10 + i, D, acc) for i, (r, dom, acc) in enumerate(rows)],
        columns=["request_id", "domain", "turn", "step", "position", "num_drafted", "num_accepted"],
    )


@pytest.fixture
def requests():
    return pd.DataFrame(
        {"request_id": ["A", "B"], "domain": ["x", "y"], "output_tokens": [9, 7], "target_steps": [5, 3]}
    )


def test_al_pools_steps_over_requests(steps):
    assert metrics.acceptance_length(steps) == pytest.approx(1 + 8 / 5)


def test_request_weighted_al_averages_requests(steps):
    assert metrics.request_weighted_al(steps) == pytest.approx(((1 + 4 / 3) + (1 + 4 / 2)) / 2)


def test_per_position_and_conditional(steps):
    assert metrics.per_position_acceptance(steps, D) == pytest.approx([4 / 5, 3 / 5, 1 / 5])
    assert metrics.conditional_acceptance([0.8, 0.6, 0.2]) == pytest.approx([0.8, 0.75, 1 / 3])


def test_histogram_counts_steps_by_accepted(steps):
    assert metrics.acceptance_histogram(steps, D) == [1, 1, 2, 1]


def test_per_request_totals_are_by_request_id_in_name_order_whatever_the_step_order(steps):
    shuffled = steps.iloc[[4, 0, 3, 2, 1]]
    totals = metrics.per_request(shuffled)
    assert list(totals.index) == ["A", "B"]
    assert totals["accepted"].tolist() == [4, 4] and totals["drafts"].tolist() == [3, 2]


def test_tokens_per_step_counts_all_target_passes(requests):
    assert metrics.tokens_per_step(requests) == pytest.approx(16 / 8)


def test_bootstrap_ci_with_two_requests_spans_the_single_request_resamples(steps):
    # Resamples are AA (AL 7/3), AB (2.6) or BB (3.0); the 2.5/97.5 percentiles are AA and BB.
    lo, hi = metrics.al_ci95(steps, seed=0)
    assert lo == pytest.approx(1 + 4 / 3)
    assert hi == pytest.approx(3.0)
    assert metrics.al_ci95(steps, seed=0) == metrics.al_ci95(steps, seed=0)


def test_one_request_has_no_interval_rather_than_a_zero_width_one(steps):
    one = steps[steps.request_id == "A"]
    assert metrics.acceptance_length(one) == pytest.approx(1 + 4 / 3)
    assert metrics.al_ci95(one, seed=0) is None


def test_by_domain_splits_steps_and_requests(steps, requests):
    domains = metrics.by_domain(steps, requests, seed=0)
    assert set(domains) == {"x", "y"}
    assert domains["x"].al == pytest.approx(1 + 4 / 3)
    assert domains["x"].tokens_per_step == pytest.approx(9 / 5)
    assert domains["y"].n_steps == 2 and domains["y"].n_requests == 1


def test_counter_check_passes_on_matching_and_names_mismatch(steps):
    good = SpecCounters(5, 15, 8, [4, 3, 1])
    metrics.check_counters(steps, good, D)
    with pytest.raises(metrics.MeasurementError, match="num_accepted_tokens: records 8 vs engine 9"):
        metrics.check_counters(steps, SpecCounters(5, 15, 9, [4, 3, 1]), D)


def test_empty_steps_give_null_al():
    empty = pd.DataFrame(columns=["request_id", "num_accepted", "num_drafted"])
    assert metrics.acceptance_length(empty) is None
    assert metrics.al_ci95(empty, seed=0) is None


def test_al_by_position_bins_steps_by_context_length():
    steps = pd.DataFrame({"position": [10, 255, 256, 3000, 70000], "num_accepted": [1, 3, 0, 2, 4]})
    assert metrics.al_by_position(steps) == [
        metrics.PositionBin(from_=0, to=256, n_steps=2, al=3.0),
        metrics.PositionBin(from_=256, to=512, n_steps=1, al=1.0),
        metrics.PositionBin(from_=2048, to=4096, n_steps=1, al=3.0),
        metrics.PositionBin(from_=65536, to=None, n_steps=1, al=5.0),
    ]


def test_spec_counters_add_and_subtract_per_position():
    a = SpecCounters(3, 9, 5, [3, 2])
    b = SpecCounters(1, 3, 3, [1, 1, 1])
    assert a + b == SpecCounters(4, 12, 8, [4, 3, 1])
    assert (a + b).since(b) == SpecCounters(3, 9, 5, [3, 2, 0])
    assert sum([a, b], SpecCounters()) == a + b


def test_the_near_tie_bound_is_four_ulps_of_a_top_logit_in_each_dtype():
    from speclens.lossless import classify, first_divergence, near_tie_bound

    assert near_tie_bound("bfloat16") == 4 * 0.125 and near_tie_bound("float16") == 4 * 2**-6
    assert near_tie_bound("float32") == 4 * 2**-19
    assert classify(0.3, "bfloat16") == "near_tie" and classify(0.3, "float32") == "divergence"
    assert classify(None, "bfloat16") == "unexplained"
    assert first_divergence([1, 2, 3], [1, 2, 4]) == 2 and first_divergence([1, 2], [1, 2, 9]) == 2


def test_a_later_turn_carrying_a_parted_answer_follows_that_turn():
    """Turn 1 carries turn 0's answer: where turn 0 parted at a near-tie, turn 1's prompts differ and
    its mismatch is that one's consequence, neither a near-tie nor a divergence of its own."""
    from evals.pipeline.summarise import lossless
    from speclens.generation import TurnResult

    def result(turn: int, prompt: tuple, out: list) -> TurnResult:
        return TurnResult("q", turn, len(prompt), out, "", [], len(out), 0.1, prompt_token_ids=prompt)

    spec = [result(0, (1, 2), [5, 6, 7]), result(1, (1, 2, 5, 6, 7, 9), [8, 8])]
    base = [result(0, (1, 2), [5, 6, 4]), result(1, (1, 2, 5, 6, 4, 9), [3, 3])]
    check = lossless(spec, base, True, 1, {("q", 0, 1): 0.0}, "bfloat16")
    assert [(m.turn, m.first_divergence, m.classification) for m in check.mismatches] == [
        (0, 2, "near_tie"),
        (1, 0, "follows_earlier_turn"),
    ]
    assert (check.n_near_ties, check.n_divergences, check.identical) == (1, 0, False)
