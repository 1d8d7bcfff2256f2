"""What each serving engine sends back about speculative decoding, read at the finest granularity
it offers (`runner.engine`):

- vllm: `/v1/completions` streamed as token ids (`return_token_ids`); with
  `--per-request-spec-decode-metrics detailed` the last chunk's `metrics.speculative_decoding`
  carries `per_step_accepted` / `per_step_drafted` -> step records. Counters: Prometheus
  `/metrics`, `vllm:spec_decode_*_total`, one series per `engine=` (data-parallel rank).
- sglang: the native `/generate` endpoint streamed with `input_ids`; each chunk's `meta_info` counts
  `completion_tokens`, and the finished request's carries `spec_verify_ct` (verification steps)
  and `spec_num_correct_drafts` (accepted draft tokens; `spec_accepted_drafts` /
  `spec_accept_token_num` in 0.5.9-0.5.19) -> request totals, and `spec_correct_drafts_histogram`
  (`spec_accept_histogram` before; [k]: verification steps that accepted exactly k drafts) ->
  per-position acceptance. No per-step arrays exist (in order, per step). Counters (with
  `--enable-metrics`): `sglang:spec_verify_calls_total` (verification steps only).
- trtllm: `/v1/completions` streamed. Released servers' responses carry only
  `avg_decoded_tokens_per_iter`, so acceptance comes from counters, one domain at a time. A server
  with TensorRT-LLM PR #19311 (PyTorch backend) puts a `speculative_decoding` object on each
  finished choice: `num_spec_steps` (verification steps), `total_accepted_draft_tokens`,
  `total_draft_tokens`, `acceptance_histogram` ([j]: steps that accepted exactly j drafts, D + 1
  long) and `num_spec_tokens` (D; null under a draft-length schedule) -> request totals and
  per-position acceptance (`TrtllmPerRequest`, chosen when the probe request's reply carries it).
  Counters (`return_perf_metrics: true`): Prometheus `/prometheus/metrics`, the per-position
  `trtllm_spec_decode_drafted_tokens_total` and `..._accepted_tokens_total{token_position=}`, which
  are fed per finished request (the per-iteration totals beside them sample only the latest
  iteration, so they are not used).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from runners.server_records import drafted_steps, parse_counters, prometheus_samples
from speclens.generation import (
    COUNTER_NAMES,
    DraftedStep,
    RecordGranularity,
    RequestTotals,
    SamplingSpec,
    SpecCounters,
)
from speclens.lossless import top2_margin


@dataclass
class Reply:
    """One streamed request as it arrived: token chunks with their arrival times, and the
    engine's speculative statistics for it (dialect-specific), if any."""

    chunks: list[list[int]] = field(default_factory=list)
    chunk_times: list[float] = field(default_factory=list)
    stats: dict[str, Any] | None = None
    # With SamplingSpec.top2: each output token's top-2 log-probability margin, where the server gives them.
    margins: list[float] = field(default_factory=list)
    text: str = ""
    # Why the server says the request ended (stop, length, abort, ...); None until it says.
    finish_reason: str | None = None
    # The prompt tokens the server counted (its usage), where it says.
    prompt_tokens: int | None = None
    started: float = 0.0
    finished: float = 0.0


# Finish reasons of a request that ran to its end: a stop (EOS, a stop string) or max_tokens. Others
# (vLLM's abort and error, SGLang's abort, TensorRT-LLM's timeout and cancelled) did not.
FINISHED = ("stop", "length")


def unfinished(reply: Reply) -> str | None:
    """What says that a whole stream did not carry a finished answer (said as the end of a
    sentence about it), or None."""
    if reply.finish_reason is None:
        return "ended without a finish_reason (cut short)"
    if reply.finish_reason not in FINISHED:
        return f"ended with finish_reason={reply.finish_reason!r}, not {' or '.join(FINISHED)}"
    if not any(reply.chunks) and not reply.text:
        return "carried no tokens"
    return None


@dataclass
class ReplyAcceptance:
    """A request's acceptance as the dialect reads it: step records, or totals, or neither
    (domain granularity), and its target forward passes."""

    steps: list[DraftedStep]
    target_steps: int
    totals: RequestTotals | None = None


class Getter(Protocol):
    """What a dialect may ask of a server beyond the stream: a GET (status, body)."""

    def get(self, path: str, timeout: float = 10.0) -> tuple[int, str]: ...


