"""The files of a run dir, named once, and the readers of the two that are neither records
(speclens/file_formats/records.py) nor the summary (speclens/figures/summary.py): the stamp and the outputs."""

from __future__ import annotations

import hashlib
import json
from dataclasses import field
from pathlib import Path
from typing import Any, Sequence

from speclens.errors import CorruptRecord
from speclens.files import write_json_atomic
from speclens.options import strict_json_loads
from speclens.redact import redact
from speclens.schema import OPEN_RECORD_CONFIG, parse, record

STAMP_FILE = "stamp.json"  # config, versions, fingerprints: written first
STEPS_FILE = "steps.parquet"  # one row per request per drafted verification step
REQUESTS_FILE = "requests.parquet"  # one row per request and turn
ENGINE_STEPS_FILE = "engine_steps.parquet"  # one row per engine step of every pass
OUTPUTS_FILE = "outputs.jsonl"  # each turn's output tokens and text
BASELINE_OUTPUTS_FILE = "baseline_outputs.jsonl"  # plain decoding's, with baseline=true
# vLLM's, torch's and native libraries' output during the measurement (speclens/console.py; verbose=true: the terminal).
ENGINE_LOG = "engine.log"
ERROR_LOG = "error.log"  # a failed measurement's traceback, or the lossless check's mismatches
FAILURE_FILE = "failure.json"  # a failed sweep job's one-line reason (record_failure)
FAILURES_FILE = "failures.json"  # in a sweep's dir: its failed jobs' reasons, gathered (evals/sweep_report.py)
# Inside a run dir (evals/pipeline/run_dir.py): a measurement being written, and a failed attempt kept beside the
# earlier result. Neither is a finished run, whatever files it holds.
STAGING_PREFIX = ".incoming-"
FAILED_ATTEMPT = "failed_attempt"


def holding(root: Path, name: str) -> list[Path]:
    """The folders under `root` (itself included) holding a file `name`, in path order, but for
    those inside a staging or failed-attempt dir: what every reader of run dirs walks."""
    folders = []
    for file in sorted(root.rglob(name)):
        inside = file.parent.relative_to(root).parts
        if not any(part.startswith(STAGING_PREFIX) or part == FAILED_ATTEMPT for part in inside):
            folders.append(file.parent)
    return folders


@record
class ServedBy:
    """The serving engine that computed a run and its version, as the engine named itself."""

    engine: str
    version: str | None = None


@record
class StampDrafter:
    """The drafter's settings as the stamp holds them: each drafter's own keys (drafters/), of
    which readers use the draft checkpoint."""

    __pydantic_config__ = OPEN_RECORD_CONFIG

    model: str | None = None


@record
class StampConfig:
    """The resolved run config (speclens/config.py RunConfig, as OmegaConf dumps it): every key of
    its version, of which readers use these parts."""

    __pydantic_config__ = OPEN_RECORD_CONFIG

    drafter: StampDrafter | None = None
    sampling: dict[str, Any] | None = None
    engine: dict[str, Any] | None = None


@record
class RunStamp:
    """stamp.json: what a run was measured with and by, written before it starts (and rewritten
    with what ran: `model_runner`, `gpu`, `served_by`). Fields with defaults are those earlier
    stamps did not hold."""

    schema_version: int | None = None
    config: StampConfig = field(default_factory=StampConfig)
    started_at: str | None = None
    config_fingerprint: str | None = None
    # The runner that measured (since summary schema 3).
    runner: str | None = None
    speculative_config: dict[str, Any] | None = None
    # Engine keys left unset, fitted to the target: value, default and why.
    fitted_defaults: dict[str, dict[str, Any]] | None = None
    target_dir: str | None = None
    versions: dict[str, str | None] | None = None
    fingerprints: dict[str, str | None] | None = None
    draft_build: dict[str, Any] | None = None
    quantization: dict[str, str | None] | None = None
    git_sha: str | None = None
    overrides: list[str] | None = None
    dropped_too_long: dict[str, int] | None = None
    # What ran, where the engine said: vLLM's model runner, the GPU, the serving engine.
    model_runner: str | None = None
    gpu: dict[str, Any] | None = None
    served_by: ServedBy | None = None


def read_stamp(run_dir: Path) -> dict[str, Any]:
    """The run's stamp in today's layout ({} where there is none), checked against RunStamp: a
    damaged or foreign one is refused in one line naming the file, the field and the rule."""
    stamp_file = run_dir / STAMP_FILE
    if not stamp_file.is_file():
        return {}
    try:
        stamp = json.loads(stamp_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptRecord(f"{stamp_file} is unreadable ({exc})") from None
    if not isinstance(stamp, dict):
        raise CorruptRecord(f"{stamp_file} does not have the layout of a run stamp (a JSON object)")
    parse(RunStamp, stamp, stamp_file, "run stamp")
    drafter = stamp.get("config", {}).get("drafter")
    if isinstance(drafter, dict):
        # Stamps before summary schema 3 restated the drafter's name inside its settings; keys added
        # since, unset, say nothing the older stamps did not (compared as absent in both).
        drafter.pop("name", None)
        if drafter.get("schedule", "set") is None:
            drafter.pop("schedule")
    return stamp


def read_outputs(path: Path) -> list[dict[str, Any]]:
    """The rows of an outputs file (outputs.jsonl, baseline_outputs.jsonl)."""
    try:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptRecord(f"{path} is unreadable ({exc})") from None


def prompt_digest(prompt_token_ids: Sequence[int]) -> str:
    """A short digest of a prompt's token ids (outputs.jsonl `prompt_digest`): two runs sent the
    same tokens after templating where their digests agree."""
    data = ",".join(map(str, prompt_token_ids)).encode()
    return hashlib.sha256(data).hexdigest()[:16]


@record
class FailureRecord:
    """failure.json: a failed sweep job's one-line reason and exit status (README's table)."""

    job: str
    overrides: list[str]
    error: str
    exit_status: int


def record_failure(job_dir: Path, overrides: list[str], message: str, status: int) -> None:
    """A failed sweep job's reason, in its own dir (the sweep's end collects them)."""
    job_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(
        {"job": job_dir.name, "overrides": redact(overrides), "error": message, "exit_status": status},
        job_dir / FAILURE_FILE,
    )


def read_failure(file: Path) -> dict[str, Any]:
    """A job's failure.json; one damaged since is still a failure, said to be unreadable."""
    try:
        record = strict_json_loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        record = None
        why = f"{file} is unreadable ({exc})"
    if isinstance(record, dict):
        try:
            parse(FailureRecord, record, file, "failure record")
            return record
        except CorruptRecord as exc:
            why = str(exc)
    return {"job": file.parent.name, "overrides": [], "error": why, "exit_status": 1}
