"""load.json, a request-rate ladder's record (issue 67), in the run dir: `stages`, one row per arm
and offered rate (plain decoding, a drafter at a D, the schedule arm), and `crossover`, one row per
drafter, D and domain: where speculation stops paying (speclens/figures/load_ladder.py). Every row
says what its figures are (its provenance: source, runner, engine, dtype, model runner, setting) and under which load
(arrivals, rate). Declared once here as records; read back checked, a damaged file refused in one
line naming the file, the field and the rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from speclens.file_formats.summary_file import read_json_object
from speclens.files import write_json_atomic
from speclens.provenance import Provenance
from speclens.schema import AL, Count, DraftLength, NonNegative, Rate, Seconds, parse, record, to_plain

LOAD_FILE = "load.json"
# The measured requests of every stage (evals/pipeline/ladder.py REQUEST_COLUMNS).
LOAD_REQUESTS_FILE = "load_requests.parquet"
LOAD_VERSION = 1


@record
class Spread:
    """A distribution's p50, p90 and p99."""

    p50: NonNegative
    p90: NonNegative
    p99: NonNegative


@record(kw_only=True)
class LoadStage:
    """One arm at one offered rate (one repeat): what the server achieved and how it served."""

    # none (plain decoding), a drafter, or `schedule` (vLLM's dynamic speculation, drafter.schedule=)
    drafter: str
    d: DraftLength | None
    arm: Literal["plain", "static", "schedule"]
    request_rate: NonNegative
    arrivals: Literal["poisson", "constant"]
    repeat: Count = 0
    n_requests: Count
    achieved_rate: NonNegative
    ttft_ms: Spread
    tpot_ms: Spread | None
    itl_ms: Spread | None
    latency_s: Spread
    output_tokens_per_s: NonNegative
    goodput_rps: NonNegative | None = None
    mean_in_flight: NonNegative
    # Little's law: (achieved rate x mean latency - mean in flight) / mean in flight.
    littles_law_gap: float | None = None
    al: AL | None = None
    tokens_per_step: NonNegative | None = None
    kv_cache_usage: Rate | None = None
    saturated: bool
    seconds: Seconds
    # What its figures are: source, runner, engine and version, dtype, model runner, setting.
    provenance: Provenance


@record(kw_only=True)
class CrossoverRow:
    """Where one drafter at one D stops paying over one domain: the rate where plain decoding's
    output tokens/s overtakes it (`throughput_rate`) and where its TPOT advantage vanishes
    (`tpot_rate`), each with its interval; `reached` false where neither happened up to the top rate."""

    drafter: str
    d: DraftLength
    domain: str
    throughput_rate: NonNegative | None
    throughput_interval: list[NonNegative] | None = None
    tpot_rate: NonNegative | None
    tpot_interval: list[NonNegative] | None = None
    # A crossover at the lowest rate already: the rate is an upper bound.
    below_ladder: bool = False
    reached: bool
    # Where the arms stand at the top rate: the drafter's lead in output tokens/s and in TPOT (ms).
    throughput_lead_at_top: float
    tpot_lead_at_top_ms: float
    provenance: Provenance


@record
class LoadFile:
    schema_version: int
    stages: list[LoadStage]
    crossover: list[CrossoverRow]
    # The ladder's configuration (its fingerprint): a re-run of the same one resumes from the first
    # unfinished stage; another is refused.
    config_fingerprint: str | None = None
    # Whether every stage and arm ran (false while a ladder is under way or after it died).
    complete: bool = True


def write_load_file(
    stages: list[LoadStage],
    crossover: list[CrossoverRow],
    run_dir: Path,
    config_fingerprint: str | None = None,
    complete: bool = True,
) -> Path:
    path = run_dir / LOAD_FILE
    write_json_atomic(to_plain(LoadFile(LOAD_VERSION, stages, crossover, config_fingerprint, complete)), path)
    return path


def read_load_file(run_dir: Path) -> LoadFile:
    """The ladder's record, checked; CorruptRecord in one line otherwise."""
    path = run_dir / LOAD_FILE
    return parse(LoadFile, read_json_object(path), path, "load ladder (load.json)")


@record(kw_only=True)
class LoadPolicy:
    """What to serve under load, from a ladder's crossover: speculate (drafter, d) below
    `speculate_below_rate`, plain decoding above; the requests in flight the drafter's arm held at
    each rate map that onto vLLM's `num_speculative_tokens_per_batch_size` (k = d up to
    `switch_at_in_flight`, 0 above). `speculate_below_rate` null: speculation paid at every rate
    measured (`reached` false); 0 with `below_ladder`: it paid at none."""

    drafter: str
    d: DraftLength
    speculate_below_rate: NonNegative | None
    interval: list[NonNegative] | None = None
    # Which advantage vanishes first: "throughput" (output tokens/s) or "tpot".
    decided_by: Literal["throughput", "tpot"] | None
    reached: bool
    below_ladder: bool = False
    # [rate, mean requests in flight] of the drafter's arm at each rung.
    in_flight_at_rate: list[list[NonNegative]]
    switch_at_in_flight: Count | None
    num_speculative_tokens_per_batch_size: list[list[int]]
    speculative_config: dict[str, Any] | None
    arrivals: Literal["poisson", "constant"]
    domain: str = "all"
    provenance: Provenance


@record
class LoadServeFile:
    """serve.json beside a ladder's load.json."""

    load_policy: LoadPolicy
