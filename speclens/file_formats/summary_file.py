"""summary.json and replay.json, the file formats: their names and versions, the writers, and the one
reader every report, nightly, self-check and the public API use.

The reader takes every schema version this project has written, migrating older layouts in
memory (`MIGRATIONS`), and refuses a newer version than it knows, naming both; the migrated
document is then checked against the record types (speclens/figures/summary.py, pydantic: types,
ranges, required fields) and against the one rule across fields, an AL at most 1 + d. A summary
from before `provenance` was written (version 11) gets it from the stamp beside it; one that lacks
both is refused, never taken for a measured vLLM run. Writers only write the current version.

Schema versions of summary.json:
1  first release: no operating points, no AL by context position.
2  operating points (per batch size), AL by context position, the config fingerprint.
3  the runner that measured (`runner`: vllm | fake | ...).
4  latency per operating point (`operating_points[].latency`: TTFT, TPOT, ITL, end to end).
5  `record_granularity`: step | request | domain (how finely the engine reported acceptance).
6  `operating_points[].speedup_account` (the measured speedup as the model times named
   corrections) and, per domain, `predicted_corrected` with its range; `speedup_range` and
   `speedup_repeats` (repeats=N); `timing.warmup_s`; `schedule` (drafter.schedule);
   `lossless.mismatches` (each explained as a near-tie or a divergence) with their counts.
7  `numerics`: the engine's dtype, its thread count and batch-invariant kernels, the CPU, and
   whether its greedy outputs are a fixed function of the config (`reproducible`).
8  with a reasoning boundary (reasoning.*): `by_segment` (thinking, answer), overall and under
   every domain, and `reasoning` (how the boundary was found, how many outputs closed thinking);
   both absent otherwise. On agent trajectories (dataset=agentic): `by_turn`, the figures per
   assistant-turn index of the trajectories; absent otherwise.
9  `context_window` (the target's own window, the engine's max_model_len and any context
   extension it ran with); where the prompts state their lengths (long context, SPEED-Bench's
   throughput splits), `by_length` overall and under every operating point, each length with its
   own throughput, step costs and speedup (the pass runs one length at a time); absent otherwise.
10 `draft_share` (drafted steps / target passes), overall and in every group's figures
   (domains, lengths, turns); absent where the passes were not counted. `synthetic_acceptance`
   where drafts were accepted at set rates (acceptance.synthetic): its AL is set, not measured,
   and no lossless check was made; absent otherwise.
11 `provenance` (speclens/provenance.py): what the run's figures are (measured, synthetic, fake),
   the engine, dtype and model runner that computed them, the settings axis, the requests held in
   flight, the lengths and any context extension; and, per operating point and length, the
   requests held in flight (`batch_size_held`). Read from the stamp for older summaries.
12 the K=0 tax, per operating point and length: `t_idle` (the steady step of the idle pass:
   speculation on at D, nothing proposed at any step), `k0_tax` = T_idle(B) / T_verif(B) − 1 and
   `k0_tax_range` (both at opposite quartiles); null where no idle pass ran beside the baseline,
   with the reason in `k0_tax_note` (a server, Model Runner V2, too few steady steps); and
   `speedup_account.k0_tax` / `k0_tax_share` beside the factors. All absent (None) before 12.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from speclens.errors import CorruptRecord, SpeclensError
from speclens.figures.summary import ReplayRecord, RunSummary
from speclens.file_formats.run_files import STAMP_FILE, read_stamp
from speclens.files import non_finite_at, numbers_at, write_json_atomic
from speclens.schema import parse

SUMMARY_FILE = "summary.json"
SUMMARY_VERSION = 12
REPLAY_FILE = "replay.json"
# replay.json: 1 had no version field (summary and stamp only); 2 carries `schema_version`, the
# config fingerprint and the runner; 3 a head replay's `near_ties`.
REPLAY_VERSION = 3
# The version that began writing each field a reader cannot do without (absent since: corrupt).
REQUIRED_SINCE = {"runner": 3, "provenance": 11}


def write_summary(summary: RunSummary, run_dir: Path) -> None:
    """summary.json in `run_dir`, written whole or not at all."""
    write_json_atomic(summary.to_dict(), run_dir / SUMMARY_FILE)


def write_replay(record: ReplayRecord, run_dir: Path) -> None:
    write_json_atomic(record.to_dict(), run_dir / REPLAY_FILE)


# -- reading any version ------------------------------------------------------------------------


def _summary_1_to_2(data: dict[str, Any]) -> dict[str, Any]:
    return {"al_by_position": [], "operating_points": [], "config_fingerprint": None, **data}


def _summary_2_to_3(data: dict[str, Any]) -> dict[str, Any]:
    # Early version-2 runs predate AL by context position; runs before version 3 were all vLLM's.
    return {"al_by_position": [], "config_fingerprint": None, **data, "runner": "vllm"}


def _summary_3_to_4(data: dict[str, Any]) -> dict[str, Any]:
    return data  # latency was not measured: operating points keep latency = null


def _summary_4_to_5(data: dict[str, Any]) -> dict[str, Any]:
    return data | {"record_granularity": "step"}  # every earlier runner recorded every step


def _summary_5_to_6(data: dict[str, Any]) -> dict[str, Any]:
    return data  # no account was kept: operating points keep speedup_account = null


def _summary_6_to_7(data: dict[str, Any]) -> dict[str, Any]:
    return data  # the engine's numerics were not recorded: numerics = null


def _summary_7_to_8(data: dict[str, Any]) -> dict[str, Any]:
    return data  # no reasoning boundary could be configured: no by_segment, no reasoning


def _summary_8_to_9(data: dict[str, Any]) -> dict[str, Any]:
    return data  # no length buckets, and the window was not recorded: no by_length, no context_window


def _summary_9_to_10(data: dict[str, Any]) -> dict[str, Any]:
    return data  # the share of drafting steps was not recorded: draft_share absent (None)


def _summary_10_to_11(data: dict[str, Any]) -> dict[str, Any]:
    return data  # provenance absent: derived from the stamp beside it (read_summary)


def _summary_11_to_12(data: dict[str, Any]) -> dict[str, Any]:
    return data  # no idle pass ran: t_idle, k0_tax and the account's k0 figures absent (None)


# version -> the step from that version to the next.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    1: _summary_1_to_2,
    2: _summary_2_to_3,
    3: _summary_3_to_4,
    4: _summary_4_to_5,
    5: _summary_5_to_6,
    6: _summary_6_to_7,
    7: _summary_7_to_8,
    8: _summary_8_to_9,
    9: _summary_9_to_10,
    10: _summary_10_to_11,
    11: _summary_11_to_12,
}


def read_json_object(path: Path) -> dict[str, Any]:
    """A record's JSON object; a non-finite figure (NaN, Infinity) makes it corrupt: no figure
    speclens writes can be one, and downstream arithmetic would carry it silently."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))  # NaN and Infinity read as floats, found below
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptRecord(f"{path} is unreadable ({exc})") from None
    if not isinstance(data, dict):
        raise CorruptRecord(f"{path} is not a JSON object")
    key = non_finite_at(data)
    if key is not None:
        raise CorruptRecord(f"{path} holds a non-finite figure at {key}: a corrupt record; measure the run again")
    return data


