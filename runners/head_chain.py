"""An EAGLE or EAGLE-3 head's (or a MiMo-layout MTP layer's) chained proposals from every position
of a token stream, computed as vLLM computes them, for `evals.replay` (runners/replay_chains.py;
replayed by drafters/replay.py chain_proposal).

What vLLM's proposer does at a step (vllm/v1/spec_decode/llm_base_proposer.py, the head in
vllm/model_executor/models/llama_eagle3.py and llama_eagle.py): the head's first pass runs over
the newly verified positions, position j taking the embedding of token j + 1 and the target's
hidden state at j (EAGLE-3: `fc` over the aux layers' states, concatenated in ascending layer
order; EAGLE: the target's final, normed state); the first draft is the argmax at the last
accepted position p. Draft k >= 2 runs at position p + k - 1 on the previous draft's embedding
and the head's previous output (EAGLE-3: before its final norm, unless `norm_output`), and
attends to the head's KV entries at positions <= p (written by first passes, from the target's
tokens and states) and to the chain's own entries at p + 1 .. p + k - 1.

While the drafts so far equal the target's tokens, every input of that chain is known from the
target's greedy stream alone. So draft k from every start p is pass k of a batched computation
over the whole sequence: pass 1 is the teacher-forced head, and pass k's query at q = p + k - 1
attends to pass 1's keys at <= p and to passes 2..k's keys at p + 1 .. q, one each (a diagonal).
The cost is d_max passes of one layer over the sequence, not one per position; the target's
states come from one forward pass of the target (transformers) over each sequence.

An MTP layer (vllm/model_executor/models/mimo_mtp.py) is chained the same way: vLLM's proposer
reuses module 0 at every draft; it takes the target's last layer output before the final norm,
and its normed output feeds both the logits and the next draft.

The same code runs on a GPU (compute_device): the target, the head and the passes go there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from speclens.checkpoints import read_config
from speclens.errors import ConfigError

# A chain's draft where the sequence is too short to hold it.
NO_DRAFT = -1
# Query rows per attention block: bounds the score matrix of long (32K-token) inputs.
QUERY_BLOCK = 1024


@dataclass(frozen=True)
class HeadSpec:
    """What the head is: EAGLE-3 or EAGLE, its attention's shape, its norms' flags, the target
    layers it fuses, and the layer config its rotary embedding is built from."""

    kind: str  # "eagle3", "eagle" or "mtp" (a MiMo-layout MTP layer of the target's own)
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_eps: float
    aux_layers: tuple[int, ...]  # EAGLE-3: the target layers whose inputs it fuses
    norm_before_residual: bool
    norm_output: bool
    layer_config: dict[str, Any]


def layer_config(config: dict[str, Any]) -> dict[str, Any]:
    """The decoder layer's config: speculators' `transformer_layer_config`, else the top level."""
    return config.get("transformer_layer_config") or config


def read_spec(head_dir: Path, kind: str, target_layers: int) -> HeadSpec:
    """The head's spec from its config.json (vLLM's defaults where a field is absent: speculators'
    folders default norm_before_residual on, vLLM-native ones off; aux layers (2, L/2, L-3))."""
    config = read_config(head_dir, "drafter.model")
    layer = layer_config(config)
    speculators = "speculators_config" in config
    unsupported = [f for f in ("norm_before_fc", "fc_norm") if config.get(f)]
    if layer.get("num_hidden_layers", 1) != 1:
        unsupported.append(f"num_hidden_layers={layer['num_hidden_layers']}")
    if layer.get("model_type", "llama") != "llama":
        unsupported.append(f"model_type={layer['model_type']}")
    if unsupported:
        raise ConfigError(
            f"drafter.model={head_dir}: the one-pass replay computes one-layer Llama heads without "
            f"{', '.join(unsupported)}; measure each D with `python -m evals.run -m d=1,3,5`."
        )
    aux = config.get("eagle_aux_hidden_state_layer_ids") or (config.get("eagle_config") or {}).get(
        "eagle_aux_hidden_state_layer_ids"
    )
    return HeadSpec(
        kind=kind,
        **attention_shape(layer),
        aux_layers=tuple(sorted(set(aux or (2, target_layers // 2, target_layers - 3)))),
        norm_before_residual=bool(config.get("norm_before_residual", speculators)),
        norm_output=bool(config.get("norm_output", False)),
        layer_config=layer,
    )


def attention_shape(layer: dict[str, Any]) -> dict[str, Any]:
    """A decoder layer's heads, KV heads, head width and norm epsilon from its config, with the
    defaults vLLM's Llama and Qwen2 layers take."""
    missing = [key for key in ("num_attention_heads", "hidden_size") if key not in layer]
    if missing:
        raise ConfigError(f"the head's layer config names no {', '.join(missing)}: the replay cannot compute it.")
    heads = layer["num_attention_heads"]
    return {
        "num_heads": heads,
        "num_kv_heads": layer.get("num_key_value_heads", heads),
        "head_dim": layer.get("head_dim") or layer["hidden_size"] // heads,
        "rms_eps": layer.get("rms_norm_eps", 1e-6),
    }


