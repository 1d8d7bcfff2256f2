"""A draft-length schedule over batch sizes, as vLLM 0.32's `num_speculative_tokens_per_batch_size`
takes it (dynamic speculative decoding): inclusive ranges [start, end, k] starting at 1, in order,
not overlapping; vLLM carries a range's k over any gap to the next one and past the last. Its
checks, and its reader for `drafter.schedule=`: a JSON file holding the schedule, or a serve.json
(its `schedules.<drafter>` of the plan ranked in the run's mode from figures of the run's identity:
a plan of fake figures never schedules a measured run, nor an FP8 cache's a run under the defaults)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speclens.errors import ConfigError, CorruptRecord
from speclens.file_formats.load_file import LoadServeFile
from speclens.file_formats.serve_file import PLAN_KEYS, is_serve_plan, mode_plans
from speclens.provenance import Provenance, differences, from_dict
from speclens.schema import parse

Schedule = list[list[int]]


def check_schedule(schedule: object, where: str) -> Schedule:
    """`schedule` as [[start, end, k], ...], or a ConfigError naming `where` and what is wrong."""
    if not isinstance(schedule, list) or not schedule:
        raise ConfigError(f"{where}: a schedule is a non-empty list of [start, end, k] batch-size ranges.")
    out, previous_end = [], 0
    for entry in schedule:
        if not (isinstance(entry, list) and len(entry) == 3 and all(isinstance(v, int) for v in entry)):
            raise ConfigError(f"{where}: {json.dumps(entry)} is not a [start, end, k] range of integers.")
        # JSON's true/false are ints to Python: a draft length of `true` is a mistake, not 1.
        if any(isinstance(v, bool) for v in entry):
            raise ConfigError(
                f"{where}: {json.dumps(entry)} holds a boolean; a range's start, end and k are "
                "integers (k = 0: plain decoding)."
            )
        start, end, k = entry
        if start <= previous_end or end < start or k < 0:
            raise ConfigError(
                f"{where}: {entry!r}: ranges must start at 1, run in order without overlapping, and have k >= 0."
            )
        if not out and start != 1:
            raise ConfigError(f"{where}: the first range must start at 1 (it starts at {start}).")
        out.append([start, end, k])
        previous_end = end
    return out


def k_at(schedule: Schedule, batch_size: int) -> int:
    """The draft length vLLM uses at `batch_size` requests in a step: the k of the last range
    starting at or below it (carried over gaps and past the last range)."""
    k = schedule[0][2]
    for start, _, range_k in schedule:
        if batch_size >= start:
            k = range_k
    return k


def read_schedule(path: str, drafter: str, key: str, own: Provenance, mode: Mode) -> Schedule:
    """The drafter's schedule from a JSON file holding the schedule itself, or from a serve.json:
    the plan of this run's mode (temperature, chat_template_kwargs) and identity (`own`: source,
    runner, engine, dtype, model runner, setting), else a ConfigError naming the plans it holds."""
    file = Path(path).expanduser()
    try:
        data = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{key}={path}: not a readable JSON file ({exc}).") from None
    if isinstance(data, dict) and "load_policy" in data:
        data = _load_policy_schedule(data, drafter, f"{key}={path}", own)
    elif isinstance(data, dict):
        if not is_serve_plan(data):
            raise ConfigError(
                f"{key}={path} is neither a schedule ([[start, end, k], ...]) nor a serve.json speclens wrote "
                f"(a plan with {', '.join(PLAN_KEYS)}, or by_temperature: a list of them)."
            )
        data = _plan_for(data, drafter, f"{key}={path}", own, mode)
    return check_schedule(data, f"{key}={path}")


@dataclass(frozen=True)
class Mode:
    """What a plan is ranked for beside its figures' identity: the sampling temperature and the
    chat_template_kwargs (acceptance, hence the best D, moves with both)."""

    temperature: float
    chat_template_kwargs: dict[str, Any]

    def label(self) -> str:
        kwargs = ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(self.chat_template_kwargs.items()))
        return f"sampling.temperature={self.temperature:g}" + (f", chat_template_kwargs {kwargs}" if kwargs else "")


def _plan_for(data: dict[str, Any], drafter: str, where: str, own: Provenance, mode: Mode) -> Schedule:
    plans = mode_plans(data)
    at_mode = [one for one in plans if _plan_mode(one) == mode]
    if not at_mode:
        held = "; ".join(sorted({_plan_mode(one).label() for one in plans}))
        raise ConfigError(
            f"{where} has no plan at {mode.label()} (it has plans at: {held}): acceptance, hence the best D, moves "
            "with the temperature and the chat template; rank a sweep measured so, or run as one of those."
        )
    mine = [one for one in at_mode if not _differences(one, own)]
    if not mine:
        held = "; ".join(
            f"{_plan_identity(one)} (plan vs this run: {'; '.join(_differences(one, own))})" for one in at_mode
        )
        raise ConfigError(
            f"{where} has no plan measured as this run is ({own.identity_label()}); its plans at {mode.label()}: {held}. "
            "Rank runs measured under this run's source, runner, dtype and setting, or run as one of those."
        )
    schedules = mine[0]["schedules"]
    if drafter not in schedules:
        raise ConfigError(
            f"{where} has no schedule for drafter={drafter} in the plan measured as this run is (it has: "
            f"{', '.join(sorted(schedules)) or 'none'})."
        )
    return schedules[drafter]


def _load_policy_schedule(data: dict[str, Any], drafter: str, where: str, own: Provenance) -> Schedule:
    """The schedule of a load ladder's serve.json (its `load_policy`), for this drafter and identity."""
    try:
        policy = parse(LoadServeFile, data, where, "serve.json beside a load ladder").load_policy
    except CorruptRecord as exc:
        raise ConfigError(str(exc)) from None
    if policy.drafter != drafter:
        raise ConfigError(f"{where}: its load policy speculates with {policy.drafter}, not drafter={drafter}.")
    differ = differences(policy.provenance, own)
    if differ:
        raise ConfigError(
            f"{where}: its load policy was measured otherwise than this run ({'; '.join(differ)}); measure a ladder "
            "as this run is, or run as that one."
        )
    return policy.num_speculative_tokens_per_batch_size


