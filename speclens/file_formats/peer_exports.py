"""Other tools' exports of a speculative-decoding benchmark, read for `reports.explain`: the figure
each reports under its own name, its per-request figures where it keeps them, and its settings.

- `vllm bench serve --save-result` (vllm/benchmarks/serve.py): one JSON object per line (more with
  --append-result: the last is read); `spec_decode_acceptance_length` from the server's counters;
  no per-request acceptance, no request ids.
- aiperf's `profile_export.jsonl`: one record per request (`metadata`, `metrics` as {tag: {value,
  unit}}, `spec_decode_acceptance` where the server gave per-request statistics, `error`); warm-up
  and failed records are left out, as aiperf does. Its figure: the mean over records of
  `spec_decode_acceptance_length`.
- specdec_bench's `acceptance_rate.json` (a list, one entry per run: the last is read) or
  `specbench_results.json` (one entry): `Average_AL` (`Average_AR` before May 2026), `Request_AL`
  and `Category_AL`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speclens import options
from speclens.errors import ConfigError, SpeclensError


@dataclass(frozen=True)
class PeerTurn:
    """One request of a peer's export, as far as it says."""

    request_id: str
    category: str | None = None
    al: float | None = None
    accepted: int | None = None
    drafts: int | None = None
    # output token ids, where the export keeps them (none of the three does today)
    tokens: tuple[int, ...] | None = None


@dataclass
class PeerExport:
    path: Path
    tool: str
    # the figure's name in the tool, and its value
    figure: str
    al: float
    turns: list[PeerTurn] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)


class PeerExportError(SpeclensError):
    pass


def fail(path: Path, what: str) -> PeerExportError:
    return PeerExportError(f"{path}: {what}")


def number(path: Path, value: Any, where: str, at_least: float | None = None) -> float:
    """A figure of the export: a finite number, at least `at_least` (speclens/options.py's rule);
    else one line naming the file and the field."""
    try:
        return options.number(value, f"field {where}", at_least=at_least)
    except ConfigError as exc:
        raise fail(path, str(exc).rstrip(".")) from None


def acceptance_length(path: Path, value: Any, where: str) -> float:
    """An AL: at least 1 (every verification step gives the target's own token)."""
    return number(path, value, where, at_least=1)


def count(path: Path, value: Any, where: str) -> int:
    """A count of steps or tokens: a whole number >= 0."""
    figure = number(path, value, where, at_least=0)
    if not figure.is_integer():
        raise fail(path, f"field {where} is {value!r}, not a whole number")
    return int(figure)


