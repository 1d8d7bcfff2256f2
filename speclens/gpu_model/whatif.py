"""Predicted speedup at operating points: measured acceptance (hardware-independent under greedy
decoding) combined with the step-cost model's T_verif and T_draft for a GPU.

    speedup = T_verif(B) · tokens_per_step / (T_verif(B·(1+D)) + T_draft(B, D))

with tokens_per_step = 1 + s·(AL − 1), s the share of target passes that verify a draft
(`draft_share`, measured with the passes tokens per step counts, the prefill's included, so at the
measured D this is the run's tokens per step: a lookup drafter on Model Runner V1 proposes nothing
where it finds no match; model drafters and V2, which always proposes D, draft on every decode
step; given acceptance without a share: 1). A drafted step costs
T_verif(B·(1+D)) + T_draft(B, D); a step that drafts nothing costs a plain step T_verif(B) on V1
(`undrafted="plain"`), with the K=0 tax where `calibrate=` measured it (Efficiency.k0_tax_ms,
k0_tax_us_per_request: speculation switched on costs a step that drafts nothing; 0 on a GPU of the
table), or a full verify on V2 (`undrafted="verify"`: its D padded proposals are
verified and rejected), plus the lookup, which runs every step. So where the verify costs at
least a plain step, no speedup exceeds its tokens per step. The share is taken as the same at
every D (whether a lookup finds a match does not depend on how far it drafts). `best` takes, per B and context length, the fastest (drafter, D) with plain
decoding among them (D = 0, speedup 1); ties go to the smaller D. A point whose weights and KV
cache do not fit the GPU's memory is kept with `fits: false` and left out of `best`.

Acceptance measured per length bucket (long-context runs) is used by length: a point at context
length L takes the AL measured at the bucket nearest L (`nearest_length`) and names it in
`al_measured_at`; otherwise one AL serves every context length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from speclens.errors import ConfigError
from speclens.gpu_model.draft_cost import draft_ms
from speclens.gpu_model.model_shape import ModelShape
from speclens.gpu_model.step_cost import Hardware, memory_needed_gb, verify_step

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_BATCH_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
MEMORY_HEADROOM = 0.9  # the share of GPU memory weights and KV cache may take (vLLM's default utilisation)


def check_fits(hw: Hardware, memory_gb: float, batch_size: int, context: int) -> None:
    """Refuse a prediction for a GPU the target's smallest point (`memory_gb` a GPU at this B and
    context) does not fit."""
    if memory_gb > MEMORY_HEADROOM * hw.gpu.memory_gb:
        raise ConfigError(
            f"nothing fits {hw.gpu.name}: the target needs {memory_gb:.3g} GB a GPU at its smallest point "
            f"(B={batch_size}, context {context}), over {MEMORY_HEADROOM:.0%} of "
            f"{hw.gpu.memory_gb:.3g} GB; give a larger tp= or smaller weights= / expert_weights=."
        )


def nearest_length(lengths: list[int], context: int) -> int:
    """The measured length bucket whose acceptance stands for `context`: the nearest in tokens;
    of two equally near, the shorter (a fixed rule, so a tie never depends on the order given)."""
    return min(lengths, key=lambda length: (abs(length - context), length))


def length_ranges(lengths: list[int], limit: int) -> list[list[int]]:
    """Per measured length (ascending), the contexts [start, end] `nearest_length` gives it, from
    1 to `limit` (inclusive)."""
    ordered = sorted(lengths)
    ends = [(a + b) // 2 for a, b in zip(ordered, ordered[1:])] + [max(limit, ordered[-1])]
    starts = [1] + [end + 1 for end in ends[:-1]]
    return [[start, end] for start, end in zip(starts, ends)]


def undrafted_step(model_runner: str | None) -> str:
    """What a step without a draft costs on a model runner: a full verify on V2 (it always proposes
    D and rejects the padding), else a plain step (V1 proposes nothing; unknown runners as V1)."""
    return "verify" if model_runner == "v2" else "plain"


@dataclass(frozen=True)
class Drafting:
    """One drafter's acceptance and shapes: AL by D, and its draft's shape (None: none needed).
    `al_by_length`: where acceptance was measured per length bucket, AL by D at each bucket's
    input tokens (with its label in `length_labels`); a point then takes the nearest bucket's."""

    drafter: str
    al_by_d: dict[int, float]
    draft: ModelShape | None = None
    al_by_length: dict[int, dict[int, float]] | None = None
    length_labels: dict[int, str] | None = None
    # The share of target passes that verify a draft, and per length bucket where measured per length.
    draft_share: float = 1.0
    share_by_length: dict[int, float] | None = None
    # What a step that drafts nothing costs: "plain" (Model Runner V1) or "verify" (V2).
    undrafted: str = "plain"

    def measured_at(self, context: int) -> int | None:
        """The length bucket whose acceptance a point at `context` takes (None: one for all)."""
        return nearest_length(list(self.al_by_length), context) if self.al_by_length else None

    def al(self, d: int, context: int) -> float:
        if d == 0:
            return 1.0
        length = self.measured_at(context)
        return self.al_by_d[d] if length is None else self.al_by_length[length][d]

    def share(self, context: int) -> float:
        """The share of passes that draft at `context` (the nearest bucket's, where measured per length)."""
        length = self.measured_at(context)
        if length is None or not self.share_by_length or length not in self.share_by_length:
            return self.draft_share
        return self.share_by_length[length]


