"""Each engine's term scored on its own published cases (issue 58): a term that makes them worse,
or that no case scores, is assumed, and every prediction that uses it is widened and says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from speclens.gpu_model.gpus import gpu_named
from speclens.gpu_model.model_error import (
    ENGINE_TERMS,
    HELD_OUT,
    UNSCORED_WIDENING,
    case_engine,
    case_error,
    engine_term_scores,
    folds,
    interval_for,
    unscored_because,
)
from speclens.gpu_model.serving_engines import ENGINES
from speclens.gpu_model.step_cost import Hardware

DATA = json.loads((Path(__file__).parents[1] / "data" / "published_speedups.json").read_text())


def test_the_shipped_scores_are_what_the_cases_give():
    assert engine_term_scores(DATA["cases"], DATA["models"]) == ENGINE_TERMS


def test_a_score_is_the_median_of_its_own_cases_with_and_without_the_term():
    cases, models = DATA["cases"], DATA["models"]
    mtp = [(c, eff) for c, eff in folds(cases, models) if case_engine(c) == "trtllm" and c["drafter"] == "mtp"]
    without = sorted(abs(case_error(c, models, eff)) for c, eff in mtp)
    with_term = sorted(abs(case_error(c, models, eff, engine=ENGINES["trtllm"])) for c, eff in mtp)
    score = ENGINE_TERMS[("trtllm", "mtp")]
    assert score.cases == len(mtp) == 5
    assert score.without == pytest.approx(without[2], abs=5e-4)
    assert score.with_term == pytest.approx(with_term[2], abs=5e-4)
    # in-graph MTP drafting pays no per-pass overhead: every case's prediction rises towards the published
    assert all(w < o for w, o in zip(with_term, without))


def test_vllm_and_sglang_move_no_published_case_of_their_own():
    for case in DATA["cases"]:
        engine = case_engine(case)
        if engine != "trtllm":
            assert not ENGINES[engine].moves(case["drafter"]), case["id"]


def test_a_term_that_its_cases_support_keeps_the_scored_interval():
    hw = Hardware(gpu_named("b200"), engine=ENGINES["trtllm"])
    assert ENGINE_TERMS[("trtllm", "mtp")].supports
    assert unscored_because(hw, "mtp") is None
    interval, basis = interval_for(2.0, 4.0, hw, "mtp")
    assert basis == HELD_OUT.derived_on and interval == pytest.approx(HELD_OUT.interval(2.0), abs=1e-4)


@pytest.mark.parametrize("drafter", ["eagle3", "ngram"])
def test_a_term_its_cases_contradict_is_assumed_widened_and_says_by_how_much(drafter):
    hw = Hardware(gpu_named("b200"), engine=ENGINES["trtllm"])
    score = ENGINE_TERMS[("trtllm", drafter)]
    assert not score.supports and score.with_term > score.without
    why = unscored_because(hw, drafter)
    assert why.startswith("engine=trtllm") and "assumed" in why
    assert f"{score.without:.1%} -> {score.with_term:.1%}, worse" in why
    interval, basis = interval_for(2.0, 4.0, hw, drafter)
    assert interval == pytest.approx(HELD_OUT.interval(2.0, widening=UNSCORED_WIDENING), abs=1e-4)
    assert "no coverage claimed" in basis


def test_a_term_no_case_scores_is_assumed():
    why = unscored_because(Hardware(gpu_named("h200_sxm"), engine=ENGINES["vllm"]), "ngram")
    assert "assumed (no published ngram case on vllm scores it)" in why
