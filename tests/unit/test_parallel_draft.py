"""A parallel draft model's proposals from every position (runners/parallel_draft.py) are those of
a forward pass per start over the stream up to it, the token just sampled and the mask tokens, as
vLLM's proposer runs it; and they do not depend on d_max beyond their own slot (causal masks)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from runners.parallel_draft import parallel_predictions
from tests.fixtures.models import _TARGET_ARCH

MASK = 5


@pytest.fixture(scope="module")
def draft_dir(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=48, max_position_embeddings=128, **_TARGET_ARCH)  # the tiny target's shape
    out = tmp_path_factory.mktemp("pard")
    LlamaForCausalLM(config).save_pretrained(out)
    return out


def per_start(draft_dir, tokens, p: int, d: int) -> list[int]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(draft_dir), dtype=torch.float32).eval()
    ids = list(tokens[: p + 2]) + [MASK] * (d - 1)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0]
    return [int(t) for t in logits[p + 1 :].argmax(-1)]


def test_every_starts_drafts_are_its_own_forward_pass(draft_dir):
    rng = np.random.default_rng(0)
    tokens = [int(t) for t in rng.integers(6, 48, size=20)]
    ((drafts, margins),) = parallel_predictions(draft_dir, [tokens], [4], 4, "float32", MASK)
    assert (drafts[:, :4] == -1).all()  # before the first start a run drafts from: none
    for p in range(4, len(tokens) - 1):
        assert list(drafts[:, p]) == per_start(draft_dir, tokens, p, 4), p
    assert np.isfinite(margins[:, 4:-1]).all() and (margins[:, 4:-1] >= 0).all()


def test_a_starts_first_k_drafts_do_not_depend_on_d_max(draft_dir, monkeypatch):
    tokens = list(range(6, 30))
    (short,) = parallel_predictions(draft_dir, [tokens], [0], 2, "float32", MASK)
    monkeypatch.setattr("runners.parallel_draft.STARTS_PER_PASS", 3)  # several mask passes, one cache
    (long,) = parallel_predictions(draft_dir, [tokens], [0], 5, "float32", MASK)
    assert (long[0][:2] == short[0]).all()
