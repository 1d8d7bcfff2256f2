"""An engine behind an OpenAI-compatible HTTP API (vLLM's server): requests stream over the
completions endpoint as token ids (the same prompt tokens an in-process run sends), each
request's per-step acceptance comes from the server's per-request speculative metrics, and the
pass's counters from `/metrics` deltas. Standard library only: every request is one thread."""

from __future__ import annotations

import contextlib
import http.client
import json
import random
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from core.assets import cache_dir
from core.errors import ConfigError, MeasurementError
from core.files import exclusive
from core.generation import (
    EngineStep,
    SamplingSpec,
    SpecCounters,
    TurnRequest,
    TurnResult,
)
from runners.chat import ChatTokenizer
from runners.engine import ProgressFn
from runners.server_records import drafted_steps, parse_counters

# Statuses a busy server answers with: retried with backoff.
RETRYABLE = (429, 503)


@dataclass
class Endpoint:
    """Where a server answers and how to authenticate (the key is never written anywhere)."""

    url: str
    model: str
    api_key: str | None = None
    timeout_s: float = 600.0
    retries: int = 3

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        parts = urllib.parse.urlsplit(self.url)
        kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        return kind(parts.hostname, parts.port, timeout=timeout)

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def get(self, path: str, timeout: float = 10.0) -> tuple[int, str]:
        conn = self._connection(timeout)
        try:
            conn.request("GET", path, headers=self._headers())
            response = conn.getresponse()
            return response.status, response.read().decode("utf-8", "replace")
        finally:
            conn.close()

    def stream(self, path: str, body: dict[str, Any]):
        """The server-sent events of one POST, as parsed JSON objects; busy answers retried."""
        for attempt in range(self.retries + 1):
            conn = self._connection(self.timeout_s)
            try:
                conn.request("POST", path, body=json.dumps(body), headers=self._headers())
                response = conn.getresponse()
                if response.status in RETRYABLE and attempt < self.retries:
                    response.read()
                    time.sleep(0.5 * 2**attempt)
                    continue
                if response.status != 200:
                    raise MeasurementError(f"{self.url}{path} answered HTTP {response.status}: "
                                           f"{response.read().decode('utf-8', 'replace')[:300]}")
                for raw in response:
                    line = raw.decode("utf-8").strip()
                    if line.startswith("data:") and line != "data: [DONE]":
                        yield json.loads(line[len("data:"):])
                return
            finally:
                conn.close()


@dataclass
class _Reply:
    chunks: list[list[int]] = field(default_factory=list)
    metrics: dict[str, Any] | None = None
    started: float = 0.0
    chunk_times: list[float] = field(default_factory=list)
    finished: float = 0.0


@dataclass
class Arrivals:
    """Open-loop load: request i is sent at the i-th arrival of a Poisson process of this rate."""

    rate_per_s: float
    seed: int

    def offsets_s(self, n: int) -> list[float]:
        gaps = random.Random(self.seed).expovariate
        times, t = [], 0.0
        for _ in range(n):
            t += gaps(self.rate_per_s)
            times.append(t)
        return times


