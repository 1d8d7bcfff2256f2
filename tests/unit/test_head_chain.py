"""The batched chains of runners/head_chain.py are the chains vLLM's proposer drafts one step at a
time (a KV cache holding the teacher-forced entries up to the chain's start, then the chain's own),
checked on a random head in float64 for EAGLE-3, EAGLE and a MiMo-layout MTP layer; and a head's config read as vLLM reads it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from runners.head_chain import Head, HeadSpec, chain_predictions, read_spec
from speclens.errors import ConfigError

H, HEADS, KV, DIM, INTER, VOCAB, DRAFT_VOCAB = 32, 4, 2, 8, 48, 40, 16
LAYER = {
    "hidden_size": H,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV,
    "head_dim": DIM,
    "max_position_embeddings": 256,
    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
}


def random_head(kind: str, seed: int = 0) -> Head:
    g = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * 0.5

    width = 2 * H if kind == "eagle3" else H  # EAGLE-3's layer takes [embeds, hidden]; EAGLE's fc, MTP's input_proj do
    w = {
        "embed_tokens.weight": r(VOCAB, H),
        "layers.0.self_attn.q_proj.weight": r(HEADS * DIM, width),
        "layers.0.self_attn.k_proj.weight": r(KV * DIM, width),
        "layers.0.self_attn.v_proj.weight": r(KV * DIM, width),
        "layers.0.self_attn.o_proj.weight": r(H, HEADS * DIM),
        "layers.0.post_attention_layernorm.weight": 1 + r(H) * 0.1,
        "layers.0.mlp.gate_proj.weight": r(INTER, H),
        "layers.0.mlp.up_proj.weight": r(INTER, H),
        "layers.0.mlp.down_proj.weight": r(H, INTER),
    }
    if kind == "eagle3":
        w |= {
            "fc.weight": r(H, 3 * H),
            "layers.0.hidden_norm.weight": 1 + r(H) * 0.1,
            "layers.0.input_layernorm.weight": 1 + r(H) * 0.1,
            "norm.weight": 1 + r(H) * 0.1,
            "lm_head.weight": r(DRAFT_VOCAB, H),
            # draft id i is target id i + d2t[i]: every other target id, shuffled order kept sorted
            "d2t": torch.arange(DRAFT_VOCAB) * 1,
        }
    elif kind == "mtp":  # MiMo's layer: Qwen2's attention biases, its own norms around input_proj
        w |= {
            "layers.0.input_proj.weight": r(H, 2 * H),
            "layers.0.token_layernorm.weight": 1 + r(H) * 0.1,
            "layers.0.hidden_layernorm.weight": 1 + r(H) * 0.1,
            "layers.0.input_layernorm.weight": 1 + r(H) * 0.1,
            "layers.0.final_layernorm.weight": 1 + r(H) * 0.1,
            "layers.0.self_attn.q_proj.bias": r(HEADS * DIM),
            "layers.0.self_attn.k_proj.bias": r(KV * DIM),
            "layers.0.self_attn.v_proj.bias": r(KV * DIM),
            "lm_head.weight": r(VOCAB, H),
        }
    else:
        w |= {"fc.weight": r(H, 2 * H), "lm_head.weight": r(VOCAB, H)}
    spec = HeadSpec(kind, HEADS, KV, DIM, 1e-6, (0, 1, 2), True, kind == "mtp", LAYER)
    return Head(spec, w, torch.float64)


def stepwise(head: Head, tokens: list[int], states, start: int, d: int) -> list[int]:
    """vLLM's proposer from `start`: a teacher-forced first pass over positions 0..start into the
    KV cache, then draft k at position start + k - 1 on the target's token (drafts so far right)
    and the head's previous output, attending to the cache and to the chain's own entries."""
    ids = torch.tensor(tokens[1 : start + 2])
    positions = torch.arange(start + 1)
    x, residual = head.layer_input(ids, head.fuse(states[: start + 1]), positions)
    q, k, v = head.qkv(x, positions)
    cache_k, cache_v = list(k), list(v)
    drafts = []
    query, row_residual = q[-1:], residual[-1:]
    for step in range(1, d + 1):
        keys = torch.stack(cache_k).repeat_interleave(HEADS // KV, 1)
        values = torch.stack(cache_v).repeat_interleave(HEADS // KV, 1)
        scores = torch.einsum("qhd,khd->hqk", query, keys) * DIM**-0.5
        attended = torch.einsum("hqk,khd->qhd", torch.softmax(scores, -1), values)
        token, _, feedback = head.finish(attended.reshape(1, -1), row_residual)
        drafts.append(int(token[0]))
        position = start + step
        if step == d or position + 1 >= len(tokens):
            break
        x, row_residual = head.layer_input(torch.tensor([tokens[position + 1]]), feedback, torch.tensor([position]))
        query, key, value = head.qkv(x, torch.tensor([position]))
        cache_k.append(key[0])
        cache_v.append(value[0])
    return drafts


@pytest.mark.parametrize("kind", ["eagle3", "eagle", "mtp"])
def test_the_batched_chains_are_the_chains_vllm_drafts_step_by_step(kind):
    head = random_head(kind)
    rng = np.random.default_rng(1)
    tokens = [int(t) for t in rng.integers(0, VOCAB, size=23)]
    states = torch.randn(len(tokens), 3 * H if kind == "eagle3" else H, dtype=torch.float64) * 0.5
    d_max = 4
    drafts, margins = chain_predictions(head, tokens, states, d_max)
    assert drafts.shape == (d_max, len(tokens))
    checked = 0
    for start in range(len(tokens) - 2):
        expected = stepwise(head, tokens, states, start, d_max)
        assert list(drafts[: len(expected), start]) == expected, start
        checked += len(expected)
    assert checked > 60
    assert (margins[drafts >= 0] >= 0).all() and np.isfinite(margins[drafts >= 0]).all()


def test_chains_do_not_depend_on_the_query_block(monkeypatch):
    head = random_head("eagle3", seed=3)
    tokens = list(range(1, 30))
    states = torch.randn(len(tokens), 3 * H, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    whole = chain_predictions(head, tokens, states, 3)[0]
    monkeypatch.setattr("runners.head_chain.QUERY_BLOCK", 5)
    assert (chain_predictions(head, tokens, states, 3)[0] == whole).all()


def test_a_heads_config_is_read_with_vllms_defaults_and_what_it_cannot_compute_is_refused(tmp_path):
    native = {"architectures": ["LlamaForCausalLMEagle3"], **LAYER, "num_hidden_layers": 1, "draft_vocab_size": 16}
    (tmp_path / "config.json").write_text(json.dumps(native))
    spec = read_spec(tmp_path, "eagle3", target_layers=30)
    # no aux layers named: vLLM's (2, L // 2, L - 3); a native folder's norm_before_residual is off
    assert spec.aux_layers == (2, 15, 27) and not spec.norm_before_residual and spec.head_dim == DIM
    speculators = {
        "speculators_config": {},
        "eagle_aux_hidden_state_layer_ids": [27, 2, 15],
        "transformer_layer_config": LAYER,
    }
    (tmp_path / "config.json").write_text(json.dumps(speculators))
    spec = read_spec(tmp_path, "eagle3", target_layers=30)
    assert spec.aux_layers == (2, 15, 27) and spec.norm_before_residual  # speculators' default: on
    (tmp_path / "config.json").write_text(json.dumps({**native, "norm_before_fc": True, "num_hidden_layers": 2}))
    with pytest.raises(ConfigError, match=r"without norm_before_fc, num_hidden_layers=2; measure each D"):
        read_spec(tmp_path, "eagle3", target_layers=30)


@pytest.mark.gpu
def test_the_chains_on_a_gpu_are_the_chains_on_the_cpu():
    """The same code on CUDA (what a user's GPU machine replays with): every draft of a random head
    in float64, where neither device's rounding can flip an argmax of these margins."""
    tokens = list(range(1, 40))
    states = torch.randn(len(tokens), 3 * H, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    cpu = chain_predictions(random_head("eagle3"), tokens, states, 4)[0]
    head = random_head("eagle3")
    gpu_head = Head(head.spec, {k: v for k, v in head.w.items()}, torch.float64, "cuda")
    assert (chain_predictions(gpu_head, tokens, states.cuda(), 4)[0] == cpu).all()


@pytest.mark.parametrize(
    "text, said",
    [
        ("{not json", r"^drafter.model=.*config.json is unreadable"),
        ('["a list"]', r"^drafter.model=.*config.json holds a list"),
        (json.dumps({"transformer_layer_config": {"hidden_size": 32}}), r"names no num_attention_heads"),
        (json.dumps({"num_attention_heads": 0, "hidden_size": 32}), r"^drafter.model=.*num_attention_heads"),
    ],
)
def test_a_hostile_head_config_is_one_line_naming_what_is_wrong(tmp_path, text, said):
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(ConfigError, match=said) as refused:
        read_spec(tmp_path, "eagle3", target_layers=30)
    assert "\n" not in str(refused.value)
