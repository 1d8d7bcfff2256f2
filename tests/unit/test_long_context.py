"""Long-context prompts: exact lengths in the target's tokenizer and in o200k, every tier."""

from __future__ import annotations

import os

import pytest

from evals.datasets.long_context import LongContextConfig, load, o200k_counter
from evals.embedded.target import ensure_smollm2
from runners.chat import ChatTokenizer
from speclens.errors import ConfigError

# The real cache (the unit tests' autouse fixture points SPECLENS_CACHE elsewhere).
REAL_CACHE = os.environ.get("SPECLENS_CACHE")


@pytest.fixture(scope="module")
def smollm2():
    with pytest.MonkeyPatch.context() as mp:
        if REAL_CACHE:
            mp.setenv("SPECLENS_CACHE", REAL_CACHE)
        else:
            mp.delenv("SPECLENS_CACHE", raising=False)
        return ensure_smollm2()


@pytest.fixture(scope="module")
def encoder(smollm2):
    return ChatTokenizer(smollm2)


def templated_length(encoder, text: str) -> int:
    return len(encoder.chat_token_ids([{"role": "user", "content": text}]))


@pytest.mark.parametrize("tier", ["low_entropy", "mixed", "high_entropy"])
@pytest.mark.parametrize("tokens", [200, 2000, 8000])
def test_prompts_have_exactly_n_target_tokens(encoder, tier, tokens):
    prompts = load(LongContextConfig(tier=tier, input_tokens=tokens, num_requests=2), encoder)
    assert [templated_length(encoder, p.turns[0]) for p in prompts] == [tokens, tokens]
    assert {p.domain for p in prompts} == {f"{tier}@{tokens // 1000}k" if tokens % 1000 == 0 else f"{tier}@{tokens}"}
    assert prompts[0].turns != prompts[1].turns


@pytest.mark.parametrize("tier", ["low_entropy", "mixed", "high_entropy"])
def test_o200k_counting_matches_speed_bench(encoder, tier):
    count = o200k_counter()
    prompts = load(LongContextConfig(tier=tier, input_tokens=1000, num_requests=2, count_with="o200k"), encoder)
    assert [count(p.turns[0]) for p in prompts] == [1000, 1000]


def test_prompts_are_deterministic_and_keep_the_needle(encoder):
    first = load(LongContextConfig(tier="mixed", input_tokens=300, num_requests=2), encoder)
    again = load(LongContextConfig(tier="mixed", input_tokens=300, num_requests=2), encoder)
    assert first == again
    assert "the passcode for the archive is" in first[0].turns[0]


def test_bad_settings_are_named(encoder):
    with pytest.raises(ConfigError, match="dataset.tier='medium' is unknown"):
        load(LongContextConfig(tier="medium"), encoder)
    with pytest.raises(ConfigError, match="dataset.count_with='gpt2' is unknown"):
        load(LongContextConfig(count_with="gpt2"), encoder)
    with pytest.raises(ConfigError, match="dataset.input_tokens=10: 10 is below 64; each length must be >= 64"):
        load(LongContextConfig(input_tokens=10), encoder)
