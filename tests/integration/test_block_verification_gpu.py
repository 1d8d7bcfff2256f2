"""verify.method=block on a GPU (vLLM's Model Runner V2 rejection sampler,
vllm/v1/worker/gpu/spec_decode/rejection_sampler.py, `use_block_verification`). At temperature 0
the target's distributions are one-hot, so block verification accepts exactly the longest prefix
that token-by-token verification accepts: with batch-invariant bf16 kernels, the same outputs and
the same AL as verify.method=standard. For users' GPU machines with the CUDA vLLM
(`pytest -m gpu --run-gpu tests/integration/test_block_verification_gpu.py`); on CPU the key is
refused (tests/unit/test_verify_method.py)."""

from __future__ import annotations

import json

import pytest

from tests.integration.conftest import GPU_INVARIANT_NGRAM, measure

pytestmark = pytest.mark.gpu

SETTINGS = GPU_INVARIANT_NGRAM


def test_block_verification_at_temperature_0_accepts_what_token_verification_does(tmp_path):
    standard = measure(tmp_path / "standard", *SETTINGS)
    block = measure(tmp_path / "block", *SETTINGS, "verify.method=block")
    stamp = json.loads((tmp_path / "block" / "stamp.json").read_text())
    assert stamp["speculative_config"]["rejection_sample_method"] == "block"
    assert block["numerics"]["model_runner"] == "v2"

    def outputs(name: str) -> dict:
        lines = (tmp_path / name / "outputs.jsonl").read_text().splitlines()
        return {(o["request_id"], o["turn"]): o["token_ids"] for o in map(json.loads, lines)}

    assert outputs("block") == outputs("standard")
    assert block["al"] == standard["al"] and block["n_steps"] == standard["n_steps"]
