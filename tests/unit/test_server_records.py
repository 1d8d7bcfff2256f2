"""Records from what a vLLM server reports: /metrics summed over engine series, and each
request's streamed chunks matched to its per-step acceptance arrays."""

from __future__ import annotations

from runners.server_records import drafted_steps, parse_counters
from speclens.generation import DraftedStep

# As vLLM 0.32's Prometheus logger writes it, with two data-parallel engines.
METRICS = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 5.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e+09
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 30.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} 15.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 12.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="m"} 4.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 7.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 3.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 5.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="1"} 1.0
vllm:num_requests_running{engine="0",model_name="m"} 0.0
"""


def test_counters_sum_every_engine_series():
    c = parse_counters(METRICS)
    assert (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens) == (15, 45, 16)
    assert c.num_accepted_tokens_per_pos == [10, 6]


def test_chunks_matched_to_the_step_arrays_give_exact_positions():
    # prefill token, a step accepting 3, an undrafted step, a step accepting 1, a step accepting 0
    steps, passes, exact = drafted_steps(10, [1, 4, 1, 2, 1], accepted=[3, 1, 0], drafted=[3, 3, 3])
    assert exact and passes == 5
    assert steps == [DraftedStep(11, 3, 3), DraftedStep(16, 3, 1), DraftedStep(18, 3, 0)]
    # one-token chunks: the undrafted step and the zero-acceptance step are told apart by order
    steps, passes, exact = drafted_steps(10, [1, 1, 1, 4], accepted=[0, 3], drafted=[3, 3])
    assert exact and passes == 4 and [s.position for s in steps] == [11, 13]


def test_a_last_chunk_cut_by_max_tokens_still_matches():
    steps, passes, exact = drafted_steps(5, [1, 4, 2], accepted=[3, 3], drafted=[3, 3])
    assert exact and passes == 3 and [s.position for s in steps] == [6, 10]


def test_merged_chunks_fall_back_to_positions_without_undrafted_steps():
    # the client fell behind and two steps arrived as one chunk
    steps, passes, exact = drafted_steps(10, [1, 8, 1], accepted=[3, 3], drafted=[3, 3])
    assert not exact and [s.position for s in steps] == [11, 15]
    # 10 tokens: the prefill's, 8 from the two drafted steps, 1 from an undrafted step
    assert passes == 1 + 2 + 1
