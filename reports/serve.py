"""serve.json's content (its format: speclens/file_formats/serve_file.py): the ranking as what to deploy. For
each domain and batch size the winner with the exact vLLM `--speculative-config` it was measured with, and for each mechanism a
`num_speculative_tokens_per_batch_size` schedule (vLLM's dynamic speculative decoding: inclusive
batch-size ranges covering 1 … engine.max_num_seqs, each with the D that mechanism measured best
there; 0 where plain decoding beat every D of it).

Ties (equal speedups, or ranges over repeats that overlap) go to the smaller D, plain decoding
counting as D = 0: where the data cannot tell two settings apart, the cheaper one is served.

Where the runs measured length buckets (summary.json `by_length`), each plan also holds `by_length`:
per length bucket, the same winners, schedules and schedule configs decided from that length's own
figures (reports/speedup_ranking.py `length_ranking_rows`), the contexts it serves (`context_range`: those
nearer to it than to any other measured length, ties to the shorter; speclens/gpu_model/whatif.py) and the
context extension its figures were measured under, where the run had one (at every length: it rescales
every position, within the target's own window too).
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from reports.runs import RunView, template_label
from reports.speedup_ranking import has_lengths, length_ranking_rows
from speclens.file_formats.serve_file import headline_plans, is_measured_plan, plan_sources
from speclens.gpu_model.whatif import length_ranges
from speclens.text import markdown_safe


def _key(row: Any) -> int:
    return 0 if pd.isna(row.d) else int(row.d)


def _tied(a: Any, b: Any) -> bool:
    """Whether two ranking rows cannot be told apart: the same speedup, or overlapping ranges
    (rows without ranges, e.g. per length, tie on equal speedups only)."""
    if a.speedup == b.speedup:
        return True
    a_lo, a_hi, b_lo, b_hi = (getattr(row, key, None) for row in (a, b) for key in ("speedup_lo", "speedup_hi"))
    return not any(pd.isna(v) for v in (a_lo, a_hi, b_lo, b_hi)) and a_lo <= b_hi and b_lo <= a_hi


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
    return batch_schedule(ranking[ranking.domain == "all"], drafter, max_num_seqs)


def batch_schedule(rows: pd.DataFrame, drafter: str, max_num_seqs: int) -> list[list[int]]:
    """The schedule of `schedule` from rows of one group of prompts (all of them, or one length)."""
    picks = []
    for b, group in rows.groupby("batch_size", sort=True):
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


def serve_plan(ranking: pd.DataFrame, runs: list[RunView], lengths: pd.DataFrame | None = None) -> dict[str, Any]:
    """serve.json's content: per mode (sampling temperature, chat_template_kwargs and engine
    setting), winners, each mechanism's schedule and the speculative config that serves it (null
    where the mechanism never pays), and with length buckets the same per length (`lengths`: the
    per-length ranking, computed from `runs` where not given). One mode: that plan with its
    `temperature`, `chat_template_kwargs`, `setting` and the `kv_cache_dtype` to serve with (vLLM's
    --kv-cache-dtype); several: `{"by_temperature": [plan, ...]}`, one plan per mode."""
    if lengths is None:
        lengths = length_ranking_rows(runs) if has_lengths(runs) else pd.DataFrame()
    by_path = {str(run.path): run for run in runs}
    plans = []
    for (t, template, setting), group in ranking.groupby(["temperature", "chat_template_kwargs", "setting"], sort=True):
        one = next((by_path[p] for p in group.run if p in by_path), None)
        kwargs = one.get("config.chat_template_kwargs") if one else None
        plan = _plan(group, runs)
        if not lengths.empty:
            mode = lengths[
                (lengths.temperature == t) & (lengths.chat_template_kwargs == template) & (lengths.setting == setting)
            ]
            if not mode.empty:
                plan["by_length"] = length_plans(mode, runs)
        plans.append(
            plan
            | {
                "temperature": float(t),
                "chat_template_kwargs": kwargs or {},
                "setting": setting,
                "kv_cache_dtype": one.get("config.engine.kv_cache_dtype") if one else "auto",
                "provenance": plan_provenance([by_path[p] for p in dict.fromkeys(group.run) if p in by_path]),
            }
        )
    # measured plans first: a reader that takes the first plan of a mode takes a measured one
    plans.sort(key=lambda one: not is_measured_plan(one))
    return plans[0] if len(plans) == 1 else {"by_temperature": plans}


def plan_provenance(runs: list[RunView]) -> list[dict[str, Any]]:
    """What the figures of one plan are (speclens/provenance.py), each distinct record once: one
    where every run agrees, measured or not."""
    distinct = {json.dumps(run.provenance.to_dict(), sort_keys=True): run.provenance.to_dict() for run in runs}
    return [distinct[key] for key in sorted(distinct)]


def _configs(runs: list[RunView]) -> dict[str, dict[str, Any] | None]:
    """Each run's exact speculative config, by its path."""
    return {str(run.path): run.stamp.get("speculative_config") for run in runs}