class ServerEngine:
    """The Engine protocol over one server; `process` is the server speclens launched, if any;
    with `arrivals`, requests are sent open loop at those times instead of B at a time."""

    def __init__(self, endpoint: Endpoint, target_dir: Path, speculative: bool, process: Any = None,
                 arrivals: Arrivals | None = None) -> None:
        self.endpoint = endpoint
        self.arrivals = arrivals
        self.tokenizer = ChatTokenizer(target_dir)
        self.speculative = speculative
        self.process = process
        self._lock = threading.Lock()
        # Passes of this machine's jobs on one attached server take turns, so that each pass's
        # counter deltas are its own (a sweep's jobs may share the server).
        self._turn = None
        if process is None:
            parts = urllib.parse.urlsplit(endpoint.url)
            self._turn = contextlib.ExitStack()
            self._turn.enter_context(exclusive(cache_dir() / "locks" / f"server-{parts.hostname}-{parts.port}.lock",
                                               wait=True))
        try:
            self._counters_at_start = self._read_counters() if speculative else None
        except BaseException:
            self.close()
            raise

    def chat_token_ids(self, messages: Sequence[dict[str, str]]) -> list[int]:
        return self.tokenizer.chat_token_ids(messages)

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(token_ids)

    def _read_counters(self) -> SpecCounters:
        status, text = self.endpoint.get("/metrics")
        if status != 200:
            raise MeasurementError(f"{self.endpoint.url}/metrics answered HTTP {status}.")
        return parse_counters(text)

    def counters(self) -> SpecCounters | None:
        if not self.speculative:
            return None
        return self._read_counters().since(self._counters_at_start)

    def step_log(self) -> list[EngineStep]:
        return []  # a server does not show its engine steps: step costs are not measured through it

    # Replay is refused for runner=server before any engine starts (runners/registry.py): these
    # are never reached through evals.replay.
    @property
    def scheduler_limits(self) -> tuple[int, int]:
        raise ConfigError("runner=server does not replay; use runner=vllm.")

    def stop_token_ids(self) -> set[int]:
        raise ConfigError("runner=server does not replay; use runner=vllm.")

    def greedy_predictions(self, sequences: Sequence[Sequence[int]]) -> list[list[int]]:
        raise ConfigError("runner=server does not replay; use runner=vllm.")

    def _complete(self, request: TurnRequest, sampling: SamplingSpec, progress: ProgressFn | None) -> _Reply:
        body = {
            "model": self.endpoint.model, "prompt": list(request.prompt_token_ids), "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature, "top_p": sampling.top_p, "ignore_eos": sampling.ignore_eos,
            "stream": True, "stream_options": {"include_usage": True}, "return_token_ids": True,
        }
        if sampling.temperature > 0:
            body["seed"] = sampling.seed
        reply = _Reply(started=time.perf_counter())
        for event in self.endpoint.stream("/v1/completions", body):
            for choice in event.get("choices") or []:
                tokens = choice.get("token_ids") or []
                if tokens:
                    reply.chunk_times.append(time.perf_counter())
                    reply.chunks.append(tokens)
                    if progress:
                        with self._lock:
                            progress(len(tokens))
            if event.get("metrics"):
                reply.metrics = event["metrics"].get("speculative_decoding")
        reply.finished = time.perf_counter()
        return reply

    def generate(
        self, requests: Sequence[TurnRequest], sampling: SamplingSpec, progress: ProgressFn | None = None,
        max_concurrency: int | None = None,
    ) -> list[TurnResult]:
        """Closed loop: at most `max_concurrency` requests in flight, a finished request's slot going
        to the next, as in-process. Open loop (with arrivals): request i is sent at its arrival
        time, however many are in flight."""
        offsets = self.arrivals.offsets_s(len(requests)) if self.arrivals else [None] * len(requests)
        workers = len(requests) if self.arrivals else (max_concurrency or len(requests))
        began = time.perf_counter()

        def send(request: TurnRequest, offset_s: float | None) -> _Reply:
            if offset_s is not None:
                time.sleep(max(0.0, began + offset_s - time.perf_counter()))
            return self._complete(request, sampling, progress)

        try:
            with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
                replies = list(pool.map(send, requests, offsets))
        except (OSError, http.client.HTTPException, json.JSONDecodeError) as exc:
            if self.process is not None and self.process.proc.poll() is not None:
                raise MeasurementError(f"the vLLM server died during the pass (exit {self.process.proc.returncode}); "
                                       f"its log ends: {self.process.log_tail()}") from exc
            raise MeasurementError(f"{self.endpoint.url} stopped answering during the pass "
                                   f"({type(exc).__name__}: {exc}).") from exc
        return [self._result(req, reply) for req, reply in zip(requests, replies)]

    def _result(self, request: TurnRequest, reply: _Reply) -> TurnResult:
        output = [t for chunk in reply.chunks for t in chunk]
        steps, passes = [], len(reply.chunks)
        if self.speculative:
            if reply.metrics is None or reply.metrics.get("per_step_accepted") is None:
                raise MeasurementError(
                    f"{self.endpoint.url} returned no per-step speculative metrics for request {request.key}; "
                    "start the server with --per-request-spec-decode-metrics detailed."
                )
            steps, passes, _ = drafted_steps(len(request.prompt_token_ids), [len(c) for c in reply.chunks],
                                             reply.metrics["per_step_accepted"], reply.metrics["per_step_drafted"])
        times = reply.chunk_times
        return TurnResult(request.request_id, request.turn, len(request.prompt_token_ids), output, self.decode(output),
                          steps, passes, reply.finished - reply.started, times[0] - reply.started if times else None,
                          [b - a for a, b in zip(times, times[1:])])

    def log_file(self) -> Path | None:
        return self.process.log_file if self.process is not None else None

    def close(self) -> None:
        if self.process is not None:
            self.process.stop()
        if self._turn is not None:
            self._turn.close()
