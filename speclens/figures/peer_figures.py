"""The figures other tools report for the same run, each by that tool's own formula over speclens's
records (`summary.json` → `peer_figures`), under the tool's own names: what a user holds speclens's
AL against. docs/definitions.md#peer-figures says where each formula is from.

- specdec_bench (NVIDIA Model-Optimizer `examples/specdec_bench`, its SpecBench/SPEED metric): per
  request, the tokens its streamed chunks carried over the number of chunks (every target pass that
  emitted a token: the prefill and undrafted steps too), the final EOS stripped (and an EOS-only last
  chunk dropped); `Average_AL` the mean over requests, `Category_AL` the mean over each category's.
  A request's turns pool into one. This is a request-weighted tokens per step, not an AL.
- vllm bench serve: `spec_decode_acceptance_length` = 1 + accepted / drafts from the server's
  counters: speclens's pooled AL.
- aiperf: `spec_decode_acceptance_length`, each request's (turn's) 1 + accepted / its verification
  steps, averaged over the requests that drafted; `spec_decode_token_weighted_acceptance_length`
  pooled; `speed_bench_report` per category pooled, `Overall` the mean of the categories.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from speclens.figures.metrics import TURN_KEY, last_steps
from speclens.schema import AL, record


@record
class SpecdecBench:
    Average_AL: AL  # noqa: N815 - the tool's own key
    Category_AL: dict[str, AL]  # noqa: N815


@record
class VllmBenchServe:
    spec_decode_acceptance_length: AL


@record
class Aiperf:
    spec_decode_acceptance_length: AL
    spec_decode_token_weighted_acceptance_length: AL
    # `aiperf speed-bench-report`: per category pooled, and Overall the mean of the categories
    speed_bench_report: dict[str, AL]


@record
class PeerFigures:
    specdec_bench: SpecdecBench | None
    vllm_bench_serve: VllmBenchServe | None
    aiperf: Aiperf | None


def last_chunk_tokens(steps: pd.DataFrame, requests: pd.DataFrame) -> pd.Series:
    """Per turn (TURN_KEY order of `requests`): the tokens its last target pass emitted. A drafted step
    whose accepted run reaches the output's end is the last pass (its kept tokens); else the last
    pass was an undrafted decode step or the prefill: one token."""
    out = pd.Series(1, index=pd.MultiIndex.from_frame(requests[TURN_KEY]), dtype="int64")
    if steps.empty:
        return out
    rows = last_steps(steps, requests)
    final = rows["kept"] <= rows["num_accepted"] + 1
    out.loc[pd.MultiIndex.from_frame(rows.loc[final, TURN_KEY])] = rows.loc[final, "kept"].to_numpy(dtype=np.int64)
    return out


def specdec_bench_requests(steps: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame | None:
    """specdec_bench's per-request figure (its `Request_AL`), by request id, with the category."""
    if requests.empty or requests["target_steps"].isna().any():
        return None
    turns = requests.set_index(TURN_KEY)
    if "finish_reason" in turns:
        eos = (turns["finish_reason"] == "stop").fillna(False).astype(bool)
    else:  # records from before finish reasons were kept: no EOS known to strip
        eos = pd.Series(False, index=turns.index)
    eos_only = eos & (last_chunk_tokens(steps, requests).reindex(turns.index) == 1)
    per_turn = pd.DataFrame(
        {
            "request_id": turns.index.get_level_values("request_id"),
            "category": turns["category"].to_numpy(),
            "tokens": (turns["output_tokens"] - eos.astype("int64")).to_numpy(dtype=np.int64),
            "chunks": (turns["target_steps"].astype("int64") - eos_only.astype("int64")).to_numpy(),
        }
    )
    per_request = per_turn.groupby("request_id").agg(
        category=("category", "first"), tokens=("tokens", "sum"), chunks=("chunks", "sum")
    )
    per_request = per_request[per_request["chunks"] > 0]
    if per_request.empty:
        return None
    per_request["al"] = per_request["tokens"] / per_request["chunks"]
    return per_request[["category", "al"]]


def specdec_bench(steps: pd.DataFrame, requests: pd.DataFrame) -> SpecdecBench | None:
    per_request = specdec_bench_requests(steps, requests)
    if per_request is None:
        return None
    categories = per_request.groupby("category")["al"].mean()
    return SpecdecBench(float(per_request["al"].mean()), {str(k): float(v) for k, v in categories.items()})


def drafted_turns(steps: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """Accepted tokens and verification steps per turn that drafted, with its category."""
    if not steps.empty:
        grouped = steps.groupby(TURN_KEY).agg(
            category=("category", "first"), accepted=("num_accepted", "sum"), drafts=("num_accepted", "size")
        )
        return grouped.reset_index()
    if "drafted_steps" not in requests or requests["drafted_steps"].isna().any():
        return pd.DataFrame(columns=TURN_KEY + ["category", "accepted", "drafts"])
    drafted = requests[requests["drafted_steps"] > 0]
    return pd.DataFrame(
        {
            **{c: drafted[c].to_numpy() for c in TURN_KEY + ["category"]},
            "accepted": drafted["num_accepted"].astype("int64").to_numpy(),
            "drafts": drafted["drafted_steps"].astype("int64").to_numpy(),
        }
    )


def aiperf(steps: pd.DataFrame, requests: pd.DataFrame) -> Aiperf | None:
    turns = drafted_turns(steps, requests)
    if turns.empty:
        return None
    per_turn = 1.0 + turns["accepted"] / turns["drafts"]
    pooled = turns.groupby("category")[["accepted", "drafts"]].sum()
    report = {str(k): float(1.0 + row.accepted / row.drafts) for k, row in pooled.iterrows()}
    report["Overall"] = float(np.mean(list(report.values())))
    weighted = 1.0 + turns["accepted"].sum() / turns["drafts"].sum()
    return Aiperf(float(per_turn.mean()), float(weighted), report)


def peer_figures(steps: pd.DataFrame, requests: pd.DataFrame) -> PeerFigures | None:
    """The peers' figures over these records (None where nothing drafted)."""
    turns = drafted_turns(steps, requests)
    if turns.empty:
        return None
    pooled = float(1.0 + turns["accepted"].sum() / turns["drafts"].sum())
    return PeerFigures(specdec_bench(steps, requests), VllmBenchServe(pooled), aiperf(steps, requests))


def _specdec(f: PeerFigures) -> float | None:
    return f.specdec_bench.Average_AL if f.specdec_bench else None


def _vllm(f: PeerFigures) -> float | None:
    return f.vllm_bench_serve.spec_decode_acceptance_length if f.vllm_bench_serve else None


def _aiperf(f: PeerFigures) -> float | None:
    return f.aiperf.spec_decode_acceptance_length if f.aiperf else None


# A peer export's tool (speclens/file_formats/peer_exports.py) -> its headline figure among the peer figures.
PEER_FORMULAS: dict[str, Callable[[PeerFigures], float | None]] = {
    "specdec_bench": _specdec,
    "vllm bench serve": _vllm,
    "aiperf": _aiperf,
}