def migrated(path: Path, data: dict[str, Any], current: int, steps: dict[int, Callable]) -> dict[str, Any]:
    """`data` migrated from the version it says to `current`, one step at a time."""
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise CorruptRecord(f"{path} has no valid schema_version ({version!r})")
    if version > current:
        raise SpeclensError(
            f"{path}: schema version {version} is newer than this speclens reads (up to {current}); "
            "upgrade speclens to read it."
        )
    while version < current:
        data = steps[version](data) | {"schema_version": version + 1}
        version += 1
    return data


def read_summary(run_dir: Path) -> RunSummary:
    """The run's summary.json in the current layout, whatever version wrote it, with its provenance
    (from the stamp beside it where the version predates it)."""
    path = run_dir / SUMMARY_FILE
    data = read_json_object(path)
    written = data.get("schema_version")
    for key, since in REQUIRED_SINCE.items():
        if isinstance(written, int) and since <= written <= SUMMARY_VERSION and data.get(key) is None:
            raise CorruptRecord(
                f"{path}: field {key} is required since schema version {since} and this one ({written}) lacks it; "
                "a corrupt record (what its figures are cannot be known), measure the run again"
            )
    data = migrated(path, data, SUMMARY_VERSION, MIGRATIONS)
    summary = parse(RunSummary, data, path)
    check_al_bound(data, path)
    if summary.provenance is not None:
        return summary
    stamp = read_stamp(run_dir)
    if not stamp:
        raise CorruptRecord(
            f"{path}: schema version {written} predates its `provenance` and no {STAMP_FILE} lies beside it to "
            "derive it from; what its figures are cannot be known (copy the run dir whole)"
        )
    return replace(summary, provenance=summary.provenance_of(stamp))


# The figures that are ALs by name (the last key of their path): each at most 1 + d, the run's
# own bound (their lower bound, 1, is their type's: speclens/schema.py AL). Tokens per step is
# left out: a segment's, thinking or answer, can pass 1 + d where a step straddles the boundary.
AT_MOST_1_PLUS_D = ("al", "al_ci95", "al_request_weighted", "al_emitted")


def check_al_bound(data: dict[str, Any], path: Path) -> None:
    """Every AL of `data` (a summary, parsed) at most 1 + d, else a CorruptRecord naming the field."""
    d = data.get("d")
    if not isinstance(d, int) or isinstance(d, bool):
        return
    for key, value in numbers_at(data):
        name = key.rsplit(".", 1)[-1].split("[", 1)[0]
        if name in AT_MOST_1_PLUS_D and value > 1 + d + 1e-9:
            raise CorruptRecord(
                f"{path}: field {key}={value!r}: an AL is in [1, 1 + d] = [1, {1 + d}]; a corrupt record, "
                "measure the run again"
            )


def _replay_1_to_2(data: dict[str, Any]) -> dict[str, Any]:
    # version 1 wrote no runner: every replay then was vLLM's
    summary = data.get("summary")
    return data | {"summary": {"runner": "vllm", **summary}} if isinstance(summary, dict) else data


def _replay_2_to_3(data: dict[str, Any]) -> dict[str, Any]:
    return data  # no head's near-ties counted: near_ties = null


def read_replay(run_dir: Path) -> ReplayRecord:
    path = run_dir / REPLAY_FILE
    data = read_json_object(path)
    data = {"schema_version": 1, **data}  # version 1 wrote none
    data = migrated(path, data, REPLAY_VERSION, {1: _replay_1_to_2, 2: _replay_2_to_3})
    return parse(ReplayRecord, data, path)
