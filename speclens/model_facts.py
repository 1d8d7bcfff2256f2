"""What the checks read from a checkpoint's config.json, in one place."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from speclens.options import dotted_get


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of a config.json: multimodal configs nest it as text_config,
    speculators-format heads (EAGLE-3 from vLLM's `speculators`) as transformer_layer_config."""
    return config.get("text_config") or config.get("transformer_layer_config") or config


@dataclass(frozen=True)
class ModelFacts:
    """The parts of a checkpoint's config.json that drafters and pre-engine checks read."""

    path: str
    architectures: tuple[str, ...]
    vocab_size: int | None
    hidden_size: int | None
    num_hidden_layers: int | None
    max_position_embeddings: int | None
    raw: dict[str, Any]

    @classmethod
    def from_config(cls, path: str, config: dict[str, Any]) -> "ModelFacts":
        text = text_config(config)
        return cls(
            path=path,
            architectures=tuple(config.get("architectures") or ()),
            vocab_size=text.get("vocab_size"),
            hidden_size=text.get("hidden_size"),
            num_hidden_layers=text.get("num_hidden_layers"),
            max_position_embeddings=text.get("max_position_embeddings"),
            raw=config,
        )

    @property
    def quantization(self) -> str | None:
        """Its weights' quantization as a short label (None: unquantized): compressed-tensors
        schemes as `w<weight bits>a<activation bits>` (`w8a8`; `w4a16` where activations stay
        unquantized), other methods by vLLM's `quant_method` name (`awq`, `gptq`, `fp8`, …)."""
        found = self.raw.get("quantization_config")
        if not isinstance(found, dict):
            return None
        method = str(found.get("quant_method") or "unknown")
        groups = found.get("config_groups")
        if method != "compressed-tensors" or not isinstance(groups, dict) or not groups:
            return method
        labels = set()
        for group in groups.values():
            group = group if isinstance(group, dict) else {}
            weights, acts = group.get("weights"), group.get("input_activations")
            weights, acts = (w if isinstance(w, dict) else {} for w in (weights, acts))
            kind = "fp" if weights.get("type") == "float" else ""
            labels.add(f"{kind}w{weights.get('num_bits', '?')}a{acts.get('num_bits', 16)}")
        return "+".join(sorted(labels))


# Where vLLM looks, in order, for the token that fills a parallel drafter's masked slots
# (vllm/v1/spec_decode/llm_base_proposer.py _init_parallel_drafting_params): a checkpoint that
# names none was not trained for parallel drafting, and vLLM refuses it.
MASK_TOKEN_KEYS = (
    "dflash_config.mask_token_id",
    "mask_token_id",
    "dspark_noise_token_id",
    "pard_token",
    "ptd_token_id",
)


def parallel_drafting_token(config: dict[str, Any]) -> int | None:
    """The mask token a checkpoint's config.json names for parallel drafting (None: none)."""
    for key in MASK_TOKEN_KEYS:
        token = dotted_get(config, key)
        if isinstance(token, int) and not isinstance(token, bool):
            return token
    return None