def read_peer_export(path: Path) -> PeerExport:
    """The export at `path`, its tool told by its layout."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(path, f"unreadable ({exc})") from None
    documents = parse(path, text)
    first = documents[-1] if documents else None
    if isinstance(first, dict) and "metadata" in first and "metrics" in first:
        return aiperf(path, documents)
    if isinstance(first, list) or (isinstance(first, dict) and any(k in first for k in ("Average_AL", "Average_AR"))):
        return specdec_bench(path, first)
    if isinstance(first, dict) and ("backend" in first or "spec_decode_acceptance_length" in first):
        return vllm_bench_serve(path, first)
    raise fail(
        path,
        "not an export speclens reads: expected vllm bench serve's result JSON (field "
        "spec_decode_acceptance_length), aiperf's profile_export.jsonl (fields metadata, metrics) or "
        "specdec_bench's acceptance_rate.json (field Average_AL)",
    )


def parse(path: Path, text: str) -> list[Any]:
    """The file as one JSON document, or as JSON lines."""
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        pass
    documents = []
    for number_, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                documents.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise fail(path, f"line {number_} is not JSON ({exc.msg})") from None
    return documents


def vllm_bench_serve(path: Path, result: dict[str, Any]) -> PeerExport:
    if "spec_decode_acceptance_length" not in result:
        raise fail(
            path,
            "no field spec_decode_acceptance_length (vllm bench serve writes it only where the server's "
            "/metrics counted speculative decoding)",
        )
    al = acceptance_length(path, result["spec_decode_acceptance_length"], "spec_decode_acceptance_length")
    settings = {
        "model_id": result.get("model_id"),
        "num_prompts": result.get("num_prompts"),
        "max_concurrency": result.get("max_concurrency"),
    }
    return PeerExport(path, "vllm bench serve", "spec_decode_acceptance_length", al, [], settings)


def aiperf(path: Path, records: list[Any]) -> PeerExport:
    turns = []
    for i, record in enumerate(records, 1):
        if not isinstance(record, dict) or not isinstance(record.get("metadata"), dict):
            raise fail(path, f"record {i} has no metadata object")
        meta = record["metadata"]
        if record.get("error") or "warmup" in (meta.get("benchmark_phase"), meta.get("phase_kind")):
            continue
        turn = aiperf_turn(path, i, record, meta)
        if turn is not None:
            turns.append(turn)
    if not turns:
        raise fail(
            path,
            "no profiling record carries spec_decode_acceptance or metrics.spec_decode_acceptance_length "
            "(start vLLM with --per-request-spec-decode-metrics for aiperf to record them)",
        )
    al = sum(t.al for t in turns if t.al is not None) / len(turns)
    return PeerExport(path, "aiperf", "spec_decode_acceptance_length", al, turns)


def aiperf_turn(path: Path, i: int, record: dict[str, Any], meta: dict[str, Any]) -> PeerTurn | None:
    request_id = str(meta.get("conversation_id") or meta.get("x_request_id") or i)
    category = meta.get("source_kind")
    detail = record.get("spec_decode_acceptance")
    if isinstance(detail, dict) and "num_spec_steps" in detail:
        steps = count(path, detail["num_spec_steps"], f"record {i} spec_decode_acceptance.num_spec_steps")
        accepted_key = "num_accepted_draft_tokens"
        accepted = count(path, detail.get(accepted_key), f"record {i} spec_decode_acceptance.{accepted_key}")
        if not steps:
            return None  # aiperf leaves requests that never drafted out of its means
        return PeerTurn(request_id, category, 1.0 + accepted / steps, accepted, steps)
    metrics = record.get("metrics") or {}
    entry = metrics.get("spec_decode_acceptance_length")
    if entry is None:
        return None
    if not isinstance(entry, dict) or "value" not in entry:
        raise fail(path, f"record {i} field metrics.spec_decode_acceptance_length has no value")
    al = acceptance_length(path, entry["value"], f"record {i} metrics.spec_decode_acceptance_length.value")
    steps_entry, accepted_entry = metrics.get("spec_decode_steps"), metrics.get("spec_decode_accepted_draft_tokens")
    if isinstance(steps_entry, dict) and isinstance(accepted_entry, dict):
        accepted = count(
            path, accepted_entry.get("value"), f"record {i} metrics.spec_decode_accepted_draft_tokens.value"
        )
        steps = count(path, steps_entry.get("value"), f"record {i} metrics.spec_decode_steps.value")
        return PeerTurn(request_id, category, al, accepted, steps)
    return PeerTurn(request_id, category, al)


def specdec_bench(path: Path, document: Any) -> PeerExport:
    if isinstance(document, list):
        if not document or not isinstance(document[-1], dict):
            raise fail(path, "an empty list: no run's acceptance figures")
        document = document[-1]
    key = next((k for k in ("Average_AL", "Average_AR") if k in document), None)
    if key is None:
        raise fail(path, "no field Average_AL (nor Average_AR, its name before May 2026)")
    al = acceptance_length(path, document[key], key)
    per_request = document.get("Request_AL", document.get("Request_AR")) or {}
    if not isinstance(per_request, dict):
        raise fail(path, f"field Request_AL is a {type(per_request).__name__}, not an object of request: AL")
    turns = []
    for request_id, value in per_request.items():
        if isinstance(value, dict):  # the base metric keeps each turn's: {turn: al}
            if not value:
                raise fail(path, f"field Request_AL.{request_id} holds no turn")
            values = [acceptance_length(path, v, f"Request_AL.{request_id}.{t}") for t, v in value.items()]
            value = sum(values) / len(values)
        turns.append(PeerTurn(str(request_id), None, acceptance_length(path, value, f"Request_AL.{request_id}")))
    return PeerExport(path, "specdec_bench", "Average_AL", al, turns, {})