def read_mtp_spec(target_dir: Path) -> HeadSpec:
    """The target's MTP layer as a head: MiMo's layout (vllm/model_executor/models/mimo_mtp.py),
    one layer, which vLLM's proposer reuses for every draft (module 0 at each step)."""
    config = read_config(target_dir, "target.model")
    layer = config.get("text_config") or config
    architectures = config.get("architectures") or []
    layers = layer.get("num_nextn_predict_layers") or 0
    if architectures != ["MiMoForCausalLM"] or layers != 1:
        raise ConfigError(
            f"target.model={target_dir} ({', '.join(architectures) or 'no architectures'}, {layers} MTP layer(s)): the "
            "one-pass replay computes one MiMo-layout MTP layer (a Qwen2 decoder layer; DeepSeek's MLA and MoE "
            "layers, and vLLM's multi-module MTP, are not); measure each D with `python -m evals.run -m d=1,3,5`."
        )
    return HeadSpec(
        kind="mtp",
        **attention_shape(layer),
        aux_layers=(),
        norm_before_residual=False,
        norm_output=True,
        layer_config=layer,
    )


def mtp_weights(target_dir: Path, target_weights: dict[str, Any]) -> dict[str, Any]:
    """The MTP layer's tensors (`model.mtp_layers.0.…` as `layers.0.…`), with the target's embedding
    and lm_head, which vLLM shares with it."""
    from safetensors.torch import load_file

    prefix = "model.mtp_layers.0."
    weights = {
        "layers.0." + name.removeprefix(prefix): tensor
        for path in sorted(target_dir.glob("*.safetensors"))
        for name, tensor in load_file(str(path)).items()
        if name.startswith(prefix)
    }
    return weights | target_weights


def head_weights(head_dir: Path, target_weights: dict[str, Any]) -> dict[str, Any]:
    """The head's tensors under one naming (`fc.weight`, `layers.0.…`, `norm.weight`, `lm_head.weight`,
    `embed_tokens.weight`, `d2t`), the target's embedding and lm_head where the head holds none."""
    from safetensors.torch import load_file

    weights: dict[str, Any] = {}
    for path in sorted(head_dir.glob("*.safetensors")):
        for name, tensor in load_file(str(path)).items():
            name = name.removeprefix("model.").replace("midlayer.", "layers.0.")
            weights[name] = tensor
    for name in ("embed_tokens.weight", "lm_head.weight"):
        weights.setdefault(name, target_weights[name])
    return weights


