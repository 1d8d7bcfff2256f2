"""engine.batch_invariant=true on a GPU (vLLM's VLLM_BATCH_INVARIANT): greedy bf16 outputs no longer
move with batch shapes, so speculative decoding's outputs are plain decoding's token for token and
the figures at B=1 and B=4 come from the same tokens. For users' GPU machines with the CUDA vLLM
(`pytest -m gpu --run-gpu tests/integration/test_batch_invariant_gpu.py`); on CPU the key is refused
(tests/unit/test_reproducibility.py)."""

from __future__ import annotations

import json

import pytest

from tests.integration.conftest import GPU_INVARIANT_NGRAM, measure

pytestmark = pytest.mark.gpu

SETTINGS = [*GPU_INVARIANT_NGRAM, "baseline=true", "batch_sizes=[1,4]"]


def test_bf16_greedy_speculation_is_exactly_lossless_at_every_batch_size(tmp_path):
    summary = measure(tmp_path / "run", *SETTINGS)
    numerics = summary["numerics"]
    # (threads and the host cpu are recorded beside these in-process: not what this test is about)
    assert (numerics["dtype"], numerics["batch_invariant"], numerics["reproducible"]) == ("bfloat16", True, True)
    # CUDA vLLM runs n-gram on Model Runner V2 (Triton present): the plain and zero-cost verify
    # passes follow it (runners/model_runner.py), and the stamp says so
    assert numerics["model_runner"] == "v2"
    assert json.loads((tmp_path / "run" / "stamp.json").read_text())["model_runner"] == "v2"
    # every speculative output equals plain decoding's, at B=1 and at B=4, with no near-tie allowance
    assert summary["lossless"]["identical"] is True and summary["lossless"]["n_near_ties"] == 0
    # and the batch shape moved no token: B=1 and B=4 gave the same outputs
    outputs = [json.loads(line) for line in (tmp_path / "run" / "outputs.jsonl").read_text().splitlines()]
    by_batch = {
        b: {(o["request_id"], o["turn"]): o["token_ids"] for o in outputs if o["batch_size"] == b} for b in (1, 4)
    }
    assert by_batch[1] == by_batch[4] and len(by_batch[1]) == 16
    by_b = {p["batch_size"]: p["al"] for p in summary["operating_points"]}
    assert by_b[1] == by_b[4]
