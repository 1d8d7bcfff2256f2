"""`runner=server`: measure through a vLLM server (OpenAI-compatible API).

- launch (no `runner.url`): for every pass speclens starts a vLLM server for the target with the
  pass's speculative config and `--per-request-spec-decode-metrics detailed` on 127.0.0.1 and a free
  port, waits for `/health`, and stops it when the pass ends, fails or is interrupted (one server
  at a time: plain and verify passes get their own, after the speculative one).
- attach (`runner.url=http://host:port`): measures a server someone else started; before any
  prompt is sent it is checked to answer, to serve the target, and (with a drafter) to report
  per-step speculative metrics at the run's D.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.config import Choice, RunConfig
from core.console import console
from core.errors import ConfigError, MeasurementError
from runners.engine import Engine, EngineFactory
from runners.server_dialects import DIALECTS, OWNED_BY, Dialect, Reply
from runners.server_engine import Arrivals, Endpoint, ServerEngine
from runners.server_records import prometheus_samples
from runners.vllm_runner import engine_args

REPO_ROOT = Path(__file__).resolve().parent.parent
# Lines of a failed server's log quoted in the error.
LOG_TAIL_LINES = 15
# An attached server that does not answer /health within this is refused.
ATTACH_TIMEOUT_S = 10.0


class ServerKind(Choice):
    auto = "auto"
    vllm = "vllm"
    sglang = "sglang"
    trtllm = "trtllm"


@dataclass
class ServerRunnerConfig:
    """runner=server: through an OpenAI-compatible server, launched by speclens or attached to."""

    # An attached server's base URL (http://host:port); null: launch one per pass.
    url: str | None = None
    # The name the attached server serves the target under (default: target.model).
    model: str | None = None
    # The environment variable holding the API key (read when sending, never written anywhere).
    api_key_env: str = "OPENAI_API_KEY"
    # Seconds a launched server may take to answer /health.
    start_timeout_s: float = 600.0
    # Seconds one request may take.
    request_timeout_s: float = 600.0
    # Retries of a request the server answers 429/503 (busy), with backoff.
    retries: int = 3
    # No other traffic on the server: its counters must equal the records exactly (else: reported).
    exclusive: bool = True
    # The serving engine behind runner.url (auto: detected from /v1/models); speclens launches vLLM only.
    engine: ServerKind = ServerKind.auto
    # With runner.url and baseline=true: a server of the same target without speculative decoding.
    baseline_url: str | None = None


def server_flags(cfg: RunConfig) -> list[str]:
    """`engine.*` as vLLM server flags (the same arguments an in-process engine gets)."""
    flags: list[str] = []
    for key, value in engine_args(cfg.engine, cfg.seed).items():
        flag = "--" + key.replace("_", "-")
        if value is None:
            continue
        if isinstance(value, bool):  # vLLM's boolean flags take --x / --no-x
            flags.append(flag if value else f"--no-{flag[2:]}")
        else:
            flags += [flag, json.dumps(value) if isinstance(value, (dict, list)) else str(value)]
    return flags


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """A vLLM server speclens started; stopped (its whole process group) on stop(), at exit, or
    when start-up fails."""

    def __init__(self, model_dir: Path, spec: dict[str, Any] | None, cfg: RunConfig) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        fd, log = tempfile.mkstemp(prefix="speclens-server-", suffix=".log")
        self.log_file = Path(log)
        command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
                   "--host", "127.0.0.1", "--port", str(self.port), *server_flags(cfg)]
        if spec is not None:
            command += ["--speculative-config", json.dumps(spec), "--per-request-spec-decode-metrics", "detailed"]
        # custom_class proposers (the zero-cost verify pass) are imported in the server's workers.
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(cfg.engine.cpu_kvcache_space_gib),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
        with os.fdopen(fd, "w") as out:
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        atexit.register(self.stop)
        try:
            self._wait_healthy(cfg.runner.start_timeout_s)
        except BaseException:
            self.stop()
            raise

    def _wait_healthy(self, timeout_s: float) -> None:
        endpoint = Endpoint(self.url, "")
        start = time.monotonic()
        print(f"speclens: starting a vLLM server on {self.url} (log {self.log_file})", file=console(), flush=True)
        while True:
            if self.proc.poll() is not None:
                raise MeasurementError(f"the vLLM server exited with status {self.proc.returncode} while starting; "
                                       f"its log ends: {self.log_tail()}")
            try:
                if endpoint.get("/health", timeout=2.0)[0] == 200:
                    print(f"speclens: server ready after {time.monotonic() - start:.0f} s", file=console(), flush=True)
                    return
            except OSError:
                pass
            if time.monotonic() - start > timeout_s:
                raise MeasurementError(f"the vLLM server did not answer /health within runner.start_timeout_s="
                                       f"{timeout_s:g} s; its log ends: {self.log_tail()}")
            time.sleep(0.5)

    def log_tail(self) -> str:
        lines = self.log_file.read_text(errors="replace").splitlines() if self.log_file.is_file() else []
        return " | ".join(line.strip() for line in lines[-LOG_TAIL_LINES:] if line.strip()) or "(empty)"

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        atexit.unregister(self.stop)


def _endpoint(cfg: RunConfig, url: str, model: str) -> Endpoint:
    rc = cfg.runner
    return Endpoint(url.rstrip("/"), model, os.environ.get(rc.api_key_env) or None, rc.request_timeout_s, rc.retries)


def _served(endpoint: Endpoint) -> dict[str, dict[str, Any]]:
    status, text = endpoint.get("/v1/models", timeout=ATTACH_TIMEOUT_S)
    return {m.get("id"): m for m in json.loads(text).get("data", [])} if status == 200 else {}


def dialect_of(cfg: RunConfig, endpoint: Endpoint) -> Dialect:
    """runner.engine, or the engine the server names as its models' owner (SGLang also answers
    /get_server_info); vLLM where nothing tells."""
    kind = ServerKind.of(cfg.runner.engine, "runner.engine")
    if kind != ServerKind.auto:
        return DIALECTS[kind.value]
    owner = str((_served(endpoint).get(endpoint.model) or {}).get("owned_by", "")).lower()
    if owner in OWNED_BY:
        return DIALECTS[OWNED_BY[owner]]
    with contextlib.suppress(OSError):
        if endpoint.get("/get_server_info", timeout=ATTACH_TIMEOUT_S)[0] == 200:
            return DIALECTS["sglang"]
    return DIALECTS["vllm"]


def engine_factory(cfg: RunConfig, d: int | None) -> EngineFactory:
    rc = cfg.runner

    def start(model_dir: Path, spec: dict[str, Any] | None) -> Engine:
        arrivals = Arrivals(cfg.request_rate, cfg.seed) if cfg.request_rate else None
        if rc.url:
            endpoint = _endpoint(cfg, rc.url if spec is not None else rc.baseline_url, rc.model or cfg.target.model)
            return ServerEngine(endpoint, model_dir, spec is not None, arrivals=arrivals,
                                dialect=dialect_of(cfg, endpoint))
        process = ServerProcess(model_dir, spec, cfg)
        try:
            return ServerEngine(_endpoint(cfg, process.url, str(model_dir)), model_dir, spec is not None, process,
                                arrivals)
        except BaseException:
            process.stop()
            raise

    return start


def check_support(cfg: RunConfig, speculative: bool) -> None:
    """Launch: vLLM must be installed. Attach: each server answers and serves the target; with a
    drafter, the speculative one reports per-request statistics at this D, and the baseline one
    (runner.baseline_url) does not speculate."""
    rc = cfg.runner
    kind = ServerKind.of(rc.engine, "runner.engine")
    if not rc.url:
        if kind not in (ServerKind.auto, ServerKind.vllm):
            raise ConfigError(f"runner.engine={kind}: speclens launches vLLM servers only; start your {kind} server "
                              "and attach to it with runner.url=http://host:port.")
        if rc.baseline_url:
            raise ConfigError("runner.baseline_url goes with runner.url (attached servers); without runner.url "
                              "speclens launches the plain server itself.")
        if importlib.util.find_spec("vllm") is None:
            raise ConfigError("runner=server without runner.url launches a vLLM server and needs vLLM installed "
                              "(make install); or attach to a running one with runner.url=http://host:port.")
        return
    if cfg.baseline and speculative and not rc.baseline_url:
        raise ConfigError("baseline=true with runner.url needs runner.baseline_url=http://host:port, a server of the "
                          "same target without speculative decoding (or leave runner.url unset to let speclens "
                          "launch both).")
    endpoint = _check_serves_target(cfg, rc.url, "runner.url")
    dialect = dialect_of(cfg, endpoint)
    if speculative:
        _check_speculates(cfg, endpoint, dialect)
    if cfg.baseline and speculative:
        plain = _check_serves_target(cfg, rc.baseline_url, "runner.baseline_url")
        plain_dialect = dialect_of(cfg, plain)
        status, text = plain.get(plain_dialect.metrics_path, timeout=ATTACH_TIMEOUT_S)
        if status == 200 and plain_dialect.serves_speculation(text):
            raise ConfigError(f"runner.baseline_url={rc.baseline_url} serves with speculative decoding; the baseline "
                              "must be plain decoding (start it without a speculative config).")


def _check_serves_target(cfg: RunConfig, url: str, key: str) -> Endpoint:
    endpoint = _endpoint(cfg, url, cfg.runner.model or cfg.target.model)
    try:
        status, _ = endpoint.get("/health", timeout=ATTACH_TIMEOUT_S)
    except OSError as exc:
        raise ConfigError(f"{key}={url}: no answer within {ATTACH_TIMEOUT_S:g} s ({exc}).") from None
    if status != 200:
        raise ConfigError(f"{key}={url}: /health answered HTTP {status}.")
    models = _served(endpoint)
    if endpoint.model not in models:
        raise ConfigError(f"{key}={url} does not serve {endpoint.model!r} (it serves: "
                          f"{', '.join(map(str, models)) or 'nothing'}); set runner.model=<served name>.")
    window = models[endpoint.model].get("max_model_len")
    if window is not None and cfg.engine.max_model_len > window:
        # The prompt-length check before sending uses engine.max_model_len: it must not exceed the server's.
        raise ConfigError(f"{key}={url} serves {endpoint.model!r} with max_model_len={window}, below "
                          f"engine.max_model_len={cfg.engine.max_model_len}; set engine.max_model_len={window}.")
    return endpoint


# A repetitive prompt, so that even n-gram matching drafts within a few steps.
PROBE_TEXT = "1 2 3 4 5 " * 8


def _check_speculates(cfg: RunConfig, endpoint: Endpoint, dialect: Dialect) -> None:
    """The attached server drafts, reports what speclens records, at this run's D."""
    url = cfg.runner.url
    status, metrics_text = endpoint.get(dialect.metrics_path, timeout=ATTACH_TIMEOUT_S)
    if dialect.name == "trtllm":
        if status != 200 or not dialect.serves_speculation(metrics_text):
            raise ConfigError(f"runner.url={url} (TensorRT-LLM) shows no speculative counters at "
                              f"{dialect.metrics_path}: {dialect.missing_stats}, with a speculative_config.")
        served_d = _label_value(metrics_text, "trtllm_speculative_config_info", "max_draft_len")
    else:
        body = ({"model": endpoint.model, "prompt": PROBE_TEXT, "max_tokens": 24, "temperature": 0, "stream": True,
                 "stream_options": {"include_usage": True}} if dialect.name == "vllm" else
                {"text": PROBE_TEXT, "sampling_params": {"max_new_tokens": 24, "temperature": 0}, "stream": True})
        reply = Reply()
        for event in endpoint.stream(dialect.path, body):
            dialect.read(event, reply)
        if not dialect.has_stats(reply.stats):
            if not (status == 200 and dialect.serves_speculation(metrics_text)) and dialect.name == "vllm":
                raise ConfigError(f"runner.url={url} runs without speculative decoding: start it with "
                                  "--speculative-config '<json>' (and --per-request-spec-decode-metrics detailed), "
                                  "or use drafter=none.")
            raise ConfigError(f"runner.url={url} ({dialect.name}) reports no per-request speculative statistics: "
                              f"{dialect.missing_stats}.")
        served_d = reply.stats.get("num_spec_tokens") if dialect.name == "vllm" else _sglang_steps(endpoint)
    if served_d is not None and int(served_d) != cfg.d:
        raise ConfigError(f"runner.url={url} drafts num_spec_tokens={served_d} per step but d={cfg.d}; set "
                          f"d={served_d} or restart the server.")


def _sglang_steps(endpoint: Endpoint) -> int | None:
    """SGLang's draft depth (speculative_num_steps) from /get_server_info, where it says."""
    with contextlib.suppress(OSError, ValueError):
        status, text = endpoint.get("/get_server_info", timeout=ATTACH_TIMEOUT_S)
        if status == 200:
            return json.loads(text).get("speculative_num_steps")
    return None


def _label_value(metrics_text: str, metric: str, label: str) -> str | None:
    return next((labels[label] for name, labels, _ in prometheus_samples(metrics_text)
                 if name == metric and label in labels), None)
