"""A draft-length schedule over batch sizes, as vLLM 0.32's `num_speculative_tokens_per_batch_size`
takes it (dynamic speculative decoding): inclusive ranges [start, end, k] starting at 1, in order,
not overlapping; vLLM carries a range's k over any gap to the next one and past the last. Its
checks, and its reader for `drafter.schedule=`: a JSON file holding the schedule, or a serve.json
(its `schedules.<drafter>`, at the run's temperature)."""

from __future__ import annotations

import json
from pathlib import Path

from speclens.errors import ConfigError
from speclens.file_formats.serve_file import plan_at_temperature

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


def read_schedule(path: str, drafter: str, key: str, temperature: float = 0.0) -> Schedule:
    """The drafter's schedule from a serve.json (`schedules.<drafter>`, at this temperature where
    it holds several) or from a JSON file holding the schedule itself."""
    file = Path(path).expanduser()
    try:
        data = json.loads(file.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{key}={path}: not a readable JSON file ({exc}).") from None
    if isinstance(data, dict) and "by_temperature" in data:
        data = plan_at_temperature(data, temperature)
        if data is None:
            raise ConfigError(f"{key}={path} has no plan for sampling.temperature={temperature:g}.")
    if isinstance(data, dict):
        measured_at = data.get("temperature")
        # A plan names the temperature it was ranked at (serve.json since plans per temperature).
        if isinstance(measured_at, (int, float)) and measured_at != temperature:
            raise ConfigError(
                f"{key}={path} is a plan measured at sampling.temperature={measured_at:g}, and this run "
                f"samples at {temperature:g}: acceptance, hence the best D, moves with the temperature. "
                f"Rank a sweep at {temperature:g} for its plan, or set sampling.temperature={measured_at:g}."
            )
        schedules = data.get("schedules") or {}
        if drafter not in schedules:
            raise ConfigError(
                f"{key}={path} has no schedule for drafter={drafter} (it has: "
                f"{', '.join(sorted(schedules)) or 'none'})."
            )
        data = schedules[drafter]
    return check_schedule(data, f"{key}={path}")