class Head:
    """The head's layer in plain torch, in `dtype` on `device`."""

    def __init__(self, spec: HeadSpec, weights: dict[str, Any], dtype, device: str = "cpu") -> None:
        import torch

        self.spec = spec
        self.w = {k: (v.to(device) if k == "d2t" else v.to(device=device, dtype=dtype)) for k, v in weights.items()}
        self.dtype, self.device = dtype, device
        vocab = self.w["lm_head.weight"].shape[0]
        targets = torch.arange(vocab, device=device)
        if "d2t" in self.w:
            targets = targets + self.w["d2t"].long()
        # vLLM scatters the draft logits into the target vocabulary and takes the argmax there:
        # rows in target-id order make a tie go to the smallest target id, as there.
        order = torch.argsort(targets)
        self.lm_head = self.w["lm_head.weight"][order]
        self.target_ids = targets[order]
        self.rotary = rotary(spec.layer_config, device)

    def norm(self, name: str, x):
        import torch

        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.spec.rms_eps)
        return h.to(self.dtype) * self.w[name]

    def linear(self, name: str, x):
        out = x @ self.w[f"{name}.weight"].T
        bias = self.w.get(f"{name}.bias")
        return out if bias is None else out + bias

    def fuse(self, target_states):
        """EAGLE-3's fc over the aux states (EAGLE's input hidden is the target's state as it is)."""
        return self.linear("fc", target_states) if self.spec.kind == "eagle3" else target_states

    def layer_input(self, tokens, hidden, positions):
        """(layer input, residual) from the input tokens' embeddings and the hidden states."""
        import torch

        embeds = self.w["embed_tokens.weight"][tokens]
        if self.spec.kind == "mtp":  # MiMo: no token embedding at position 0; [hidden, embeds] into input_proj
            embeds = torch.where(positions[:, None] == 0, torch.zeros_like(embeds), embeds)
            token = self.norm("layers.0.token_layernorm.weight", embeds)
            x = self.linear(
                "layers.0.input_proj", torch.cat([self.norm("layers.0.hidden_layernorm.weight", hidden), token], -1)
            )
            return self.norm("layers.0.input_layernorm.weight", x), x  # then a Qwen2 decoder layer
        if self.spec.kind == "eagle":
            x = self.linear("fc", torch.cat([embeds, hidden], -1))
            return x, x  # layer 0's input_layernorm is an identity in vLLM's EAGLE
        normed = self.norm("layers.0.hidden_norm.weight", hidden)
        residual = normed if self.spec.norm_before_residual else hidden
        return torch.cat([self.norm("layers.0.input_layernorm.weight", embeds), normed], -1), residual

    def qkv(self, x, positions):
        n, s = x.shape[0], self.spec
        q = self.linear("layers.0.self_attn.q_proj", x).view(n, s.num_heads, s.head_dim)
        k = self.linear("layers.0.self_attn.k_proj", x).view(n, s.num_kv_heads, s.head_dim)
        v = self.linear("layers.0.self_attn.v_proj", x).view(n, s.num_kv_heads, s.head_dim)
        cos, sin = self.rotary(positions, self.dtype)
        return rope(q, cos, sin), rope(k, cos, sin), v

    def finish(self, attended, residual):
        """The layer after attention: (draft token ids in the target vocabulary, top-2 margins of
        their logits, the hidden state the next draft takes)."""
        import torch
        import torch.nn.functional as F

        residual = self.linear("layers.0.self_attn.o_proj", attended) + residual
        x = self.norm("layers.0.post_attention_layernorm.weight", residual)
        gate, up = self.linear("layers.0.mlp.gate_proj", x), self.linear("layers.0.mlp.up_proj", x)
        prenorm = self.linear("layers.0.mlp.down_proj", F.silu(gate) * up) + residual
        if self.spec.kind == "eagle":
            out, feedback = prenorm, prenorm  # no final norm in vLLM's EAGLE head
        elif self.spec.kind == "mtp":  # MiMo: the normed output feeds the logits and the next draft
            out = feedback = self.norm("layers.0.final_layernorm.weight", prenorm)
        else:
            out = self.norm("norm.weight", prenorm)
            feedback = out if self.spec.norm_output else prenorm
        logits = (out @ self.lm_head.T).float()
        if logits.shape[-1] == 1:  # a one-token draft vocabulary: nothing to tie with
            return (
                self.target_ids[torch.zeros(len(logits), dtype=torch.long)],
                torch.full((len(logits),), torch.inf),
                feedback,
            )
        top = torch.topk(logits, 2, dim=-1)
        return self.target_ids[top.indices[:, 0]], top.values[:, 0] - top.values[:, 1], feedback