class Dialect(Protocol):
    name: str
    granularity: RecordGranularity
    # Where its counters are, and which SpecCounters fields they give (compared with the records).
    metrics_path: str
    counted: tuple[str, ...]
    # Where requests go, and what turns its per-request statistics on (said where they are missing).
    path: str
    missing_stats: str

    def body(self, model: str, prompt: list[int], sampling: SamplingSpec) -> dict[str, Any]: ...

    def read(self, event: dict[str, Any], reply: Reply) -> list[int]:
        """The new output tokens of one streamed event; its statistics kept on `reply`."""

    def has_stats(self, stats: dict[str, Any] | None) -> bool: ...

    def acceptance(self, prompt_tokens: int, reply: Reply) -> ReplyAcceptance: ...

    def counters(self, text: str) -> SpecCounters: ...

    def serves_speculation(self, metrics_text: str) -> bool: ...

    def served_d(self, reply: Reply, server: Getter) -> int | None:
        """The draft length the server runs, where it says (None: it does not)."""


def completions_body(model: str, prompt: list[int], sampling: SamplingSpec) -> dict[str, Any]:
    """An OpenAI completions request, streamed, asking for token ids (vLLM; ignored where unknown)."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": sampling.max_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "ignore_eos": sampling.ignore_eos,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
    }
    if sampling.temperature > 0:
        body["seed"] = sampling.seed
    if sampling.top2:  # token ids as keys: two tokens that decode alike stay two entries
        body |= {"logprobs": 2, "return_tokens_as_token_ids": True}
    return body


# Where each engine's server says its version: vLLM's and TensorRT-LLM's /version
# ({"version": "0.32.0"}), SGLang's /get_server_info (its server args with "version").
VERSION_PATHS = ("/version", "/get_server_info")


def served_version(server: Getter, timeout: float = 10.0) -> str | None:
    """The version the server reports of itself (None where it says none, or cannot be asked)."""
    for path in VERSION_PATHS:
        try:
            status, text = server.get(path, timeout=timeout)
            found = json.loads(text).get("version") if status == 200 else None
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(found, str) and found:
            return found
    return None


def read_finish(choice: dict[str, Any], reply: Reply) -> None:
    """A completions choice's finish_reason, where it has one (the last token chunk's)."""
    if choice.get("finish_reason"):
        reply.finish_reason = str(choice["finish_reason"])


def read_usage(event: dict[str, Any], reply: Reply) -> None:
    """The prompt tokens an OpenAI-style usage block counts (the stream's last event, with include_usage)."""
    usage = event.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), int):
        reply.prompt_tokens = usage["prompt_tokens"]


def top2_margins(choice: dict[str, Any]) -> list[float]:
    """Each token's top-2 log-probability margin from a completions choice's `logprobs`."""
    return [top2_margin((top or {}).values()) for top in (choice.get("logprobs") or {}).get("top_logprobs") or []]


class Vllm:
    name = "vllm"
    granularity = RecordGranularity.step
    metrics_path = "/metrics"
    # The counters its /metrics gives, compared with the records.
    counted = COUNTER_NAMES
    path = "/v1/completions"
    missing_stats = "start the server with --per-request-spec-decode-metrics detailed"

    def body(self, model: str, prompt: list[int], sampling: SamplingSpec) -> dict[str, Any]:
        return completions_body(model, prompt, sampling)

    def read(self, event: dict[str, Any], reply: Reply) -> list[int]:
        if event.get("metrics"):
            reply.stats = event["metrics"].get("speculative_decoding")
        read_usage(event, reply)
        tokens = []
        for choice in event.get("choices") or []:
            reply.margins += top2_margins(choice)
            read_finish(choice, reply)
            tokens += choice.get("token_ids") or []
        return tokens

    def has_stats(self, stats: dict[str, Any] | None) -> bool:
        # vLLM leaves the per-step arrays out when they are empty: a request with no verification step
        return stats is not None and (stats.get("per_step_accepted") is not None or stats.get("num_spec_steps") == 0)

    def acceptance(self, prompt_tokens: int, reply: Reply) -> ReplyAcceptance:
        steps, passes, _ = drafted_steps(
            prompt_tokens,
            [len(c) for c in reply.chunks],
            reply.stats.get("per_step_accepted", []),
            reply.stats.get("per_step_drafted", []),
        )
        return ReplyAcceptance(steps, passes)

    def counters(self, text: str) -> SpecCounters:
        return parse_counters(text)

    def serves_speculation(self, metrics_text: str) -> bool:
        return "vllm:spec_decode_num_drafts" in metrics_text

    def served_d(self, reply: Reply, server: Getter) -> int | None:
        return reply.stats.get("num_spec_tokens")


