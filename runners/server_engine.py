"""An engine behind an HTTP API (a vLLM, SGLang or TensorRT-LLM server): requests stream as token
ids (the same prompt tokens an in-process run sends), each request's acceptance comes from what the
server reports per request (runners/server_dialects.py), and the pass's counters from its metrics
page's deltas. Standard library only: every request is one thread."""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import socket
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from runners.chat import ChatTokenizer
from runners.engine import EngineFailed, ProgressFn
from runners.server_dialects import DIALECTS, Dialect, Reply, ReplyAcceptance, served_version, unfinished
from runners.server_records import gauges
from speclens.arrivals import arrival_offsets
from speclens.assets import cache_dir
from speclens.errors import ConfigError, MeasurementError
from speclens.files import exclusive
from speclens.generation import (
    EngineStep,
    SamplingSpec,
    SpecCounters,
    TurnRequest,
    TurnResult,
)
from speclens.redact import redact_url

# Statuses a busy server answers with: retried with backoff.
RETRYABLE = (429, 503)
# The line that ends every engine's event stream (vLLM, SGLang and trtllm-serve all send it last).
END_OF_STREAM = "[DONE]"


class BrokenStream(MeasurementError):
    """A streamed answer that did not arrive whole: cut short, an error in place of the answer, no
    end, no tokens. Not retried: the server has run (part of) it and counted it in its counters."""


@dataclass
class Endpoint:
    """Where a server answers and how to authenticate: the API key, or the credentials in the URL
    (http://user:password@host:port, sent as HTTP basic authentication); neither is ever written
    anywhere (`shown` is the URL as speclens prints it)."""

    url: str
    model: str
    api_key: str | None = None
    timeout_s: float = 600.0
    retries: int = 3
    # The connections of the streams in flight (abort() cuts them).
    _live: set[http.client.HTTPConnection] = field(default_factory=set, init=False, repr=False, compare=False)

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        parts = urllib.parse.urlsplit(self.url)
        kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        return kind(parts.hostname, parts.port, timeout=timeout)

    def abort(self) -> None:
        """Cut every stream in flight: its thread's read fails at once instead of waiting for the
        answer (an interrupted run ends without waiting for the server)."""
        for conn in list(self._live):
            with contextlib.suppress(OSError, AttributeError):  # AttributeError: not connected yet
                conn.sock.shutdown(socket.SHUT_RDWR)

    @property
    def shown(self) -> str:
        return redact_url(self.url)

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        parts = urllib.parse.urlsplit(self.url)
        # Credentials written into this run's URL win over an API key from the environment.
        if parts.username is not None:
            userinfo = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
            headers["Authorization"] = f"Basic {base64.b64encode(userinfo.encode()).decode()}"
        elif self.api_key:
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
        """The server-sent events of one POST, as parsed JSON objects; busy answers retried. Raises
        BrokenStream where the server sends an error event or the stream ends before its last line."""
        for attempt in range(self.retries + 1):
            conn = self._connection(self.timeout_s)
            self._live.add(conn)
            try:
                conn.request("POST", path, body=json.dumps(body), headers=self._headers())
                response = conn.getresponse()
                if response.status in RETRYABLE and attempt < self.retries:
                    response.read()
                    time.sleep(0.5 * 2**attempt)
                    continue
                if response.status != 200:
                    raise MeasurementError(
                        f"{self.shown}{path} answered HTTP {response.status}: "
                        f"{response.read().decode('utf-8', 'replace')[:300]}"
                    )
                for raw in response:
                    line = raw.decode("utf-8").strip()
                    if not line.startswith("data:"):
                        continue
                    data = line[len("data:") :].strip()
                    if data == END_OF_STREAM:
                        return
                    event = json.loads(data)
                    if not isinstance(event, dict) or "error" in event or event.get("object") == "error":
                        raise BrokenStream(f"{self.shown}{path} sent an error instead of the answer: {data[:300]}")
                    yield event
                raise BrokenStream(
                    f"the stream from {self.shown}{path} ended before its last line `data: {END_OF_STREAM}` (cut short)"
                )
            finally:
                self._live.discard(conn)
                conn.close()