def rotary(layer: dict[str, Any], device: str):
    """cos and sin at given positions from the layer config, as transformers' Llama computes them
    (the rope parameters and scaling types vLLM's get_rope reads from the same config)."""
    import torch
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    known = {k: v for k, v in layer.items() if k not in ("architectures", "auto_map", "model_type")}
    embedding = LlamaRotaryEmbedding(LlamaConfig(**known)).to(device)

    def at(positions, dtype):
        probe = torch.zeros(1, dtype=torch.float32, device=device)
        cos, sin = embedding(probe, positions[None, :])
        return cos[0].to(dtype)[:, None, :], sin[0].to(dtype)[:, None, :]

    return at


def rope(x, cos, sin):
    """Neox-style rotation of the last dimension's two halves."""
    import torch

    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


def chain_predictions(head: Head, tokens, target_states, d_max: int) -> tuple[np.ndarray, np.ndarray]:
    """(drafts, margins), each [d_max, len(tokens)]: drafts[k - 1, p] is the k-th draft of the chain
    whose first draft is taken at position p (it proposes tokens[p + 1 + k] once tokens p + 2 ..
    p + k were proposed right), margins its logits' top-2 margin; NO_DRAFT where the sequence
    holds no such chain."""
    import torch

    n = len(tokens)
    drafts = np.full((d_max, n), NO_DRAFT, dtype=np.int64)
    margins = np.full((d_max, n), np.inf)
    m = n - 1  # head positions 0 .. n - 2: position j takes token j + 1
    if m < 1:
        return drafts, margins
    s = head.spec
    groups = s.num_heads // s.num_kv_heads
    scale = s.head_dim**-0.5
    ids = torch.as_tensor(np.asarray(tokens[1:]), device=head.device)
    hidden = head.fuse(target_states[:m])
    accumulate = torch.promote_types(head.dtype, torch.float32)
    keys, values = [], []  # pass k's keys and values at every position q (rows < k - 1 unused)
    with torch.no_grad():
        for k in range(1, d_max + 1):
            rows = torch.arange(k - 1, m, device=head.device)  # query positions q
            if len(rows) == 0:
                break
            x, residual = head.layer_input(ids[rows], hidden[: len(rows)], rows)
            q, key, value = head.qkv(x, rows)
            # kept per query head (grouped-query attention's KV heads repeated), in float32 at least
            full_k = torch.zeros(m, s.num_heads, s.head_dim, dtype=accumulate, device=head.device)
            full_v = torch.zeros_like(full_k)
            full_k[rows] = key.repeat_interleave(groups, dim=1).to(accumulate)
            full_v[rows] = value.repeat_interleave(groups, dim=1).to(accumulate)
            keys.append(full_k)
            values.append(full_v)
            attended = torch.empty(len(rows), s.num_heads, s.head_dim, dtype=head.dtype, device=head.device)
            for start in range(0, len(rows), QUERY_BLOCK):
                block = slice(start, start + QUERY_BLOCK)
                attended[block] = chain_attention(q[block], rows[block], k, keys, values, scale).to(head.dtype)
            token, margin, feedback = head.finish(attended.reshape(len(rows), -1), residual)
            starts = (rows - (k - 1)).cpu().numpy()
            drafts[k - 1, starts] = token.cpu().numpy()
            margins[k - 1, starts] = margin.cpu().numpy()
            hidden = feedback  # row i: position q = k - 1 + i; the next pass's row i is q + 1
    return drafts, margins


