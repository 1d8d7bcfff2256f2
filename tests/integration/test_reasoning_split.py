"""Thinking vs answer on the embedded target through real vLLM: every step's segment re-derived
from outputs.jsonl and steps.parquet by a second, plain implementation, and compared."""

from __future__ import annotations

import pytest

from tests.fixtures.segments import derived_segments
from tests.integration.conftest import requests_of, steps_of

# SmolLM2's answers hold sentences: "thinking" here is everything up to the first full stop, which
# BPE often merges with what follows (".\n", ".)"), so the mapping back to tokens is exercised.
END = "."


def test_every_steps_segment_matches_an_independent_derivation(smollm2_ngram):
    from transformers import AutoTokenizer

    from evals.embedded.target import smollm2_path

    assert f"reasoning.end='{END}'" in smollm2_ngram.overrides
    out, summary = smollm2_ngram.out, smollm2_ngram.summary
    segments, thinking = derived_segments(out, AutoTokenizer.from_pretrained(str(smollm2_path())), END)
    steps = steps_of(out)
    assert segments == list(steps.segment)
    assert {"thinking", "answer"} <= set(segments)  # both segments drafted, so the test splits something
    requests = requests_of(out).set_index(["request_id", "turn", "batch_size"])
    assert requests.thinking_tokens.to_dict() == thinking
    assert (requests.thinking_tokens + requests.answer_tokens == requests.output_tokens).all()
    by_segment = summary["by_segment"]
    assert by_segment["thinking"]["n_steps"] + by_segment["answer"]["n_steps"] == summary["n_steps"]
    for segment in ("thinking", "answer"):
        part = steps[steps.segment == segment]
        assert by_segment[segment]["al"] == pytest.approx(1 + part.num_accepted.sum() / len(part))
    share = requests.thinking_tokens.sum() / requests.output_tokens.sum()
    assert by_segment["thinking"]["share_of_output_tokens"] == pytest.approx(share)
    assert summary["reasoning"]["n_closed"] + summary["reasoning"]["n_unclosed"] == len(requests)