@dataclass
class Arrivals:
    """Open-loop load: request i is sent at the i-th arrival of a Poisson process of this rate."""

    rate_per_s: float
    seed: int

    def offsets_s(self, n: int) -> list[float]:
        return arrival_offsets(self.rate_per_s, n, "poisson", self.seed)


class ServerEngine:
    """The Engine protocol over one server; `process` is the server speclens launched, if any;
    with `arrivals`, requests are sent open loop at those times instead of B at a time."""

    def __init__(
        self,
        endpoint: Endpoint,
        target_dir: Path,
        speculative: bool,
        process: Any = None,
        arrivals: Arrivals | None = None,
        dialect: Dialect = DIALECTS["vllm"],
        chat_template_kwargs: dict[str, Any] | None = None,
        chat_template: str | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.dialect = dialect
        self.record_granularity = dialect.granularity
        self.counted = dialect.counted
        # Known for a server speclens launched (server_runner.numerics_env), not for an attached one.
        self.threads: int | None = None
        self.model_runner: str | None = None
        self.gpu: dict[str, Any] | None = None
        # the server's own engine and version, as it reports them (not this machine's vLLM)
        self.engine_name, self.engine_version = dialect.name, served_version(endpoint)
        self.arrivals = arrivals
        # speclens renders every prompt itself, so a server sees the template's variables too.
        self.tokenizer = ChatTokenizer(target_dir, chat_template_kwargs, chat_template)
        self.speculative = speculative
        self.process = process
        self._lock = threading.Lock()
        # Passes of this machine's jobs on one attached server take turns, so that each pass's
        # counter deltas are its own (a sweep's jobs may share the server).
        self._turn = None
        if process is None:
            parts = urllib.parse.urlsplit(endpoint.url)
            self._turn = contextlib.ExitStack()
            self._turn.enter_context(
                exclusive(cache_dir() / "locks" / f"server-{parts.hostname}-{parts.port}.lock", wait=True)
            )
        try:
            self._counters_at_start = self._read_counters() if speculative else None
        except BaseException:
            self.close()
            raise

    def chat_token_ids(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> list[int]:
        return self.tokenizer.chat_token_ids(messages, tools)

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(token_ids)

    def _read_counters(self) -> SpecCounters:
        path = self.dialect.metrics_path
        status, text = self.endpoint.get(path)
        if status != 200:
            raise MeasurementError(f"{self.endpoint.shown}{path} answered HTTP {status}.")
        return self.dialect.counters(text)

    def counters(self) -> SpecCounters | None:
        if not self.speculative:
            return None
        return self._read_counters().since(self._counters_at_start)

    def load_gauges(self) -> dict[str, float] | None:
        """The requests running and waiting, and the KV cache's use, from the metrics page (None
        where the server reports neither, or the page does not answer)."""
        try:
            status, text = self.endpoint.get(self.dialect.metrics_path, timeout=2.0)
        except (OSError, http.client.HTTPException):
            return None
        if status != 200:
            return None
        found = gauges(text)
        return found or None

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

    def _complete(self, request: TurnRequest, sampling: SamplingSpec, progress: ProgressFn | None) -> Reply:
        body = self.dialect.body(self.endpoint.model, list(request.prompt_token_ids), sampling)
        reply = Reply(started=time.perf_counter())
        for event in self.endpoint.stream(self.dialect.path, body):
            tokens = self.dialect.read(event, reply)
            if tokens:
                reply.chunk_times.append(time.perf_counter())
                reply.chunks.append(tokens)
                if progress:
                    with self._lock:
                        progress(len(tokens))
        reply.finished = time.perf_counter()
        problem = unfinished(reply)
        if problem is not None:
            raise BrokenStream(f"the answer from {self.endpoint.shown}{self.dialect.path} {problem}")
        return reply

    def generate(
        self,
        requests: Sequence[TurnRequest],
        sampling: SamplingSpec,
        progress: ProgressFn | None = None,
        max_concurrency: int | None = None,
        offsets_s: Sequence[float] | None = None,
    ) -> list[TurnResult]:
        """Closed loop: at most `max_concurrency` requests in flight, a finished request's slot going
        to the next, as in-process. Open loop (`offsets_s`, else the engine's arrivals): request i
        is sent at its arrival time, however many are in flight."""
        if offsets_s is None and self.arrivals is not None:
            offsets_s = self.arrivals.offsets_s(len(requests))
        open_loop = offsets_s is not None
        offsets = list(offsets_s) if open_loop else [None] * len(requests)
        workers = len(requests) if open_loop else (max_concurrency or len(requests))
        began = time.perf_counter()

        def send(request: TurnRequest, offset_s: float | None) -> Reply:
            if offset_s is not None:
                time.sleep(max(0.0, began + offset_s - time.perf_counter()))
            return self._complete(request, sampling, progress)

        pool = ThreadPoolExecutor(max_workers=max(1, workers))
        try:
            futures = [pool.submit(send, request, offset) for request, offset in zip(requests, offsets)]
            failed = next(((r, f.exception()) for r, f in zip(requests, futures) if f.exception() is not None), None)
        except BaseException:
            # Interrupted (SIGINT, SIGTERM): no waiting for the streams in flight; close() ends them.
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
        if failed is None:
            return [self._result(req, f.result()) for req, f in zip(requests, futures)]
        request, failure = failed
        finished = [self._result(req, f.result()) for req, f in zip(requests, futures) if f.exception() is None]
        if isinstance(failure, MeasurementError) and not isinstance(failure, BrokenStream):
            raise EngineFailed(f"request {request.key}: {failure}", finished) from failure
        if not isinstance(failure, (BrokenStream, OSError, http.client.HTTPException, json.JSONDecodeError)):
            raise failure
        kept = f"{len(finished)} of {len(requests)} requests of this turn had finished (kept in the run dir)"
        if self.process is not None and self.process.proc.poll() is not None:
            raise EngineFailed(
                f"the vLLM server died during the pass (exit {self.process.proc.returncode}) at "
                f"request {request.key}; {kept}; its log ends: {self.process.log_tail()}",
                finished,
            ) from failure
        if isinstance(failure, BrokenStream):
            raise EngineFailed(f"request {request.key}: {failure} (not counted); {kept}.", finished) from failure
        raise EngineFailed(
            f"{self.endpoint.shown} stopped answering during the pass at request {request.key} "
            f"({type(failure).__name__}: {failure}); {kept}.",
            finished,
        ) from failure

    def _result(self, request: TurnRequest, reply: Reply) -> TurnResult:
        output = [t for chunk in reply.chunks for t in chunk]
        if not output and reply.text:  # a server that streams text only: its tokens re-encoded
            output = self.tokenizer.encode_text(reply.text)
        acceptance = ReplyAcceptance([], len(reply.chunks))
        if self.speculative:
            if not self.dialect.has_stats(reply.stats):
                raise MeasurementError(
                    f"{self.endpoint.shown} returned no per-request speculative statistics for "
                    f"request {request.key}; {self.dialect.missing_stats}."
                )
            acceptance = self.dialect.acceptance(len(request.prompt_token_ids), reply)
        times = reply.chunk_times
        return TurnResult(
            request.request_id,
            request.turn,
            len(request.prompt_token_ids),
            output,
            self.decode(output),
            acceptance.steps,
            acceptance.target_steps,
            reply.finished - reply.started,
            times[0] - reply.started if times else None,
            [b - a for a, b in zip(times, times[1:])],
            acceptance.totals,
            reply.margins or None,
            finish_reason=reply.finish_reason,
            server_prompt_tokens=reply.prompt_tokens,
        )

    def log_file(self) -> Path | None:
        return self.process.log_file if self.process is not None else None

    def forget_finished(self) -> None:
        pass  # a server's drafter state cannot be reached: its suffix cache keeps the warm-up's answer

    def close(self) -> None:
        self.endpoint.abort()
        if self.process is not None:
            self.process.stop()
        if self._turn is not None:
            self._turn.close()
