"""What the step-cost model reads from a config.json: the shapes of one decoder's matrices, its
attention (GQA or MLA) and its experts (dense or mixture-of-experts), in one place.

Field names follow Hugging Face's configs: Llama/Qwen/Mistral (dense, GQA), Mixtral and GPT-OSS
(num_local_experts), Qwen-MoE (num_experts, moe_intermediate_size, shared experts), DeepSeek-V2/V3
(n_routed_experts, n_shared_experts, first_k_dense_replace, MLA's kv_lora_rank), Llama-4 (MoE every
interleave_moe_layer_step-th layer, with a shared expert; the other layers' MLP intermediate_size_mlp
wide; its chunked-attention layers). Sliding-window layers (layer_types, as GPT-OSS and Gemma name
them) read at most sliding_window cached tokens. Experts GPT-OSS stores in MXFP4
(quantization_config) are read at that width.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from speclens.errors import ConfigError
from speclens.model_facts import text_config

REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


@dataclass(frozen=True)
class ModelShape:
    layers: int
    hidden: int
    heads: int
    kv_heads: int  # GQA's KV heads; MLA: 1 (one latent shared by every head)
    head_dim: int  # GQA: per head; MLA: the latent's width read per token (kv_lora_rank + rope dims)
    vocab: int
    tied_embeddings: bool
    intermediate: int  # the dense MLP's width (gated: three matrices)
    experts: int = 0  # routed experts per MoE layer (0: dense)
    experts_per_token: int = 0
    expert_intermediate: int = 0
    shared_intermediate: int = 0  # the shared experts' width together, in every MoE layer
    dense_layers: int = 0  # layers with the dense MLP in a MoE model (DeepSeek's first_k_dense_replace)
    mla: bool = False
    attention_params: int = 0  # per layer
    extra_params: int = 0  # read once per pass beside the layers (an EAGLE-3 head's fusion layer)
    qkv_width: int = 0  # the outputs of the attention projections that read the hidden state (GQA: Q, K, V)
    sliding_layers: int = 0  # layers whose attention reads at most `sliding_window` cached tokens
    sliding_window: int = 0
    expert_weights: str | None = None  # the experts' stored format where the checkpoint sets it apart (mxfp4, nvfp4)

    @property
    def g(self) -> int:
        """Query heads per KV head (MLA: every head reads the one latent)."""
        return self.heads // self.kv_heads

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.experts else 0

    @property
    def expert_params(self) -> int:
        return 3 * self.hidden * self.expert_intermediate

    def dense_params(self) -> int:
        """Parameters every token uses: attention, the dense MLPs, shared experts and routers, the LM head."""
        mlp = 3 * self.hidden * self.intermediate * (self.layers - self.moe_layers)
        moe_fixed = self.moe_layers * (3 * self.hidden * self.shared_intermediate + self.hidden * self.experts)
        return self.layers * self.attention_params + mlp + moe_fixed + self.vocab * self.hidden + self.extra_params

    def active_params(self) -> int:
        """Parameters one token multiplies by (its routed experts, not the others)."""
        return self.dense_params() + self.moe_layers * self.experts_per_token * self.expert_params

    def total_params(self) -> int:
        """Every weight held (an untied embedding table counted beside the LM head)."""
        embedding = 0 if self.tied_embeddings else self.vocab * self.hidden
        return self.dense_params() + self.moe_layers * self.experts * self.expert_params + embedding

    def kv_bytes_per_layer_token(self, kv_dtype_bytes: int = 2) -> int:
        """The KV cache one token holds in one layer (MLA: the latent, no separate V)."""
        per_layer = self.head_dim if self.mla else 2 * self.kv_heads * self.head_dim
        return per_layer * kv_dtype_bytes

    def attended_tokens(self, context: int) -> int:
        """Cached tokens one request's attention reads over every layer, at `context` tokens of context."""
        return (self.layers - self.sliding_layers) * context + self.sliding_layers * min(context, self.sliding_window)

    def one_layer(self, **fields: Any) -> ModelShape:
        """One full-attention layer of this shape (a drafter's), with `fields` replaced."""
        return replace(self, layers=1, dense_layers=0, sliding_layers=0, sliding_window=0, **fields)


