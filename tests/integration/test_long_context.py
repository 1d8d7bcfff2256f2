"""A 32,000-token request through vLLM end to end, on the smallest target that can fail it: the
tiny fixture target (2,048 native positions) under a named YaRN extension to 32,768."""

from __future__ import annotations

import json

from speclens.file_formats.records import read_parquet
from tests.fixtures.models import tiny_target
from tests.integration.conftest import measure, requests_of
from tests.integration.test_tiny_models import assert_records_sum_to_counters

LENGTH = 32000
MAX_TOKENS = 16


class PrefillRecorder:
    """A progress object that keeps what the engine reported of its prefill."""

    def __init__(self) -> None:
        self.prefilled: list[int] = []
        self.planned = 0
        self.generated = 0

    def __call__(self, tokens: int) -> None:
        self.generated += tokens

    def prefill(self, tokens: int, added_total: int) -> None:
        self.prefilled.append(tokens)
        self.planned += added_total


def test_a_32k_request_runs_end_to_end_under_a_named_extension_and_its_records_match_vllm(tmp_path):
    out, recorder = tmp_path / "32k", PrefillRecorder()
    summary = measure(
        out,
        "target=custom",
        f"target.model={tiny_target()}",
        "dataset=long_context",
        f"dataset.input_tokens={LENGTH}",
        "dataset.num_requests=1",
        f"sampling.max_tokens={MAX_TOKENS}",
        "engine.dtype=float32",
        "engine.max_model_len=null",
        "+engine.rope_scaling={rope_type:yarn,factor:16}",
        "drafter=ngram",
        "d=3",
        "drafter.prompt_lookup_min=1",
        progress=lambda label: recorder,
    )
    requests = requests_of(out)
    assert requests.prompt_tokens.tolist() == [LENGTH] and requests.input_tokens.tolist() == [LENGTH]
    assert_records_sum_to_counters(summary, out)
    assert summary["context_window"] == {
        "native": 2048,
        "window": 32768,
        "max_model_len": LENGTH + MAX_TOKENS,
        "extension": "yarn x16 from 2048",
    }
    assert list(summary["by_length"]) == ["32k"]
    assert summary["by_length"]["32k"]["al"] == summary["al"] and summary["by_length"]["32k"]["input_tokens"] == LENGTH
    stamp = json.loads((out / "stamp.json").read_text())
    assert stamp["fitted_defaults"]["engine.max_model_len"]["value"] == LENGTH + MAX_TOKENS
    # the prompt went in chunks of the scheduler's token budget, each reported as it was prefilled
    engine_steps = read_parquet(out / "engine_steps.parquet")
    assert recorder.planned == LENGTH and sum(recorder.prefilled) == LENGTH
    chunk = int(engine_steps.num_tokens.max())
    assert len([n for n in recorder.prefilled if n]) == -(-LENGTH // chunk) > 1
    assert recorder.generated == int(requests.output_tokens.sum())