def chain_attention(q, rows, k: int, keys: list, values: list, scale: float):
    """Pass k's attention for query positions `rows`: pass 1's keys at positions <= q - k + 1
    (the chain's start), and pass j's key at q - k + j for j = 2..k (a diagonal each)."""
    import torch

    q = q.to(keys[0].dtype)
    seen = int(rows[-1]) - k + 2  # pass 1's columns any of these rows sees
    first_k, first_v = keys[0][:seen], values[0][:seen]
    scores = torch.einsum("qhd,khd->hqk", q, first_k) * scale
    visible = torch.arange(seen, device=q.device)[None, :] <= (rows - (k - 1))[:, None]
    scores = scores.masked_fill(~visible[None], float("-inf"))
    chain = [(keys[j - 1][rows - k + j], values[j - 1][rows - k + j]) for j in range(2, k + 1)]
    own = [torch.einsum("qhd,qhd->hq", q, key)[..., None] * scale for key, _ in chain]
    weights = torch.softmax(torch.cat([scores, *own], -1), dim=-1)
    out = torch.einsum("hqk,khd->qhd", weights[..., :seen], first_v)
    for j, (_, value) in enumerate(chain):
        out = out + weights[..., seen + j].T[..., None] * value
    return out


def target_states(target_dir: Path, sequences: Sequence[Sequence[int]], spec: HeadSpec, dtype, device: str = "cpu"):
    """Per sequence, the target's states the head takes in: EAGLE-3 the inputs of its aux layers,
    concatenated in ascending order (vLLM's aux hidden states: transformers' hidden_states[i]);
    EAGLE the final normed state; MTP the last layer's output before the final norm. With the target's embedding and lm_head, for heads that hold none."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=dtype).to(device).eval()
    shared = {
        "embed_tokens.weight": model.get_input_embeddings().weight.detach(),
        "lm_head.weight": model.get_output_embeddings().weight.detach(),
    }
    states = []
    captured: dict[str, Any] = {}
    # MiMo's MTP layer takes the last layer's output before the final norm (vLLM's MiMoModel returns it
    # so); transformers' last hidden state is after it
    hook = model.model.norm.register_forward_hook(lambda _m, args, _out: captured.__setitem__("pre_norm", args[0]))
    try:
        with torch.no_grad():
            for seq in sequences:
                out = model(input_ids=torch.as_tensor([list(seq)], device=device), output_hidden_states=True)
                if spec.kind == "eagle3":
                    states.append(torch.cat([out.hidden_states[i][0] for i in spec.aux_layers], -1))
                elif spec.kind == "mtp":
                    states.append(captured["pre_norm"][0])
                else:
                    states.append(out.hidden_states[-1][0])
    finally:
        hook.remove()
    return states, shared


def compute_device() -> str:
    """Where the replay computes: the GPU where torch sees one (vLLM's engine is closed by then), else the CPU."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def head_predictions(
    target_dir: Path, head_dir: Path, kind: str, sequences: Sequence[Sequence[int]], d_max: int, dtype: str
) -> list[tuple[np.ndarray, np.ndarray]]:
    """chain_predictions for every sequence, the target's states computed once per sequence."""
    import torch

    torch_dtype = getattr(torch, dtype)
    device = compute_device()
    if kind == "mtp":
        spec = read_mtp_spec(target_dir)
    else:
        layers = read_config(target_dir, "target.model")
        spec = read_spec(head_dir, kind, (layers.get("text_config") or layers)["num_hidden_layers"])
    states, shared = target_states(target_dir, sequences, spec, torch_dtype, device)
    weights = mtp_weights(target_dir, shared) if kind == "mtp" else head_weights(head_dir, shared)
    head = Head(spec, weights, torch_dtype, device)
    return [chain_predictions(head, seq, state, d_max) for seq, state in zip(sequences, states)]
