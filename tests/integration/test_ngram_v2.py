"""vLLM's Model Runner V2 on the CPU build: refused where asked for, and its n-gram proposer as
replay transcribes it (drafters/ngram.py) against vLLM's own Triton kernels (vllm/v1/worker/gpu/spec_decode/ngram/speculator.py), run on CPU tensors under
Triton's interpreter in a child process: the CPU build has Triton without a CPU backend, so vLLM
stands in placeholders for it; the child hands the speculator module the real Triton."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from drafters.ngram import ngram_v2_proposal
from speclens.errors import ConfigError
from tests.fixtures.models import tiny_target
from tests.integration.conftest import measure, tiny_overrides

_KERNELS = """
import importlib, json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
import numpy as np, torch, triton, triton.language as tl
from triton.runtime import interpreter

# Triton 3.9's interpreter refuses a mask combined from a scalar and a block (its dtype is not
# numpy's bool); the same mask as bool, as compiled Triton reads it.
def _bool_mask(method, mask_at):
    def patched(self, *args):
        args = list(args)
        mask = args[mask_at]
        args[mask_at] = interpreter.TensorHandle(np.asarray(mask.data).astype(bool), mask.dtype)
        return method(self, *args)
    return patched
interpreter.InterpreterBuilder.create_masked_load = _bool_mask(interpreter.InterpreterBuilder.create_masked_load, 1)
interpreter.InterpreterBuilder.create_masked_store = _bool_mask(interpreter.InterpreterBuilder.create_masked_store, 2)

import vllm.triton_utils as triton_utils
triton_utils.triton, triton_utils.tl, triton_utils.HAS_TRITON = triton, tl, True
ngram = importlib.import_module("vllm.v1.worker.gpu.spec_decode.ngram.speculator")
assert isinstance(ngram._ngram_scan_kernel, interpreter.InterpretedFunction)

out = []
for case in json.loads(sys.stdin.read()):
    seqs, min_n, max_n, k, max_model_len = case["seqs"], case["min_n"], case["max_n"], case["k"], case["max_model_len"]
    b = len(seqs)
    block_l = 64  # NgramGPUSpeculator's block for 64 <= max_model_len < 256
    n_blocks = triton.cdiv(max_model_len, block_l)
    token_ids = torch.zeros((b, max_model_len + 1), dtype=torch.int32)
    for i, s in enumerate(seqs):
        token_ids[i, : len(s)] = torch.tensor(s, dtype=torch.int32)
    idx_mapping = torch.arange(b, dtype=torch.int64)
    total_len = torch.tensor([len(s) for s in seqs], dtype=torch.int32)
    num_sampled = torch.ones(b, dtype=torch.int32)
    last_sampled = torch.tensor([s[-1] for s in seqs], dtype=torch.int64)
    scratch = torch.zeros((b, n_blocks), dtype=torch.int64)
    drafts = torch.zeros((b, k), dtype=torch.int64)
    ngram._ngram_scan_kernel[(b, n_blocks)](
        token_ids, token_ids.stride(0), idx_mapping, total_len, num_sampled, scratch, scratch.stride(0),
        max_model_len, min_n, max_n, max(1, triton.next_power_of_2(max_n)), block_l,
    )
    ngram._ngram_finalize_kernel[(b,)](
        token_ids, token_ids.stride(0), idx_mapping, total_len, num_sampled, last_sampled, scratch,
        scratch.stride(0), drafts, max_model_len, n_blocks, k, max(1, triton.next_power_of_2(k)),
        max(1, triton.next_power_of_2(n_blocks)),
    )
    out.append(drafts.tolist())
print(json.dumps(out))
"""


def test_the_transcribed_v2_proposer_drafts_what_vllms_kernels_draft():
    rng = np.random.default_rng(7)
    # Small vocabularies make repeated n-grams, several occurrences and long matches common; the
    # planted sequences are the unit test's cases (tests/unit/test_ngram_proposers.py).
    planted = [[1, 2, 3, 1, 2, 4, 9, 1, 2], [7, 1, 2, 5, 1, 2, 6, 7, 1, 2], [4, 5, 6, 7], [9, 9, 5, 6, 5, 6], [8]]
    random = [rng.integers(0, vocab, size=rng.integers(2, 120)).tolist() for vocab in (3, 5, 8) for _ in range(15)]
    cases = [
        {"seqs": planted + random, "min_n": min_n, "max_n": max_n, "k": k, "max_model_len": 128}
        for min_n, max_n, k in ((1, 3, 3), (2, 5, 4), (3, 3, 5))
    ]
    proc = subprocess.run(
        [sys.executable, "-c", _KERNELS], input=json.dumps(cases), capture_output=True, text=True, check=True
    )
    kernels = json.loads(proc.stdout.strip().splitlines()[-1])
    parted = 0
    for case, drafted in zip(cases, kernels):
        for seq, by_vllm in zip(case["seqs"], drafted):
            tokens = np.asarray(seq, dtype=np.int64)
            ours = ngram_v2_proposal(tokens, case["min_n"], case["max_n"], case["k"]).tolist()
            assert ours == by_vllm, (seq, case["min_n"], case["max_n"], case["k"])
            parted += ours != v1_proposal(tokens, case["min_n"], case["max_n"], case["k"])
    # the check covers the cases where the runners' proposers part, not only where they agree
    assert parted > 40, parted


def v1_proposal(tokens: np.ndarray, min_n: int, max_n: int, k: int) -> list[int]:
    from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens

    return _find_longest_matched_ngram_and_propose_tokens(tokens, min_n, max_n, 1 << 20, k).tolist()


def test_model_runner_v2_is_refused_on_the_cpu_build_before_a_run_dir_is_claimed(tmp_path):
    with pytest.raises(
        ConfigError, match=r"engine.model_runner=v2: .* needs Triton .*\(the CPU build always runs V1\)"
    ):
        measure(tmp_path / "v2", *tiny_overrides(tiny_target(), "drafter=ngram", "engine.model_runner=v2"))
    assert not (tmp_path / "v2").exists()  # refused in pre-flight: no run dir claimed