def _max_num_seqs(runs: list[RunView]) -> int:
    return max(int((run.stamp.get("config") or {}).get("engine", {}).get("max_num_seqs") or 1) for run in runs)


def _schedules(rows: pd.DataFrame, runs: list[RunView], max_num_seqs: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per mechanism measured in `rows` (one group of prompts), its schedule and the speculative
    config that serves it (None where it never pays or no run holds its config)."""
    configs = _configs(runs)
    schedules, schedule_configs = {}, {}
    # Schedules are built from fixed-D runs; a run of a schedule is ranked (and may win) as it is.
    for drafter in sorted(d for d in set(rows.drafter) - {"none"} if not d.endswith("(schedule)")):
        plan = batch_schedule(rows, drafter, max_num_seqs)
        if not plan:
            continue
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
    return schedules, schedule_configs


def _plan(ranking: pd.DataFrame, runs: list[RunView]) -> dict[str, Any]:
    max_num_seqs = _max_num_seqs(runs)
    schedules, schedule_configs = _schedules(ranking[ranking.domain == "all"], runs, max_num_seqs)
    return {
        "winners": winners(ranking, _configs(runs)),
        "schedules": schedules,
        "schedule_configs": schedule_configs,
        "max_num_seqs": max_num_seqs,
    }


def _context_limit(runs: list[RunView], longest: int) -> int:
    """The longest context the plans serve: the engines' max_model_len, at least the longest length."""
    limits = [run.summary.context_window.max_model_len for run in runs if run.summary.context_window is not None]
    return max([longest, *limits])


def length_plans(lengths: pd.DataFrame, runs: list[RunView]) -> list[dict[str, Any]]:
    """Per length bucket of one mode, shortest first: its winners per B and each mechanism's
    `num_speculative_tokens_per_batch_size` schedule, decided from that length's own figures."""
    configs, max_num_seqs = _configs(runs), _max_num_seqs(runs)
    buckets = sorted(int(t) for t in lengths.input_tokens.dropna().unique())
    ranges = length_ranges(buckets, _context_limit(runs, buckets[-1]))
    out = []
    for tokens, context_range in zip(buckets, ranges):
        rows = lengths[lengths.input_tokens == tokens]
        extension = next((e for e in rows.context_extension if isinstance(e, str)), None)
        schedules, schedule_configs = _schedules(rows, runs, max_num_seqs)
        out.append(
            {
                "length": str(rows.length.iloc[0]),
                "input_tokens": tokens,
                "context_range": context_range,
                "context_extension": extension,
                "winners": length_winners(rows, configs),
                "schedules": schedules,
                "schedule_configs": schedule_configs,
            }
        )
    return out


def length_winners(rows: pd.DataFrame, configs: dict[str, dict[str, Any] | None]) -> list[dict[str, Any]]:
    """Per B at one length, the winner by that length's own speedup and its speculative config."""
    out = []
    for b, group in rows.groupby("batch_size", sort=True):
        if not group.speedup.notna().any():
            continue
        best = _best(group)
        out.append(
            {
                "batch_size": int(b),
                "drafter": best.drafter,
                "d": None if pd.isna(best.d) else int(best.d),
                "speedup": float(best.speedup),
                "speedup_source": best.speedup_source,
                "al": None if pd.isna(best.al) else float(best.al),
                "tokens_per_step": None if pd.isna(best.tokens_per_step) else float(best.tokens_per_step),
                "context_extension": best.context_extension if isinstance(best.context_extension, str) else None,
                "speculative_config": None if best.drafter == "none" else configs.get(best.run),
            }
        )
    return out


def serve_markdown(plan: dict[str, Any]) -> list[str]:
    """The section of ranking.md (and the report) that says what to serve: the measured plans, and
    plans of fake or synthetic figures only where nothing was measured."""
    plans, left_out = headline_plans(plan)
    out = ["## What to serve", ""]
    if left_out:
        out += [left_out_note(left_out), ""]
    for one in plans:
        if len(plans) > 1:
            kwargs = template_label(one.get("chat_template_kwargs") or {})
            setting = one.get("setting")
            out += [
                f"At temperature {one['temperature']:g}"
                + (f", chat_template_kwargs {kwargs}" if kwargs else "")
                + (f", {setting}" if setting else "")
                + ":",
                "",
            ]
        out += _plan_markdown(one)
    return out


def left_out_note(left_out: list[dict[str, Any]]) -> str:
    """What the answer leaves out: plans whose figures were not measured, each named by its mode."""
    named = "; ".join(
        f"{mode_label(one) or 'the defaults'} ({', '.join(sorted(plan_sources(one)))})" for one in left_out
    )
    return (
        f"Only measured plans are shown: {len(left_out)} plan(s) of figures that were not measured are in "
        f"serve.json, never headlined beside measured ones: {named}."
    )


def mode_label(plan: dict[str, Any]) -> str:
    """`T=0.5, enable_thinking=false, runner=fake`: the temperature, chat_template_kwargs and setting
    of one plan."""
    kwargs = template_label(plan.get("chat_template_kwargs") or {})
    setting = plan.get("setting")
    return f"T={plan['temperature']:g}" + (f", {kwargs}" if kwargs else "") + (f", {setting}" if setting else "")


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
    out.append("")
    if plan.get("by_length"):
        out += _lengths_markdown(plan["by_length"])
    return out


def _extension_note(extension: str | None) -> str:
    return f" [measured under the context extension {extension}]" if extension else ""


def _lengths_markdown(buckets: list[dict[str, Any]]) -> list[str]:
    out = [
        "Per context length: the winner at each batch size from that length's own figures, and each "
        "mechanism's `num_speculative_tokens_per_batch_size` schedule for a deployment whose contexts "
        "fall in the length's range (nearest measured length). In serve.json `by_length`.",
        "",
    ]
    for bucket in buckets:
        start, end = bucket["context_range"]
        out.append(
            f"- {bucket['length']} ({bucket['input_tokens']} input tokens; contexts {start}-{end})"
            + _extension_note(bucket["context_extension"])
            + ":"
        )
        for w in bucket["winners"]:
            what = "plain decoding" if w["drafter"] == "none" else f"{w['drafter']} d={w['d']}"
            out.append(f"  - B={w['batch_size']}: {what} (x{w['speedup']:.2f}, {w['speedup_source']})")
        for drafter, steps in bucket["schedules"].items():
            config = bucket["schedule_configs"].get(drafter)
            out.append(
                f"  - {drafter} schedule {steps}: " + ("never pays here" if config is None else f"`{_json(config)}`")
            )
    return out + [""]


def _json(value: Any) -> str:
    return json.dumps(value, separators=(", ", ": "))