# SGLang's name for the accepted draft tokens of a request, newest first (0.5.15+, 0.5.15-0.5.19
# alias, 0.5.9).
SGLANG_ACCEPTED = ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num")


class Sglang:
    name = "sglang"
    granularity = RecordGranularity.request
    metrics_path = "/metrics"
    counted = ("num_drafts",)
    path = "/generate"
    missing_stats = (
        "use SGLang 0.5.9 or newer with a --speculative-algorithm (its finished requests' meta_info "
        "then counts spec_verify_ct and the accepted drafts)"
    )

    def body(self, model: str, prompt: list[int], sampling: SamplingSpec) -> dict[str, Any]:
        params = {
            "max_new_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "ignore_eos": sampling.ignore_eos,
        }
        if sampling.temperature > 0:
            params["sampling_seed"] = sampling.seed
        return {"input_ids": prompt, "sampling_params": params, "stream": True}

    def read(self, event: dict[str, Any], reply: Reply) -> list[int]:
        meta = event.get("meta_info") or {}
        if "spec_verify_ct" in meta:
            reply.stats = meta
        if isinstance(meta.get("prompt_tokens"), int):
            reply.prompt_tokens = meta["prompt_tokens"]
        reason = meta.get("finish_reason")  # {"type": "length", "length": n} on the finished request's chunk
        if reason:
            reply.finish_reason = str(reason.get("type") if isinstance(reason, dict) else reason)
        ids = list(event.get("output_ids") or [])
        have = sum(len(c) for c in reply.chunks)
        total = meta.get("completion_tokens", have + len(ids))
        # Streams carry all output ids so far, or only the new ones (--incremental-streaming-output).
        return ids[have:total] if len(ids) == total else ids[: total - have]

    def has_stats(self, stats: dict[str, Any] | None) -> bool:
        return stats is not None and any(k in stats for k in SGLANG_ACCEPTED)

    def acceptance(self, prompt_tokens: int, reply: Reply) -> ReplyAcceptance:
        verify = int(reply.stats["spec_verify_ct"])
        accepted = int(next(reply.stats[k] for k in SGLANG_ACCEPTED if k in reply.stats))
        # With speculation every decode step is a verification step; the prefill gives the first token.
        return ReplyAcceptance(
            [], 1 + verify, RequestTotals(verify, accepted, sglang_histogram(reply.stats, verify, accepted))
        )

    def counters(self, text: str) -> SpecCounters:
        drafts = sum(v for name, _, v in prometheus_samples(text) if name == "sglang:spec_verify_calls_total")
        return SpecCounters(num_drafts=int(drafts))

    def serves_speculation(self, metrics_text: str) -> bool:
        return "sglang:spec_verify_calls" in metrics_text

    def served_d(self, reply: Reply, server: Getter) -> int | None:
        """speculative_num_steps from /get_server_info, where it says."""
        with contextlib.suppress(OSError, ValueError):
            status, text = server.get("/get_server_info", timeout=10.0)
            if status == 200:
                return json.loads(text).get("speculative_num_steps")
        return None


# The finished request's histogram of accepted drafts per verification step ([k]: steps that
# accepted exactly k, the bonus token not counted; as long as the largest k seen + 1): SGLang's
# canonical name, then the name it had until then (still written beside it).
SGLANG_HISTOGRAM = ("spec_correct_drafts_histogram", "spec_accept_histogram")


def sglang_histogram(stats: dict[str, Any], verify: int, accepted: int) -> tuple[int, ...] | None:
    """The request's histogram where SGLang gives one that adds up to its own totals, else None."""
    return checked_histogram(
        next((stats[k] for k in SGLANG_HISTOGRAM if isinstance(stats.get(k), list)), None), verify, accepted
    )


def checked_histogram(found: Any, verify: int, accepted: int) -> tuple[int, ...] | None:
    """A histogram of accepted drafts per verification step where it adds up to the request's own
    totals (its steps, its accepted drafts), else None."""
    if not isinstance(found, list) or not found or not all(isinstance(n, int) and n >= 0 for n in found):
        return None
    if sum(found) != verify or sum(k * n for k, n in enumerate(found)) != accepted:
        return None  # not this request's steps: the totals stand alone
    return tuple(found)


