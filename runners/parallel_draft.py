"""A parallel draft model's proposals (PARD: `drafter=draft_model drafter.parallel_drafting=true`)
from every position of a token stream, computed as vLLM computes them, for `evals.replay`.

What vLLM's proposer does at a step (vllm/v1/spec_decode/llm_base_proposer.py with parallel
drafting, V1's model runner): one forward pass of the draft model over the newly verified tokens at
their own positions, the token just sampled at p + 1, and D - 1 copies of the checkpoint's mask
token (`pard_token`, …) at p + 2 .. p + D; draft i is the argmax at position p + i. Attention is
causal, so draft i sees the verified tokens and the masks before it, never those after: the
first k drafts from a position do not depend on D >= k. The draft's KV entries below p + 1 are the
verified tokens' (the masks of earlier steps are overwritten or out of every later query's reach).

So every start's drafts come from one pass of the draft model over the target's stream (draft 1:
the argmax after each prefix) and one over mask blocks, one per start, each block attending to the
stream up to its start and causally to itself (a 4D attention mask over the stream's KV cache).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from runners.head_chain import NO_DRAFT, compute_device

# Starts per mask pass: bounds the attention mask (rows x (stream + rows)) of long streams.
STARTS_PER_PASS = 256


def stream_pass(model, tokens, device: str):
    """(logits after every prefix, the stream's KV cache) from one causal pass."""
    import torch
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        out = model(input_ids=torch.as_tensor([list(tokens)], device=device), past_key_values=cache, use_cache=True)
    return out.logits[0].float(), cache


def mask_block_pass(model, cache, n: int, starts: list[int], d_max: int, mask_token: int, dtype, device: str):
    """Logits of the d_max - 1 mask slots of each start p (positions p + 2 .. p + d_max), each
    block seeing the stream's KV at positions <= p + 1 and its own earlier slots."""
    import torch

    width = d_max - 1
    rows = len(starts) * width
    positions = torch.tensor([p + 2 + i for p in starts for i in range(width)], device=device)
    chain = torch.arange(rows, device=device) // width
    slot = torch.arange(rows, device=device) % width
    stream_seen = torch.arange(n, device=device)[None, :] <= (positions - slot - 1)[:, None]
    own_seen = (chain[:, None] == chain[None, :]) & (slot[None, :] <= slot[:, None])
    allowed = torch.cat([stream_seen, own_seen], dim=1)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(~allowed, torch.finfo(dtype).min)
    ids = torch.full((1, rows), mask_token, device=device)
    with torch.no_grad():
        out = model(
            input_ids=ids,
            position_ids=positions[None, :],
            attention_mask=mask[None, None],
            past_key_values=cache,
            use_cache=True,
        )
    cache.crop(n)
    return out.logits[0].float().view(len(starts), width, -1)


def parallel_predictions(
    draft_dir: Path,
    sequences: Sequence[Sequence[int]],
    first_starts: Sequence[int],
    d_max: int,
    dtype: str,
    mask_token: int,
    device: str | None = None,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per sequence, (drafts, margins) as runners/head_chain.py lays them out: drafts[i - 1, p] is
    draft i of the step whose token just sampled sits at p + 1, for every start p >= first_starts[s]
    (the positions a run drafts from), NO_DRAFT elsewhere; margins their logits' top-2 margin."""
    import torch
    from transformers import AutoModelForCausalLM

    torch_dtype = getattr(torch, dtype)
    device = device or compute_device()
    model = AutoModelForCausalLM.from_pretrained(str(draft_dir), dtype=torch_dtype).to(device).eval()
    out = []
    for tokens, first in zip(sequences, first_starts):
        n = len(tokens)
        drafts = np.full((d_max, n), NO_DRAFT, dtype=np.int64)
        margins = np.full((d_max, n), np.inf)
        logits, cache = stream_pass(model, tokens, device)
        top = torch.topk(logits, 2, dim=-1)
        starts = list(range(max(first, 0), n - 1))
        # draft 1: the argmax at p + 1, after the stream's own prefix
        drafts[0, starts] = top.indices[[p + 1 for p in starts], 0].cpu().numpy()
        margins[0, starts] = (top.values[:, 0] - top.values[:, 1])[[p + 1 for p in starts]].cpu().numpy()
        for begin in range(0, len(starts) if d_max > 1 else 0, STARTS_PER_PASS):
            block = starts[begin : begin + STARTS_PER_PASS]
            block_logits = mask_block_pass(model, cache, n, block, d_max, mask_token, torch_dtype, device)
            best = torch.topk(block_logits, 2, dim=-1)
            drafts[1:, block] = best.indices[..., 0].T.cpu().numpy()
            margins[1:, block] = (best.values[..., 0] - best.values[..., 1]).T.cpu().numpy()
        out.append((drafts, margins))
    return out
