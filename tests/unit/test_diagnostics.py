"""Each diagnostic (speclens/figures/diagnostics.py) on a planted case, and silence on a clean run."""

from __future__ import annotations

import pandas as pd
import pytest

from speclens.figures.diagnostics import LOOP_NGRAM, RunFacts, diagnose, loops


def facts(**changes) -> RunFacts:
    """A clean run: eagle3 at D=3, greedy, two requests of 20 tokens, first position accepted 70%."""
    # each step starts where the one before left off (prompts of 10 tokens, then the prefill's token)
    steps = pd.DataFrame(
        {
            "batch_size": [1] * 12,
            "request_id": ["a"] * 6 + ["b"] * 6,
            "turn": [0] * 12,
            "position": [11, 14, 16, 20, 21, 24] + [11, 14, 16, 20, 21, 23],
            "num_accepted": [2, 1, 3, 0, 2, 1] + [2, 1, 3, 0, 1, 2],
            "num_drafted": [3] * 12,
        }
    )
    requests = pd.DataFrame(
        {
            "batch_size": [1, 1],
            "request_id": ["a", "b"],
            "turn": [0, 0],
            "prompt_tokens": [10, 10],
            "output_tokens": [16, 16],
            "target_steps": [7, 7],
            "drafted_steps": [6, 6],
            "num_accepted": [9, 9],
        }
    )
    base = dict(
        drafter="eagle3",
        d=3,
        temperature=0.0,
        sample_method=None,
        max_tokens=64,
        chat_template=None,
        per_position_acceptance=[0.7, 0.5, 0.2],
        steps=steps,
        requests=requests,
        outputs={("a", 0): list(range(16)), ("b", 0): list(range(100, 116))},
    )
    return RunFacts(**(base | changes))


def codes(run: RunFacts) -> list[str]:
    return [d.code for d in diagnose(run)]


def test_a_clean_run_says_nothing():
    assert diagnose(facts()) == []


def test_a_head_set_up_wrong_is_named_by_its_first_position():
    (found,) = diagnose(facts(per_position_acceptance=[0.12, 0.02, 0.0]))
    assert (found.code, found.severity) == ("low_first_position", "warning")
    assert found.evidence == {"first_position_acceptance": 0.12, "threshold": 0.3}
    assert "d2t" in found.message and "chat template" in found.message
    assert codes(facts(drafter="ngram", per_position_acceptance=[0.12])) == []  # no threshold for lookups


def test_sampled_verification_with_greedy_drafts_is_named():
    assert codes(facts(temperature=0.7)) == ["sample_mismatch"]
    assert codes(facts(temperature=0.7, sample_method="probabilistic")) == []


def test_looping_outputs_are_named_with_the_al_without_them():
    loop = [5, 6, 7, 8, 9, 10, 11, 12] * 4
    assert loops(loop) and not loops(list(range(32))) and not loops(loop[: 2 * LOOP_NGRAM - 1])
    (found,) = diagnose(facts(outputs={("a", 0): loop, ("b", 0): list(range(100, 132))}))
    assert found.code == "repetition" and found.evidence["looping"] == ["a#0"]
    assert found.evidence["share_of_requests"] == 0.5 and found.evidence["share_of_accepted_tokens"] == 0.5
    assert found.evidence["al_without"] == pytest.approx(1 + 9 / 6)  # request b alone


def test_truncated_answers_and_their_cut_tokens_are_counted():
    # a ended at EOS after 12 tokens; b kept max_tokens = 14 of the 16 its steps made: its last
    # step (from token 13) accepted 2 drafts and kept one of them
    stopped = facts().requests.assign(output_tokens=[12, 14])
    (found,) = diagnose(facts(max_tokens=14, requests=stopped))
    assert found.code == "truncated" and found.evidence == {
        "share_of_requests": 0.5,
        "requests": 1,
        "accepted_tokens_cut": 1,
    }


def test_plain_text_prompts_are_named():
    assert codes(facts(chat_template="plain")) == ["untemplated"]


def test_a_lookup_drafter_that_rarely_drafts_is_named():
    idle = facts().requests.assign(target_steps=[20, 20], drafted_steps=[6, 6])
    (found,) = diagnose(facts(drafter="ngram", per_position_acceptance=None, requests=idle))
    assert found.code == "sparse_drafting" and found.evidence["share_without_draft"] == pytest.approx(1 - 12 / 38)
    assert codes(facts(drafter="ngram", per_position_acceptance=None)) == []  # 12 of 12 decode steps drafted