def _plan_mode(plan: dict[str, Any]) -> Mode:
    temperature = plan.get("temperature")
    kwargs = plan.get("chat_template_kwargs")
    return Mode(
        float(temperature) if isinstance(temperature, (int, float)) and not isinstance(temperature, bool) else 0.0,
        kwargs if isinstance(kwargs, dict) else {},
    )


def _plan_identities(plan: dict[str, Any]) -> list[Provenance] | None:
    found = plan.get("provenance")
    if not isinstance(found, list) or not found or not all(isinstance(p, dict) for p in found):
        return None
    try:
        return [from_dict(p) for p in found]
    except (TypeError, ValueError):
        return None


def _plan_identity(plan: dict[str, Any]) -> str:
    identities = _plan_identities(plan)
    if identities is None:
        return "a plan that does not record what its figures are"
    return " + ".join(sorted({p.identity_label() for p in identities}))


def _differences(plan: dict[str, Any], own: Provenance) -> list[str]:
    """What the plan's figures differ from this run in (identity fields either side does not know
    are not compared: an attached server's engine, a model runner left to vLLM); [] where it is this
    run's."""
    identities = _plan_identities(plan)
    if identities is None:
        return ["it records no provenance (a serve.json from before speclens recorded one): rank again"]
    found: list[str] = []
    for theirs in identities:
        for line in differences(theirs, own):
            name = line.split(":", 1)[0]
            unknown = {
                "engine.model_runner": own.model_runner is None or theirs.model_runner is None,
                "engine": own.runner == "server",
            }
            if not unknown.get(name, False) and line not in found:
                found.append(line)
    return found
