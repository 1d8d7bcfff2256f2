"""serve.json: the ranking as what to deploy. For each domain and batch size the winner with the
exact vLLM `--speculative-config` it was measured with, and for each mechanism a
`num_speculative_tokens_per_batch_size` schedule (vLLM's dynamic speculative decoding: inclusive
batch-size ranges covering 1 … engine.max_num_seqs, each with the D that mechanism measured best
there; 0 where plain decoding beat every D of it).

Ties (equal speedups, or ranges over repeats that overlap) go to the smaller D, plain decoding
counting as D = 0: where the data cannot tell two settings apart, the cheaper one is served.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from reports.runs import Run, template_label
from speclens.text import markdown_safe

SERVE_FILE = "serve.json"


def _key(row: Any) -> int:
    return 0 if pd.isna(row.d) else int(row.d)


def _tied(a: Any, b: Any) -> bool:
    """Whether two ranking rows cannot be told apart: the same speedup, or overlapping ranges."""
    if a.speedup == b.speedup:
        return True
    ranges = (a.speedup_lo, a.speedup_hi, b.speedup_lo, b.speedup_hi)
    return not any(pd.isna(v) for v in ranges) and a.speedup_lo <= b.speedup_hi and b.speedup_lo <= a.speedup_hi


def _best(rows: pd.DataFrame) -> Any:
    """The fastest row, or among those tied with it the one with the smallest D."""
    ranked = rows[rows.speedup.notna()].sort_values("speedup", ascending=False)
    top = next(ranked.itertuples())
    return min((r for r in ranked.itertuples() if _tied(r, top)), key=_key)


def winners(ranking: pd.DataFrame, configs: dict[str, dict[str, Any] | None]) -> list[dict[str, Any]]:
    """Per domain and B, the winner and its speculative config (null: serve plain decoding)."""
    out = []
    for (domain, b), group in ranking.groupby(["domain", "batch_size"], sort=True):
        if group.speedup.notna().any():
            best = _best(group)
            out.append(
                {
                    "domain": domain,
                    "batch_size": int(b),
                    "drafter": best.drafter,
                    "d": None if pd.isna(best.d) else int(best.d),
                    "speedup": float(best.speedup),
                    "speedup_source": best.speedup_source,
                    "speculative_config": None if best.drafter == "none" else configs.get(best.run),
                }
            )
    return out


def schedule(ranking: pd.DataFrame, drafter: str, max_num_seqs: int) -> list[list[int]]:
    """[[start, end, k], …] over 1 … max_num_seqs from the drafter's best D at each measured B
    (all prompts; 0 where plain decoding wins); each B's D holds up to the next measured B."""
    overall = ranking[ranking.domain == "all"]
    picks = []
    for b, group in overall.groupby("batch_size", sort=True):
        candidates = group[group.drafter.isin([drafter, "none"])]
        if (candidates.drafter == drafter).any():
            picks.append((int(b), _key(_best(candidates))))
    out = []
    for i, (b, k) in enumerate(picks):
        start = 1 if i == 0 else b
        end = picks[i + 1][0] - 1 if i + 1 < len(picks) else max_num_seqs
        if out and out[-1][2] == k:
            out[-1][1] = end  # the same D as the range before: one range
        else:
            out.append([start, end, k])
    return out


def serve_plan(ranking: pd.DataFrame, runs: list[Run]) -> dict[str, Any]:
    """serve.json's content: per mode (sampling temperature and chat_template_kwargs), winners, each
    mechanism's schedule and the speculative config that serves it (null where the mechanism never
    pays). One mode: that plan with its `temperature` and `chat_template_kwargs`; several:
    `{"by_temperature": [plan, ...]}`, one plan per mode."""
    by_path = {str(run.path): run for run in runs}
    plans = []
    for (t, _), group in ranking.groupby(["temperature", "chat_template_kwargs"], sort=True):
        kwargs = next((by_path[p].get("config.chat_template_kwargs") for p in group.run if p in by_path), None)
        plans.append(_plan(group, runs) | {"temperature": float(t), "chat_template_kwargs": kwargs or {}})
    return plans[0] if len(plans) == 1 else {"by_temperature": plans}


def _plan(ranking: pd.DataFrame, runs: list[Run]) -> dict[str, Any]:
    configs = {str(run.path): run.stamp.get("speculative_config") for run in runs}
    max_num_seqs = max(int((run.stamp.get("config") or {}).get("engine", {}).get("max_num_seqs") or 1) for run in runs)
    schedules, schedule_configs = {}, {}
    # Schedules are built from fixed-D runs; a run of a schedule is ranked (and may win) as it is.
    for drafter in sorted(d for d in set(ranking.drafter) - {"none"} if not d.endswith("(schedule)")):
        plan = schedule(ranking, drafter, max_num_seqs)
        schedules[drafter] = plan
        top_k = max(k for _, _, k in plan)
        base = next(
            (configs[str(run.path)] for run in runs if run.summary.mechanism == drafter and configs.get(str(run.path))),
            None,
        )
        schedule_configs[drafter] = (
            None
            if top_k == 0 or base is None
            else (base | {"num_speculative_tokens": top_k, "num_speculative_tokens_per_batch_size": plan})
        )
    return {
        "winners": winners(ranking, configs),
        "schedules": schedules,
        "schedule_configs": schedule_configs,
        "max_num_seqs": max_num_seqs,
    }


def serve_markdown(plan: dict[str, Any]) -> list[str]:
    """The section of ranking.md (and the report) that says what to serve."""
    plans = plan.get("by_temperature") or [plan]
    out = ["## What to serve", ""]
    for one in plans:
        if len(plans) > 1:
            kwargs = template_label(one.get("chat_template_kwargs") or {})
            out += [
                f"At temperature {one['temperature']:g}" + (f", chat_template_kwargs {kwargs}" if kwargs else "") + ":",
                "",
            ]
        out += _plan_markdown(one)
    return out


def _plan_markdown(plan: dict[str, Any]) -> list[str]:
    out = [
        "Per domain and batch size, the winner's exact `--speculative-config` (ties go to the smaller D; "
        "none: serve plain decoding). Per mechanism, the `num_speculative_tokens_per_batch_size` schedule "
        f"built from its best D at each measured batch size, over 1 … {plan['max_num_seqs']} "
        "(k = 0: plain decoding there). All in serve.json.",
        "",
    ]
    for w in plan["winners"]:
        config = "plain decoding" if w["speculative_config"] is None else f"`{_json(w['speculative_config'])}`"
        out.append(
            f"- {markdown_safe(w['domain'])}, B={w['batch_size']}: {w['drafter']}"
            + (f" d={w['d']}" if w["d"] is not None else "")
            + f" (x{w['speedup']:.2f}, {w['speedup_source']}): "
            + config
        )
    out.append("")
    for drafter, steps in plan["schedules"].items():
        config = plan["schedule_configs"].get(drafter)
        out.append(f"- {drafter} schedule {steps}: " + ("never pays here" if config is None else f"`{_json(config)}`"))
    return out + [""]


def _json(value: Any) -> str:
    return json.dumps(value, separators=(", ", ": "))
