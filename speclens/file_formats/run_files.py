"""The files of a run dir, named once, and the readers of the two that are neither records
(speclens/file_formats/records.py) nor the summary (speclens/figures/summary.py): the stamp and the outputs."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Sequence

from speclens.errors import CorruptRecord
from speclens.files import write_json_atomic
from speclens.options import strict_json_loads
from speclens.redact import redact

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


# The stamp fields readers use, and their types where present (absent or null: unknown).
STAMP_FIELDS: dict[str, tuple[type, ...]] = {
    "target_dir": (str,),
    "runner": (str,),
    "fingerprints": (dict,),
    "versions": (dict,),
    "speculative_config": (dict,),
    "config.drafter": (dict,),
    "config.drafter.model": (str,),
    "config.sampling": (dict,),
    "config.engine": (dict,),
}


def read_stamp(run_dir: Path) -> dict[str, Any]:
    """The run's stamp in today's layout ({} where there is none)."""
    stamp_file = run_dir / STAMP_FILE
    if not stamp_file.is_file():
        return {}
    try:
        stamp = json.loads(stamp_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptRecord(f"{stamp_file} is unreadable ({exc})") from None
    if not isinstance(stamp, dict) or not isinstance(stamp.get("config", {}), dict):
        raise CorruptRecord(f"{stamp_file} does not have the layout of a run stamp")
    for key, kinds in STAMP_FIELDS.items():
        node: Any = stamp
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None and not isinstance(node, kinds):
            wanted = " or ".join(k.__name__ for k in kinds)
            raise CorruptRecord(f"{stamp_file}: field {key}={node!r}: expected {wanted} (a damaged stamp)")
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
    if isinstance(record, dict) and isinstance(record.get("error"), str):
        return record
    why = why if record is None else f"{file} does not have the layout of a failure record"
    return {"job": file.parent.name, "overrides": [], "error": why, "exit_status": 1}