def test_a_runs_diagnostics_reach_its_table_and_the_report_under_the_answer(tmp_path):
    import json

    from reports.build import build_sections
    from reports.table import result_table
    from tests.unit.test_curves import sweep

    root = sweep(tmp_path, [("ngram", 1), ("ngram", 2)])
    assert "Diagnostics" not in [s.title for s in build_sections(root)]  # clean fake runs: nothing to say
    path = root / "drafter=ngram,d=2" / "summary.json"
    summary = json.loads(path.read_text())
    assert summary["diagnostics"] == []
    summary["diagnostics"] = [
        {
            "code": "untemplated",
            "severity": "warning",
            "message": "the chat prompts were sent as plain text",
            "evidence": {},
        }
    ]
    path.write_text(json.dumps(summary))
    titles = [s.title for s in build_sections(root)]
    assert titles.index("Diagnostics") == 1  # right under the answer
    (section,) = [s for s in build_sections(root) if s.title == "Diagnostics"]
    assert section.tables[0][1] == [["ngram d=2", "warning", "untemplated", "the chat prompts were sent as plain text"]]
    from reports.runs import find_runs

    run = next(r for r in find_runs(root) if r.summary.d == 2)
    assert "warning [untemplated]: the chat prompts were sent as plain text" in result_table(run.summary)


def test_speclens_own_small_build_is_said_to_be_low_by_budget_not_set_up_wrong():
    (found,) = diagnose(facts(per_position_acceptance=[0.13, 0.02, 0.0], draft_budget="reduced"))
    assert (found.code, found.severity) == ("low_first_position", "info")
    assert "`reduced` build" in found.message and found.evidence["draft_budget"] == "reduced"
    (full,) = diagnose(facts(per_position_acceptance=[0.13, 0.02, 0.0], draft_budget="full"))
    assert full.severity == "warning"


def test_prompt_counts_a_server_reports_otherwise_are_named():
    counts = {("a", 0): (40, 40), ("b", 0): (52, 53)}  # the server added one token (a BOS) to b
    (found,) = diagnose(facts(prompt_counts=counts))
    assert found.code == "prompt_drift" and found.severity == "warning"
    assert found.evidence["requests"] == 1 and found.evidence["share_of_requests"] == 0.5
    assert found.evidence["examples"] == [{"request": "b#0", "speclens": 52, "server": 53}]
    assert "+1 to +1 tokens" in found.message
    assert codes(facts(prompt_counts={("a", 0): (40, 40)})) == []


def test_timings_that_cannot_be_right_are_said_to_be_noise():
    """issue 50, part 6: a speedup above tokens per step, or a negative drafting cost, is named
    with its batch size and figure; a plausible timing is not."""
    # a K=0 tax whose range reaches zero is noise about zero, not a tax that cannot be
    clean = facts(timings=[(1, 1.30, 1.38, 2.0, 0.05, [0.01, 0.09]), (4, None, 1.38, None, -0.02, [-0.06, 0.01])])
    assert [d.code for d in diagnose(clean)] == []
    noisy = facts(
        timings=[
            (1, 4.79, 1.38, 2.0, None, None),
            (8, 1.10, 1.38, -0.5, None, None),
            (4, 1.2, 1.5, 1.0, -0.21, [-0.24, -0.16]),
        ]
    )
    (found,) = [d for d in diagnose(noisy) if d.code == "timing_noise"]
    assert found.severity == "warning"
    assert found.evidence["found"] == [
        "B=1: speedup x4.79 above its 1.38 tokens per step",
        "B=8: T_draft -0.50 ms, below zero",
        "B=4: K=0 tax -21% [-24%, -16%], below zero",
    ]
    assert "noise" in found.message


def test_calibration_fits_that_miss_held_out_or_stand_on_a_negative_draft_cost_are_flagged():
    """issue 66: calibration.warnings said nothing where the K=0 tax fit missed a held-out point by
    +103% and a measured T_draft was -9.46 ms."""
    from evals.whatif_calibration import beside_warnings

    drafted = {"drafter": "ngram", "batch_size": 4, "d": 3, "context": 300, "t_step_ms": 20.0, "error": 0.0}
    record = {
        "k0_tax": {"points": [{"held_out_error": 1.03}, {"held_out_error": -0.1}]},
        "t_draft": {
            "lookup_us_per_request": {
                "fitted": True,
                "points": [drafted | {"t_draft_ms": -9.46, "held_out_error": 0.2}],
            },
            "draft_pass_overhead_ms": {"fitted": False, "value": 0.44},
        },
    }
    tax, negative = beside_warnings(record)
    assert tax.startswith("the K=0 tax fit predicts a point held out of it +103% off (bound ±30%)")
    assert negative.startswith("1 measured T_draft below zero (down to -9.46 ms: ngram at B=4, D=3)")
    assert beside_warnings({"k0_tax": {"points": [{"held_out_error": 0.2}]}, "t_draft": {}}) == []