def k0_tax_ms(hw: Hardware, batch: int) -> float:
    """What a V1 step that drafts nothing costs beyond a plain step (Efficiency's k0_tax fields)."""
    return hw.eff.k0_tax_ms + hw.eff.k0_tax_us_per_request * batch / 1e3


def point(drafting: Drafting, d: int, batch: int, context: int, target: ModelShape, hw: Hardware) -> dict[str, Any]:
    plain = verify_step(target, batch, 0, context, hw.plain_against(drafting.drafter) if d else hw)
    verify = verify_step(target, batch, d, context, hw)
    drafting_ms = draft_ms(drafting.drafter, d, batch, context, target, drafting.draft, hw.drafting(drafting.drafter))
    al = drafting.al(d, context)
    share = drafting.share(context) if d else 1.0
    tokens_per_step = 1.0 + share * (al - 1.0)
    # a step that drafts nothing is still a speculating engine's step (overlapped as its drafter's
    # are): on V1 a plain step with the K=0 tax (0 unless calibrate= measured it), on V2 a full verify
    if drafting.undrafted == "plain":
        undrafted_ms = verify_step(target, batch, 0, context, hw).total_ms + k0_tax_ms(hw, batch)
    else:
        undrafted_ms = verify.total_ms
    undrafted_ms += drafting_ms
    step = share * (verify.total_ms + drafting_ms) + (1.0 - share) * undrafted_ms
    bound = "draft" if drafting_ms > max(verify.parts().values()) else verify.bound()
    memory = memory_needed_gb(target, batch, context, d, hw)
    measured_at = drafting.measured_at(context)
    return {
        "drafter": drafting.drafter,
        "d": d,
        "batch_size": batch,
        "context_len": context,
        "al": al,
        # the length bucket whose measured acceptance gave `al` (only where acceptance has lengths)
        **({} if measured_at is None else {"al_measured_at": drafting.length_labels[measured_at]}),
        "draft_share": share,
        "tokens_per_step": tokens_per_step,
        "t_plain_ms": plain.total_ms,
        "t_verify_ms": verify.total_ms,
        "t_draft_ms": drafting_ms,
        # the mean step: drafted steps and those that drafted nothing, in their shares
        "t_step_ms": step,
        "speedup": plain.total_ms * tokens_per_step / step,
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
            plain = {"batch_size": key[0], "context_len": key[1], "drafter": "none", "d": 0, "speedup": 1.0}
            # the acceptance that made plain decoding win, where it was measured per length
            out.append(plain | ({"al_measured_at": top["al_measured_at"]} if "al_measured_at" in top else {}))
        else:
            keys = (
                "batch_size",
                "context_len",
                "drafter",
                "d",
                "speedup",
                "speedup_interval",
                "speedup_interval_derived_on",
                "bound",
                "al_measured_at",
            )
            out.append({k: top[k] for k in keys if k in top})
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


def best_label(chosen: dict[str, Any] | None) -> str:
    """A best entry as tables show it: "ngram d=3", "plain" (no drafting wins), "-" (none)."""
    if chosen is None:
        return "-"
    return "plain" if chosen["drafter"] == "none" else f"{chosen['drafter']} d={chosen['d']}"
