"""Predicted speedup at operating points: measured acceptance (hardware-independent under greedy
decoding) combined with the step-cost model's T_verif and T_draft for a GPU.

    speedup = T_verif(B) · tokens_per_step / (T_verif(B·(1+D)) + T_draft(B, D))

with tokens_per_step = AL at D (one verification step yields the accepted drafts and one token of
the target's own). `best` takes, per B and context length, the fastest (drafter, D) with plain
decoding among them (D = 0, speedup 1); ties go to the smaller D. A point whose weights and KV
cache do not fit the GPU's memory is kept with `fits: false` and left out of `best`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from speclens.draft_cost import draft_ms
from speclens.model_shape import ModelShape
from speclens.step_cost import Hardware, memory_needed_gb, verify_step

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_BATCH_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
MEMORY_HEADROOM = 0.9  # the share of GPU memory weights and KV cache may take (vLLM's default utilisation)


@dataclass(frozen=True)
class Drafting:
    """One drafter's acceptance and shapes: AL by D, and its draft's shape (None: none needed)."""

    drafter: str
    al_by_d: dict[int, float]
    draft: ModelShape | None = None


def point(drafting: Drafting, d: int, batch: int, context: int, target: ModelShape, hw: Hardware) -> dict[str, Any]:
    plain = verify_step(target, batch, 0, context, hw)
    verify = verify_step(target, batch, d, context, hw)
    drafting_ms = draft_ms(drafting.drafter, d, batch, context, target, drafting.draft, hw)
    al = 1.0 if d == 0 else drafting.al_by_d[d]
    step = verify.total_ms + drafting_ms
    bound = "draft" if drafting_ms > max(verify.parts().values()) else verify.bound()
    memory = memory_needed_gb(target, batch, context, d, hw)
    return {
        "drafter": drafting.drafter,
        "d": d,
        "batch_size": batch,
        "context_len": context,
        "al": al,
        "tokens_per_step": al,
        "t_plain_ms": plain.total_ms,
        "t_verify_ms": verify.total_ms,
        "t_draft_ms": drafting_ms,
        "t_step_ms": step,
        "speedup": plain.total_ms * al / step,
        "bound": bound,
        "memory_gb": memory,
        "fits": memory <= MEMORY_HEADROOM * hw.gpu.memory_gb,
    }


def predict(
    draftings: list[Drafting],
    target: ModelShape,
    hw: Hardware,
    batch_sizes: list[int],
    context_lens: list[int],
    ds: list[int] | None = None,
) -> list[dict[str, Any]]:
    """Every (drafter, D, B, context length) point; `ds`: the draft lengths (default: every D
    each drafter has acceptance for)."""
    points = []
    for drafting in draftings:
        for d in ds if ds is not None else sorted(drafting.al_by_d):
            for context in context_lens:
                for batch in batch_sizes:
                    points.append(point(drafting, d, batch, context, target, hw))
    return points


def best(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (B, context length): the fastest fitting (drafter, D), plain decoding included."""
    out = []
    for key in sorted({(p["batch_size"], p["context_len"]) for p in points}):
        here = [p for p in points if (p["batch_size"], p["context_len"]) == key and p["fits"]]
        if not here:
            continue
        top = max(here, key=lambda p: (round(p["speedup"], 9), -p["d"]))
        if top["speedup"] <= 1.0:
            out.append({"batch_size": key[0], "context_len": key[1], "drafter": "none", "d": 0, "speedup": 1.0})
        else:
            out.append({k: top[k] for k in ("batch_size", "context_len", "drafter", "d", "speedup", "bound")})
    return out


def schedule(points: list[dict[str, Any]], drafter: str, context: int) -> list[list[int]]:
    """vLLM's num_speculative_tokens_per_batch_size for the drafter at one context length:
    [[start, end, k], …], each B's best D (0 where plain decoding wins) held up to the next B."""
    picks = []
    for b in sorted({p["batch_size"] for p in points}):
        mine = [p for p in points if p["drafter"] == drafter and p["batch_size"] == b and p["context_len"] == context]
        mine = [p for p in mine if p["fits"]]
        if not mine:
            continue
        top = max(mine, key=lambda p: (round(p["speedup"], 9), -p["d"]))
        picks.append((b, top["d"] if top["speedup"] > 1.0 else 0))
    out: list[list[int]] = []
    for i, (b, k) in enumerate(picks):
        start = 1 if i == 0 else b
        end = picks[i + 1][0] - 1 if i + 1 < len(picks) else b
        if out and out[-1][2] == k:
            out[-1][1] = end
        else:
            out.append([start, end, k])
    return out


def operating_rows(points: list[dict[str, Any]], tp: int) -> list[dict[str, Any]]:
    """Every fitting point as throughput and interactivity (output tokens/s per GPU, per user),
    with plain decoding's at each (B, context length): the axes of the Pareto front."""
    rows = []
    for p in points:
        if not p["fits"]:
            continue
        per_user = p["tokens_per_step"] * 1000.0 / p["t_step_ms"]
        rows.append(
            {
                "mechanism": p["drafter"],
                "d": p["d"],
                "batch_size": p["batch_size"],
                "context_len": p["context_len"],
                "tokens_per_s_per_request": per_user,
                "output_tokens_per_s": p["batch_size"] * per_user / tp,
            }
        )
    plain = {(p["batch_size"], p["context_len"]): p["t_plain_ms"] for p in points if p["fits"]}
    for (b, context), t_plain in sorted(plain.items()):
        per_user = 1000.0 / t_plain
        rows.append(
            {
                "mechanism": "plain",
                "d": None,
                "batch_size": b,
                "context_len": context,
                "tokens_per_s_per_request": per_user,
                "output_tokens_per_s": b * per_user / tp,
            }
        )
    return rows


def serve_at_slo(points: list[dict[str, Any]], tp: int, context: int, per_user: float) -> dict[str, Any] | None:
    """The most output tokens/s per GPU at `context` among the settings that give every user at
    least `per_user` tokens/s (None: no setting does); plain decoding counts."""
    meeting = [
        r
        for r in operating_rows(points, tp)
        if r["context_len"] == context and r["tokens_per_s_per_request"] >= per_user
    ]
    if not meeting:
        return None
    return max(meeting, key=lambda r: (round(r["output_tokens_per_s"], 6), r["mechanism"] == "plain"))


def mean_context(prompt_tokens: pd.Series, output_tokens: pd.Series) -> int:
    """A run's cached tokens per request for the model: the mean prompt plus half the mean output
    (the cache grows from the one to the sum over a turn)."""
    return max(1, int(round(float((prompt_tokens + output_tokens / 2).mean()))))
