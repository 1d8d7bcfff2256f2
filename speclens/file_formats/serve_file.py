"""serve.json, the file format (its reader, writer and the walks over its layout; reports/serve.py
decides what it holds from a ranking). One plan per mode (sampling temperature,
chat_template_kwargs and engine setting): a single mode is that plan itself, with its
`temperature`; several are `{"by_temperature": [plan, ...]}`. A plan holds `winners` (per domain
and batch size, the speculative config to serve), `schedules` (per mechanism, vLLM's
`num_speculative_tokens_per_batch_size`), `schedule_configs`, `max_num_seqs`, and where the runs
measured lengths `by_length` (the same per length bucket, with the contexts each serves)."""

from __future__ import annotations

import json
from dataclasses import field
from pathlib import Path
from typing import Any

from speclens.errors import CorruptRecord
from speclens.files import write_json_atomic
from speclens.provenance import Provenance
from speclens.schema import AL, Count, DraftLength, NonNegative, parse, record

SERVE_FILE = "serve.json"

# What every plan holds (a file whose plans lack one is not a serve.json speclens wrote).
PLAN_KEYS = ("winners", "schedules", "schedule_configs", "max_num_seqs")


def write_serve_file(plan: dict[str, Any], out_dir: Path) -> Path:
    """serve.json in `out_dir`, written whole or not at all."""
    path = out_dir / SERVE_FILE
    write_json_atomic(plan, path)
    return path


Schedule = list[list[int]]


@record
class Winner:
    """The speculative config to serve for one domain and batch size (null: plain decoding)."""

    domain: str
    batch_size: Count
    drafter: str
    d: DraftLength | None
    speedup: NonNegative
    # What the speedup is: measured, fake, predicted (corrected) from ..., ...
    speedup_source: str
    speculative_config: dict[str, Any] | None


@record
class LengthWinner:
    """The same for one length bucket and batch size, from that length's own figures."""

    batch_size: Count
    drafter: str
    d: DraftLength | None
    speedup: NonNegative
    speedup_source: str
    al: AL | None = None
    tokens_per_step: NonNegative | None = None
    context_extension: str | None = None
    speculative_config: dict[str, Any] | None = None


@record
class LengthPlan:
    """One length bucket's plan: the contexts it serves, its winners and each mechanism's schedule."""

    length: str
    input_tokens: Count
    context_range: list[Count]
    context_extension: str | None
    winners: list[LengthWinner]
    schedules: dict[str, Schedule]
    schedule_configs: dict[str, dict[str, Any] | None]


@record
class ServePlan:
    """One mode's plan (temperature, chat_template_kwargs, setting): its winners, each mechanism's
    `num_speculative_tokens_per_batch_size` schedule and the config that serves it, and what its
    figures are. Fields with defaults were added after the first serve.json files were written."""

    winners: list[Winner]
    schedules: dict[str, Schedule]
    schedule_configs: dict[str, dict[str, Any] | None]
    max_num_seqs: Count
    temperature: NonNegative = 0.0
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    setting: str = ""
    kv_cache_dtype: str = "auto"
    # Each distinct provenance of the runs the plan was ranked from (speclens/provenance.py).
    provenance: list[Provenance] | None = None
    by_length: list[LengthPlan] | None = None


@record
class ServePlans:
    """A serve.json of several modes: one plan each."""

    by_temperature: list[ServePlan]


def read_serve_file(path: Path) -> dict[str, Any]:
    """A serve.json's content, checked against ServePlan (one plan, or several under
    `by_temperature`); CorruptRecord naming the file, the field and the rule otherwise."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptRecord(f"{path} is unreadable ({exc})") from None
    check_serve_plan(data, path)
    return data


def check_serve_plan(data: Any, where: Path | str) -> None:
    """`data` as serve.json holds it, else a CorruptRecord naming `where`, the field and the rule."""
    if not isinstance(data, dict):
        raise CorruptRecord(
            f"{where} does not have the layout of a serve.json (a plan with {', '.join(PLAN_KEYS)}, "
            "or by_temperature: a list of them)"
        )
    parse(ServePlans if "by_temperature" in data else ServePlan, data, where, "serve.json")


def is_serve_plan(data: Any) -> bool:
    """Whether `data` has serve.json's layout (one plan, or several under `by_temperature`)."""
    try:
        check_serve_plan(data, "serve.json")
    except CorruptRecord:
        return False
    return True


def mode_plans(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """A serve.json's plans, one per mode, whichever layout it has."""
    return plan.get("by_temperature") or [plan]


def plan_sources(plan: dict[str, Any]) -> set[str]:
    """The sources of one plan's figures (its `provenance` records; none recorded: unknown)."""
    found = plan.get("provenance")
    if not isinstance(found, list) or not found:
        return {"unknown"}
    return {str(p.get("source")) if isinstance(p, dict) else "unknown" for p in found}


def is_measured_plan(plan: dict[str, Any]) -> bool:
    return plan_sources(plan) == {"measured"}


def headline_plans(plan: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A serve.json's plans to headline and those left out: the measured ones where any plan was
    measured (a fake or synthetic figure headlines only where nothing was measured), else all."""
    plans = mode_plans(plan)
    measured = [one for one in plans if is_measured_plan(one)]
    if not measured:
        return plans, []
    return measured, [one for one in plans if not is_measured_plan(one)]


def plan_at_temperature(plan: dict[str, Any], temperature: float) -> dict[str, Any] | None:
    """The plan ranked at `temperature` (None where a file of several modes has none there); a
    file of one mode is its plan, at whatever temperature it names."""
    if "by_temperature" not in plan:
        return plan
    return next((one for one in plan["by_temperature"] if one.get("temperature") == temperature), None)


def context_table(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The (B, context) -> D table of a serve.json (any mode layout): per mode, mechanism and length
    bucket, the contexts it serves and its `num_speculative_tokens_per_batch_size`; [] without lengths."""
    rows = []
    for one in mode_plans(plan):
        for bucket in one.get("by_length") or []:
            for drafter, steps in bucket["schedules"].items():
                rows.append(
                    {
                        "drafter": drafter,
                        "temperature": one.get("temperature"),
                        "chat_template_kwargs": one.get("chat_template_kwargs") or {},
                        "setting": one.get("setting") or "",
                        "context_range": bucket["context_range"],
                        "length": bucket["length"],
                        "input_tokens": bucket["input_tokens"],
                        "context_extension": bucket["context_extension"],
                        "num_speculative_tokens_per_batch_size": steps,
                    }
                )
    return rows


def context_table_beside(out_dir: Path) -> list[dict[str, Any]]:
    """The (B, context) -> D table of the serve.json in `out_dir` ([] without one, one that is
    damaged, or one without lengths)."""
    try:
        return context_table(read_serve_file(out_dir / SERVE_FILE))
    except CorruptRecord:
        return []