def _int(text: dict[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = text.get(key, default)
    if value is None:
        raise ConfigError(f"{where}'s config.json has no {key}, which the step-cost model needs.")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{where}'s config.json: {key}={value!r} is not a whole number >= 0.")
    return value


def windowed(text: dict[str, Any], where: str) -> dict[str, int]:
    """The layers whose attention reads a window of the context, and the window: sliding-window
    layers `layer_types` names (GPT-OSS, Gemma), or Llama-4's chunked layers (every RoPE layer,
    `no_rope_layers`, over `attention_chunk_size` tokens; taken at a whole chunk, their most)."""
    layers = text["num_hidden_layers"]
    if text.get("attention_chunk_size") and "interleave_moe_layer_step" in text:
        flags = text.get("no_rope_layers") or [
            int((i + 1) % (text.get("no_rope_layer_interval") or 4) != 0) for i in range(layers)
        ]
        return {"sliding_layers": sum(1 for f in flags if f), "sliding_window": text["attention_chunk_size"]}
    kinds = text.get("layer_types") or []
    count = sum(1 for kind in kinds if kind == "sliding_attention")
    if not count:
        return {}
    if len(kinds) != layers:
        raise ConfigError(f"{where}'s config.json: layer_types names {len(kinds)} layers, not num_hidden_layers.")
    return {"sliding_layers": count, "sliding_window": _int(text, "sliding_window", where)}


def checkpoint_expert_format(config: dict[str, Any], where: str) -> str | None:
    """The experts' stored format where the checkpoint sets them apart: GPT-OSS's MXFP4
    (quantization_config; vLLM's MXFP4 method quantizes the experts only, attention stays bf16).
    NVFP4 checkpoints (NVIDIA Model Optimizer) quantize attention too, which weights= cannot say:
    give expert_weights=nvfp4 for their experts."""
    quant = text_config(config).get("quantization_config") or config.get("quantization_config") or {}
    if not isinstance(quant, dict):
        raise ConfigError(f"{where}'s config.json: quantization_config={quant!r} is not a JSON object.")
    return "mxfp4" if str(quant.get("quant_method", "")).lower() == "mxfp4" else None


def shape_of(config: dict[str, Any], where: str = "the target") -> ModelShape:
    """The shape of the language model a config.json describes, or a ConfigError naming the field."""
    text = text_config(config)
    for key in REQUIRED:
        _int(text, key, where)
    hidden, heads = text["hidden_size"], text["num_attention_heads"]
    if heads == 0 or hidden == 0:
        raise ConfigError(f"{where}'s config.json: hidden_size and num_attention_heads must be above 0.")
    experts = text.get("n_routed_experts") or text.get("num_local_experts") or text.get("num_experts") or 0
    experts_per_token = text.get("num_experts_per_tok") or text.get("experts_per_token") or 0
    if experts and not experts_per_token:
        raise ConfigError(f"{where}'s config.json has {experts} experts but no num_experts_per_tok.")
    intermediate = _int(text, "intermediate_size", where, default=4 * hidden)
    # Mixtral and GPT-OSS give the experts' width as intermediate_size (every layer is MoE there).
    expert_intermediate = (text.get("moe_intermediate_size") or intermediate) if experts else 0
    shared = (text.get("n_shared_experts") or 0) * expert_intermediate
    shared += text.get("shared_expert_intermediate_size") or 0
    dense_layers = (text.get("first_k_dense_replace") or 0) if experts else 0
    step = _int(text, "interleave_moe_layer_step", where, default=0)
    if experts and step:  # Llama-4: every step-th layer is MoE, with one shared expert as wide as one routed
        dense_layers = text["num_hidden_layers"] - text["num_hidden_layers"] // step
        shared += expert_intermediate
        intermediate = _int(text, "intermediate_size_mlp", where, default=intermediate)
    common = {
        "layers": text["num_hidden_layers"],
        "hidden": hidden,
        "heads": heads,
        "vocab": text["vocab_size"],
        "tied_embeddings": bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
        "intermediate": intermediate,
        "experts": experts,
        "experts_per_token": experts_per_token,
        "expert_intermediate": expert_intermediate,
        "shared_intermediate": shared,
        "dense_layers": dense_layers,
        "expert_weights": checkpoint_expert_format(config, where) if experts else None,
        **windowed(text, where),
    }
    kv_lora = text.get("kv_lora_rank")
    if kv_lora:  # MLA (DeepSeek-V2/V3, Kimi-K2)
        rope, nope = _int(text, "qk_rope_head_dim", where), _int(text, "qk_nope_head_dim", where)
        v_dim = _int(text, "v_head_dim", where)
        q_lora = text.get("q_lora_rank") or 0
        q_in = hidden * q_lora + q_lora * heads * (nope + rope) if q_lora else hidden * heads * (nope + rope)
        attention = q_in + hidden * (kv_lora + rope) + kv_lora * heads * (nope + v_dim) + heads * v_dim * hidden
        qkv = (q_lora or heads * (nope + rope)) + kv_lora + rope  # q (or its LoRA) and the latent with its rope
        return ModelShape(
            **common, kv_heads=1, head_dim=kv_lora + rope, mla=True, attention_params=attention, qkv_width=qkv
        )
    kv_heads = text.get("num_key_value_heads") or heads
    if heads % kv_heads:
        raise ConfigError(
            f"{where}'s config.json: num_attention_heads={heads} is not a multiple of num_key_value_heads={kv_heads}."
        )
    head_dim = text.get("head_dim") or hidden // heads
    attention = hidden * heads * head_dim * 2 + 2 * hidden * kv_heads * head_dim
    qkv = (heads + 2 * kv_heads) * head_dim
    return ModelShape(**common, kv_heads=kv_heads, head_dim=head_dim, attention_params=attention, qkv_width=qkv)
