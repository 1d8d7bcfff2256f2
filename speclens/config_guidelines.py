"""The draft-length guidelines computed from the target's (and the draft's) config.json.

- G = query heads per KV head (grouped-query attention). MLA (DeepSeek-V2/V3, Kimi-K2: a
  kv_lora_rank) caches one latent that every query head reads, so G is the number of query heads,
  as the step-cost model takes it (speclens/gpu_model/model_shape.py).
- Guideline 2: start the D sweep at D = 128/G − 1, where verifying B·(1+D) tokens fills
  one 128-row attention tile per KV head (rounded down when G does not divide 128).
- Guideline 3: prefer tile-aligned D, those with G·(1+D) a multiple of 128.
- Guideline 4: ρ = L_draft / L_target (layers); in low-latency serving (B = 1, verification
  about as cheap as one plain step) the speedup is about AL / (1 + ρ·D), so a draft length D
  only pays when AL > 1 + ρ·D.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from speclens.config import VLLM_MAX_SPEC_LEN
from speclens.errors import ConfigError
from speclens.model_facts import text_config

TILE_ROWS = 128


def is_mla(config: dict[str, Any]) -> bool:
    return bool(text_config(config).get("kv_lora_rank"))


def query_heads_per_kv_head(config: dict[str, Any]) -> int:
    """G from a config.json; multi-head attention (no num_key_value_heads) is G = 1, MLA is G =
    the query heads (one latent for all; its num_key_value_heads counts the heads it expands to)."""
    text = text_config(config)
    heads = text.get("num_attention_heads")
    if not heads:
        raise ConfigError("the target's config.json has no num_attention_heads; G cannot be computed.")
    kv_heads = 1 if is_mla(config) else text.get("num_key_value_heads") or heads
    if heads % kv_heads:
        raise ConfigError(f"num_attention_heads={heads} is not a multiple of num_key_value_heads={kv_heads}.")
    return heads // kv_heads


def starting_draft_length(g: int) -> int | None:
    """Guideline 2: D = 128/G − 1, rounded down; None where it is below 1 (G > 64: MLA's latent)."""
    d = TILE_ROWS // g - 1
    return d if d >= 1 else None


def tile_aligned_draft_lengths(g: int, max_d: int = VLLM_MAX_SPEC_LEN) -> list[int]:
    """Guideline 3: every D in 1..max_d with G·(1+D) a multiple of 128."""
    step = TILE_ROWS // math.gcd(g, TILE_ROWS)  # (1 + D) must be a multiple of this
    return [k * step - 1 for k in range(1, max_d // step + 2) if 1 <= k * step - 1 <= max_d]


def layer_ratio(draft_config: dict[str, Any], target_config: dict[str, Any]) -> float:
    """Guideline 4's ρ = L_draft / L_target."""
    draft_layers = text_config(draft_config).get("num_hidden_layers")
    target_layers = text_config(target_config).get("num_hidden_layers")
    if not draft_layers or not target_layers:
        raise ConfigError(
            "num_hidden_layers is missing from the draft's or the target's config.json; ρ cannot be computed."
        )
    return draft_layers / target_layers


def low_latency_speedup(al: float, rho: float, d: int) -> float:
    """Guideline 4: AL / (1 + ρ·D)."""
    return al / (1.0 + rho * d)


@dataclass(frozen=True)
class Guidelines:
    g: int
    starting_d: int | None
    tile_aligned: list[int]
    rho: float | None
    target_layers: int | None
    mla: bool = False

    @classmethod
    def for_configs(cls, target_config: dict[str, Any], draft_config: dict[str, Any] | None = None) -> "Guidelines":
        g = query_heads_per_kv_head(target_config)
        rho = layer_ratio(draft_config, target_config) if draft_config is not None else None
        return cls(
            g,
            starting_draft_length(g),
            tile_aligned_draft_lengths(g),
            rho,
            text_config(target_config).get("num_hidden_layers"),
            is_mla(target_config),
        )

    def lines(self) -> list[str]:
        exact = TILE_ROWS / self.g - 1
        shown = ", ".join(str(d) for d in self.tile_aligned[:8]) + (" …" if len(self.tile_aligned) > 8 else "")
        latent = " (MLA: every query head reads the one cached latent)" if self.mla else ""
        out = [f"G (query heads per KV head) = {self.g}{latent}"]
        if self.starting_d is None:
            out.append(
                f"guideline 2: does not apply: 128/G - 1 = {exact:.2f} < 1, so not one draft token's {self.g} query "
                "rows fit in the 128-row attention tile the verified token starts; size D by AL (guideline 4) and by a "
                "GPU's step costs (gpu=<name>)"
            )
        else:
            out.append(
                f"guideline 2: start the D sweep at D = 128/G - 1 = {self.starting_d}"
                + ("" if exact == self.starting_d else f" (128/{self.g} - 1 = {exact:.2f}, rounded down)")
            )
        if self.g % TILE_ROWS == 0:
            out.append(
                "guideline 3: does not apply: G*(1+D) is a multiple of 128 for every D, so alignment prefers none"
            )
        else:
            out.append(
                f"guideline 3: tile-aligned D (G*(1+D) a multiple of 128, D <= {VLLM_MAX_SPEC_LEN}): {shown or 'none'}"
            )
        if self.rho is None:
            one_layer = (
                f"; a one-layer head (EAGLE-style) has rho = 1/{self.target_layers}" if self.target_layers else ""
            )
            out.append(f"guideline 4: give drafter.model=<path> for rho = L_draft / L_target{one_layer}")
        else:
            out.append(
                f"guideline 4: rho = L_draft / L_target = {self.rho:.3f}; low-latency speedup ~ AL / (1 + rho*D)"
            )
            aligned = set(self.tile_aligned[:2]) if self.g % TILE_ROWS else set()
            for d in sorted({1, 3, 7, self.starting_d or 1} | aligned):
                out.append(
                    f"  D={d:<3d} pays only when AL > {1 + self.rho * d:.2f};"
                    f" at most x{low_latency_speedup(1 + d, self.rho, d):.2f} (every draft accepted)"
                )
        return out