class Trtllm:
    name = "trtllm"
    granularity = RecordGranularity.domain
    metrics_path = "/prometheus/metrics"
    counted = COUNTER_NAMES
    path = "/v1/completions"
    missing_stats = "start trtllm-serve with return_perf_metrics: true in its --extra_llm_api_options"

    def body(self, model: str, prompt: list[int], sampling: SamplingSpec) -> dict[str, Any]:
        return completions_body(model, prompt, sampling)

    def read(self, event: dict[str, Any], reply: Reply) -> list[int]:
        read_usage(event, reply)
        tokens = []
        for choice in event.get("choices") or []:
            reply.text += choice.get("text") or ""
            read_finish(choice, reply)
            tokens += choice.get("token_ids") or []
            if isinstance(choice.get("speculative_decoding"), dict):  # PR #19311: on the finished choice
                reply.stats = choice["speculative_decoding"]
        return tokens

    def has_stats(self, stats: dict[str, Any] | None) -> bool:
        return True  # acceptance comes from the counters

    def acceptance(self, prompt_tokens: int, reply: Reply) -> ReplyAcceptance:
        return ReplyAcceptance([], 0)  # nothing per request: the records leave it null

    def counters(self, text: str) -> SpecCounters:
        drafted: dict[int, int] = {}
        accepted: dict[int, int] = {}
        for name, labels, value in prometheus_samples(text):
            into = {
                "trtllm_spec_decode_drafted_tokens_total": drafted,
                "trtllm_spec_decode_accepted_tokens_total": accepted,
            }.get(name)
            if into is not None and "token_position" in labels:
                position = int(labels["token_position"])
                into[position] = into.get(position, 0) + int(value)
        first = min(drafted, default=0)  # the first draft position: drafted there once per verification step
        positions = range(first, max([*drafted, *accepted], default=first - 1) + 1)
        return SpecCounters(
            drafted.get(first, 0),
            sum(drafted.values()),
            sum(accepted.values()),
            [accepted.get(k, 0) for k in positions],
        )

    def serves_speculation(self, metrics_text: str) -> bool:
        return "trtllm_spec_decode_drafted_tokens" in metrics_text

    def served_d(self, reply: Reply, server: Getter) -> int | None:
        return None  # trtllm-serve says its draft length nowhere a client can read


class TrtllmPerRequest(Trtllm):
    """trtllm-serve that reports each request's acceptance on its choice (TensorRT-LLM PR #19311,
    PyTorch backend): request totals and their histogram, checked against the counters."""

    granularity = RecordGranularity.request
    missing_stats = (
        "it reported them when speclens attached (TensorRT-LLM PR #19311); was it restarted without "
        "return_perf_metrics: true, or on the C++ backend, which has none?"
    )

    def has_stats(self, stats: dict[str, Any] | None) -> bool:
        return trtllm_reports_per_request(stats)

    def acceptance(self, prompt_tokens: int, reply: Reply) -> ReplyAcceptance:
        verify = int(reply.stats["num_spec_steps"])
        accepted = int(reply.stats["total_accepted_draft_tokens"])
        # As SGLang's: the prefill gives the first token, every later step verifies drafts.
        return ReplyAcceptance(
            [],
            1 + verify,
            RequestTotals(
                verify, accepted, checked_histogram(reply.stats.get("acceptance_histogram"), verify, accepted)
            ),
        )

    def served_d(self, reply: Reply, server: Getter) -> int | None:
        return reply.stats.get("num_spec_tokens")  # null under a draft-length schedule


def trtllm_reports_per_request(stats: dict[str, Any] | None) -> bool:
    """A choice's `speculative_decoding` with the request's totals (TensorRT-LLM PR #19311)."""
    return stats is not None and all(
        isinstance(stats.get(k), int) for k in ("num_spec_steps", "total_accepted_draft_tokens")
    )


TRTLLM_PER_REQUEST = TrtllmPerRequest()
DIALECTS: dict[str, Dialect] = {d.name: d for d in (Vllm(), Sglang(), Trtllm())}
# /v1/models `owned_by` of each engine's model cards.
OWNED_BY = {"vllm": "vllm", "sglang": "sglang", "tensorrt_llm": "trtllm", "trtllm": "trtllm"}
