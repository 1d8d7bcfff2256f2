"""A profile in the planners' newest form (issue 58, part 6): aiconfigurator's `nextn` and
`nextn_accepted`, its SDK's `expected_accepted_tokens` and Dynamo's five slots, each read back and
checked against the profile's own AL, rates and draft share."""

from __future__ import annotations

import json
import re

import pytest

from evals.pipeline.run_job import run
from speclens.errors import CorruptRecord
from speclens.file_formats.profile_file import PROFILE_FILE, read_profiles
from tests.unit.conftest import compose_run, fake_overrides

ROWS = [{"question_id": f"q{i}", "category": "coding", "turns": [f"write code {i}"]} for i in range(3)]
# Drafted steps accept 3, 1 and 0 of D = 6; one step proposes nothing (None).
SCRIPT = {f"q{i}#0": [3, 1, None, 0] for i in range(3)}


@pytest.fixture
def measured(tmp_path):
    out = tmp_path / "run"
    run(compose_run(*fake_overrides(tmp_path, ROWS, SCRIPT), "drafter=ngram", "d=6"), out, progress=lambda x: None)
    return out


def test_the_planner_fields_are_the_profiles_own_figures(measured):
    (whole,) = [p for p in read_profiles(measured) if p["domain"] == "all" and p["segment"] == "all"]
    # 3 drafted steps per request accepting 3 + 1 + 0: AL 1 + 4/3; 3 of the 5 target passes drafted
    assert whole["al"] == pytest.approx(1 + 4 / 3) and whole["draft_share"] == pytest.approx(3 / 5)
    assert whole["nextn"] == 6
    assert whole["nextn_accepted"] == pytest.approx(4 / 3 * 3 / 5)  # accepted drafts per decode step
    assert whole["speculative_decoding_profile"] == {"expected_accepted_tokens": whole["nextn_accepted"]}
    # Dynamo: five slots of conditional rates, P(k+1 | k): 2/3, 1/2, 1, then positions nothing reached
    assert whole["dynamo"] == {"aic_nextn": 5, "aic_nextn_accept_rates": pytest.approx([2 / 3, 1 / 2, 1, 0, 0])}


@pytest.mark.parametrize(
    "field, value, named",
    [
        ("nextn_accepted", 2.0, "its nextn_accepted (2.0) disagrees"),
        ("nextn", 5, "its nextn (5) disagrees"),
        # the same mean (1 + 4/3), rising at position 2
        ("marginal", [1 / 3, 2 / 3, 1 / 3, 0, 0, 0], "its marginal"),
        ("speculative_decoding_profile", {"expected_accepted_tokens": 0.1}, "its speculative_decoding_profile"),
    ],
)
def test_a_planner_field_that_disagrees_with_the_profile_is_a_corrupt_record(measured, field, value, named):
    path = measured / PROFILE_FILE
    data = json.loads(path.read_text())
    data["profiles"][0][field] = value
    path.write_text(json.dumps(data))
    with pytest.raises(CorruptRecord, match=re.escape(named)):
        read_profiles(measured)
