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

from core.config import RunConfig
from core.errors import ConfigError, MeasurementError
from runners.engine import Engine, EngineFactory
from runners.server_engine import Arrivals, Endpoint, ServerEngine
from runners.vllm_runner import engine_args

REPO_ROOT = Path(__file__).resolve().parent.parent
# Lines of a failed server's log quoted in the error.
LOG_TAIL_LINES = 15
# An attached server that does not answer /health within this is refused.
ATTACH_TIMEOUT_S = 10.0


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
        print(f"speclens: starting a vLLM server on {self.url} (log {self.log_file})", file=sys.stderr, flush=True)
        while True:
            if self.proc.poll() is not None:
                raise MeasurementError(f"the vLLM server exited with status {self.proc.returncode} while starting; "
                                       f"its log ends: {self.log_tail()}")
            try:
                if endpoint.get("/health", timeout=2.0)[0] == 200:
                    print(f"speclens: server ready after {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)
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
    return Endpoint(url, model, os.environ.get(rc.api_key_env) or None, rc.request_timeout_s, rc.retries)


def engine_factory(cfg: RunConfig, d: int | None) -> EngineFactory:
    rc = cfg.runner

    def start(model_dir: Path, spec: dict[str, Any] | None) -> Engine:
        arrivals = Arrivals(cfg.request_rate, cfg.seed) if cfg.request_rate else None
        if rc.url:
            return ServerEngine(_endpoint(cfg, rc.url, rc.model or cfg.target.model), model_dir, spec is not None,
                                arrivals=arrivals)
        process = ServerProcess(model_dir, spec, cfg)
        try:
            return ServerEngine(_endpoint(cfg, process.url, str(model_dir)), model_dir, spec is not None, process,
                                arrivals)
        except BaseException:
            process.stop()
            raise

    return start


def check_support(cfg: RunConfig, speculative: bool) -> None:
    """Launch: vLLM must be installed. Attach: the server answers, serves the target and, with a
    drafter, reports per-step speculative metrics at this D; baseline passes need launch mode."""
    rc = cfg.runner
    if not rc.url:
        if importlib.util.find_spec("vllm") is None:
            raise ConfigError("runner=server without runner.url launches a vLLM server and needs vLLM installed "
                              "(make install); or attach to a running one with runner.url=http://host:port.")
        return
    if cfg.baseline:
        raise ConfigError("baseline=true with runner.url: the plain and zero-cost passes need servers of their own; "
                          "leave runner.url unset to let speclens launch them, or measure acceptance only.")
    endpoint = _endpoint(cfg, rc.url.rstrip("/"), rc.model or cfg.target.model)
    try:
        status, _ = endpoint.get("/health", timeout=ATTACH_TIMEOUT_S)
    except OSError as exc:
        raise ConfigError(f"runner.url={rc.url}: no answer within {ATTACH_TIMEOUT_S:g} s ({exc}).") from None
    if status != 200:
        raise ConfigError(f"runner.url={rc.url}: /health answered HTTP {status}.")
    status, text = endpoint.get("/v1/models", timeout=ATTACH_TIMEOUT_S)
    models = {m.get("id"): m for m in json.loads(text).get("data", [])} if status == 200 else {}
    if endpoint.model not in models:
        raise ConfigError(f"runner.url={rc.url} does not serve {endpoint.model!r} (it serves: "
                          f"{', '.join(map(str, models)) or 'nothing'}); set runner.model=<served name>.")
    window = models[endpoint.model].get("max_model_len")
    if window is not None and cfg.engine.max_model_len > window:
        # The prompt-length check before sending uses engine.max_model_len: it must not exceed the server's.
        raise ConfigError(f"runner.url={rc.url} serves {endpoint.model!r} with max_model_len={window}, below "
                          f"engine.max_model_len={cfg.engine.max_model_len}; set engine.max_model_len={window}.")
    if not speculative:
        return
    # A repetitive prompt, so that even n-gram matching drafts within a few steps.
    probe = {"model": endpoint.model, "prompt": "1 2 3 4 5 " * 8, "max_tokens": 24, "temperature": 0,
             "stream": True, "stream_options": {"include_usage": True}}
    metrics = None
    for event in endpoint.stream("/v1/completions", probe):
        metrics = (event.get("metrics") or {}).get("speculative_decoding") or metrics
    if metrics is None or metrics.get("per_step_accepted") is None:
        status, text = endpoint.get("/metrics", timeout=ATTACH_TIMEOUT_S)
        if "vllm:spec_decode_num_drafts" not in text:
            raise ConfigError(f"runner.url={rc.url} runs without speculative decoding: start it with "
                              "--speculative-config '<json>' (and --per-request-spec-decode-metrics detailed), or use "
                              "drafter=none.")
        raise ConfigError(f"runner.url={rc.url} reports no per-step speculative metrics: start it with "
                          "--per-request-spec-decode-metrics detailed.")
    if metrics.get("num_spec_tokens") != cfg.d:
        raise ConfigError(f"runner.url={rc.url} drafts num_spec_tokens={metrics.get('num_spec_tokens')} per step "
                          f"but d={cfg.d}; set d={metrics.get('num_spec_tokens')} or restart the server.")
