"""Model Runner V2's n-gram proposer (drafters/ngram.py ngram_v2_proposal) on the cases where it
parts from V1's: another occurrence of the matched n-gram, no match, too few tokens after the match.
(The transcription is run against vLLM's own Triton kernels in tests/integration/test_ngram_v2.py.)"""

from __future__ import annotations

import numpy as np

from drafters.ngram import ngram_v2_proposal


def propose(tokens: list[int], k: int, min_n: int = 1, max_n: int = 3) -> list[int]:
    return ngram_v2_proposal(np.asarray(tokens, dtype=np.int64), min_n, max_n, k).tolist()


def test_the_rightmost_earlier_occurrence_of_the_longest_suffix_is_followed():
    # the suffix [1, 2] occurs at 0 (V1 follows it: 3, 1, 2) and at 3: V2 follows the later one
    assert propose([1, 2, 3, 1, 2, 4, 9, 1, 2], 3) == [4, 9, 1]
    # a longer match wins over a later shorter one: [7, 1, 2] at 0 beats [1, 2] at 4
    assert propose([7, 1, 2, 5, 1, 2, 6, 7, 1, 2], 2) == [5, 1]


def test_without_a_match_all_k_drafts_are_the_last_token():
    assert propose([4, 5, 6, 7], 3) == [7, 7, 7]
    assert propose([4, 5, 6, 7], 3, min_n=2) == [7, 7, 7]
    assert propose([8], 2) == [8, 8]  # nothing earlier to match


def test_slots_past_the_end_of_the_followed_tokens_hold_the_last_token():
    # [5, 6] last occurred at 2, followed only by [5, 6] itself: 2 tokens, then the last token
    assert propose([9, 9, 5, 6, 5, 6], 4, min_n=2) == [5, 6, 6, 6]


def test_n_is_bounded_by_min_and_max():
    tokens = [1, 2, 3, 8, 1, 2, 3]
    assert propose(tokens, 1, min_n=4, max_n=5) == [3]  # only a 3-gram occurs: below min_n
    assert propose(tokens, 2, min_n=1, max_n=1) == [8, 1]  # [3] at 2 is its rightmost occurrence
    assert propose(tokens, 0) == []
