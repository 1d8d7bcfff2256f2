"""`runner=server`: measure through a vLLM server (OpenAI-compatible API).

- launch (no `runner.url`): for every pass speclens starts a vLLM server for the target with the
  pass's speculative config and `--per-request-spec-decode-metrics detailed` on 127.0.0.1 and a free
  port, waits for `/health`, and stops it when the pass ends, fails or is interrupted by SIGINT or
  SIGTERM (one server at a time: plain and verify passes get their own, after the speculative one).
- attach (`runner.url=http://host:port`, `http://user:password@host:port` for basic authentication):
  measures a server someone else started; before any prompt is sent it is checked to answer, to
  serve the target, and (with a drafter) to report per-step speculative metrics at the run's D, or
  (drafter=none) not to speculate.
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import importlib.util
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from runners.engine import Engine, EngineFactory
from runners.model_runner import check_requested, check_v2_runs_here
from runners.parent_watch import launch
from runners.server_dialects import (
    DIALECTS,
    OWNED_BY,
    TRTLLM_PER_REQUEST,
    Dialect,
    Reply,
    Trtllm,
    trtllm_reports_per_request,
)
from runners.server_engine import Arrivals, Endpoint, ServerEngine
from runners.server_records import prometheus_samples
from runners.vllm_runner import check_batch_invariance, engine_args
from speclens.config import Choice, RunConfig
from speclens.console import console
from speclens.errors import ConfigError, MeasurementError
from speclens.redact import redact_url

REPO_ROOT = Path(__file__).resolve().parent.parent
# Lines of a failed server's log quoted in the error.
LOG_TAIL_LINES = 15
# An attached server that does not answer /health within this is refused.
ATTACH_TIMEOUT_S = 10.0
# The longest runner.start_timeout_s / runner.request_timeout_s: a day (more is a typo, and beyond
# what a socket timeout can hold).
MAX_TIMEOUT_S = 86400.0
# The most retries of a busy answer: the backoff doubles from 0.5 s, so 10 already wait 8.5 min in all.
MAX_RETRIES = 10


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


def numerics_env(cfg: RunConfig) -> dict[str, str]:
    """The launched server computes as the in-process engine does: its CPU worker bound to every CPU
    this process may use, one thread each (vLLM's own binding would keep one core back for its
    engine process, and bf16 outputs follow the thread count); a VLLM_CPU_OMP_THREADS_BIND already
    set wins. With engine.batch_invariant, vLLM's batch-invariant kernels."""
    env = {
        "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND")
        or ",".join(str(cpu) for cpu in sorted(os.sched_getaffinity(0)))
    }
    if cfg.engine.batch_invariant:
        env["VLLM_BATCH_INVARIANT"] = "1"
    if cfg.engine.model_runner != "auto":  # vLLM's own switch (runners/model_runner.py)
        env["VLLM_USE_V2_MODEL_RUNNER"] = "1" if cfg.engine.model_runner == "v2" else "0"
    return env


def parse_cpus(bind: str) -> list[int]:
    """The CPUs of a VLLM_CPU_OMP_THREADS_BIND list ("0,2-3"; one rank's: the first "|" part)."""
    cpus: list[int] = []
    for part in bind.split("|")[0].split(","):
        first, _, last = part.partition("-")
        if first.strip().isdigit():
            cpus += range(int(first), int(last or first) + 1)
    return cpus


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """A vLLM server speclens started; stopped (its whole process group) on stop(), at exit, or
    when start-up fails; and by itself once this process is gone (runners/parent_watch.py)."""

    def __init__(self, model_dir: Path, spec: dict[str, Any] | None, cfg: RunConfig) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        fd, log = tempfile.mkstemp(prefix="speclens-server-", suffix=".log")
        self.log_file = Path(log)
        command = [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model_dir),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *server_flags(cfg),
        ]
        if spec is not None:
            command += ["--speculative-config", json.dumps(spec), "--per-request-spec-decode-metrics", "detailed"]
        # custom_class proposers (the zero-cost verify pass) are imported in the server's workers.
        env = {
            **os.environ,
            "VLLM_CPU_KVCACHE_SPACE": str(cfg.engine.cpu_kvcache_space_gib),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
            **numerics_env(cfg),
        }
        self.threads = len(parse_cpus(env["VLLM_CPU_OMP_THREADS_BIND"]))
        self._sigterm = _interrupt_on_sigterm()
        try:
            with os.fdopen(fd, "w") as out:
                self.proc = launch(command, env, stdout=out, stderr=subprocess.STDOUT)
        except BaseException:
            _restore_sigterm(self._sigterm)
            raise
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
                raise MeasurementError(
                    f"the vLLM server exited with status {self.proc.returncode} while starting; "
                    f"its log ends: {self.log_tail()}"
                )
            try:
                if endpoint.get("/health", timeout=2.0)[0] == 200:
                    print(f"speclens: server ready after {time.monotonic() - start:.0f} s", file=console(), flush=True)
                    return
            except OSError:
                pass
            if time.monotonic() - start > timeout_s:
                raise MeasurementError(
                    f"the vLLM server did not answer /health within runner.start_timeout_s="
                    f"{timeout_s:g} s; its log ends: {self.log_tail()}"
                )
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
        _restore_sigterm(self._sigterm)
        self._sigterm = None


def _interrupted(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _interrupt_on_sigterm() -> Any:
    """SIGTERM raised as KeyboardInterrupt (as SIGINT is) while a launched server runs, so that the
    run unwinds and stops the server: Python's default SIGTERM ends the process on the spot, and the
    server, in its own session, would outlive it. The handler it replaces, or None where none was
    replaced (signals are handled in the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.signal(signal.SIGTERM, _interrupted)
    return signal.SIG_DFL if previous is None else previous  # None: a handler not set from Python


def _restore_sigterm(previous: Any) -> None:
    if previous is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, previous)


def _endpoint(cfg: RunConfig, url: str, model: str) -> Endpoint:
    rc = cfg.runner
    return Endpoint(url.rstrip("/"), model, os.environ.get(rc.api_key_env) or None, rc.request_timeout_s, rc.retries)


def _served(endpoint: Endpoint, key: str) -> dict[str, dict[str, Any]]:
    """The model cards of /v1/models, by id."""
    status, text = endpoint.get("/v1/models", timeout=ATTACH_TIMEOUT_S)
    if status != 200:
        refused = (
            " (credentials missing or refused: the API key in the variable runner.api_key_env names, or "
            "user:password@ in the URL)"
        )
        raise ConfigError(
            f"{key}={endpoint.shown}: /v1/models answered HTTP {status}{refused if status in (401, 403) else ''}."
        )
    with contextlib.suppress(ValueError):
        body = json.loads(text)
        if isinstance(body, dict) and isinstance(body.get("data"), list):
            return {str(m.get("id")): m for m in body["data"] if isinstance(m, dict)}
    raise ConfigError(
        f"{key}={endpoint.shown}: /v1/models answered {text[:80]!r}, not an OpenAI model list "
        '({"data": [{"id": ...}]}); attach to an OpenAI-compatible server (vLLM, SGLang, trtllm-serve).'
    )


def dialect_of(cfg: RunConfig, endpoint: Endpoint, key: str) -> Dialect:
    """runner.engine, or the engine the server names as its models' owner (SGLang also answers
    /get_server_info); vLLM where nothing tells."""
    kind = ServerKind.of(cfg.runner.engine, "runner.engine")
    if kind != ServerKind.auto:
        return _refined(DIALECTS[kind.value], endpoint)
    owner = str((_served(endpoint, key).get(endpoint.model) or {}).get("owned_by", "")).lower()
    if owner in OWNED_BY:
        return _refined(DIALECTS[OWNED_BY[owner]], endpoint)
    with contextlib.suppress(OSError):
        if endpoint.get("/get_server_info", timeout=ATTACH_TIMEOUT_S)[0] == 200:
            return DIALECTS["sglang"]
    return DIALECTS["vllm"]


# Per server (URL, model): a speculating trtllm-serve's probe reply where it reports each
# request's acceptance, else None.
_TRTLLM_PROBES: dict[tuple[str, str], Reply | None] = {}


def _refined(dialect: Dialect, endpoint: Endpoint) -> Dialect:
    """TensorRT-LLM's per-request dialect where the server's replies carry it (PR #19311), found
    once per server by a probe request; its counters-only dialect otherwise."""
    if dialect.name != "trtllm":
        return dialect
    return TRTLLM_PER_REQUEST if _trtllm_probe(endpoint, dialect) is not None else dialect


def _trtllm_probe(endpoint: Endpoint, dialect: Dialect) -> Reply | None:
    key = (endpoint.url, endpoint.model)
    if key not in _TRTLLM_PROBES:
        status, text = endpoint.get(dialect.metrics_path, timeout=ATTACH_TIMEOUT_S)
        reply = _probe(endpoint, dialect) if status == 200 and dialect.serves_speculation(text) else None
        _TRTLLM_PROBES[key] = reply if reply is not None and trtllm_reports_per_request(reply.stats) else None
    return _TRTLLM_PROBES[key]


def _probe(endpoint: Endpoint, dialect: Dialect) -> Reply:
    """A short greedy request on a repetitive prompt, as the server streams it back."""
    body = (
        {"text": PROBE_TEXT, "sampling_params": {"max_new_tokens": 24, "temperature": 0}, "stream": True}
        if dialect.name == "sglang"
        else {
            "model": endpoint.model,
            "prompt": PROBE_TEXT,
            "max_tokens": 24,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    reply = Reply()
    for event in endpoint.stream(dialect.path, body):
        dialect.read(event, reply)
    return reply


def engine_factory(cfg: RunConfig, d: int | None) -> EngineFactory:
    rc = cfg.runner
    template_kwargs = dict(cfg.chat_template_kwargs)

    def start(model_dir: Path, spec: dict[str, Any] | None) -> Engine:
        arrivals = Arrivals(cfg.request_rate, cfg.seed) if cfg.request_rate else None
        if rc.url is not None:
            # A drafter's plain passes go to the baseline server; drafter=none's, to runner.url itself.
            beside_drafter = spec is None and d is not None
            key, url = ("runner.baseline_url", rc.baseline_url) if beside_drafter else ("runner.url", rc.url)
            endpoint = _endpoint(cfg, url, rc.model or cfg.target.model)
            return ServerEngine(
                endpoint,
                model_dir,
                spec is not None,
                arrivals=arrivals,
                dialect=dialect_of(cfg, endpoint, key),
                chat_template_kwargs=template_kwargs,
                chat_template=cfg.target.chat_template,
            )
        check_requested(cfg.engine.model_runner, spec["method"] if spec is not None else None)
        process = ServerProcess(model_dir, spec, cfg)
        try:
            engine = ServerEngine(
                _endpoint(cfg, process.url, str(model_dir)),
                model_dir,
                spec is not None,
                process,
                arrivals,
                chat_template_kwargs=template_kwargs,
                chat_template=cfg.target.chat_template,
            )
            engine.threads = process.threads
            # set through vLLM's switch where asked for; under auto the server chose, unseen from here
            engine.model_runner = None if cfg.engine.model_runner == "auto" else cfg.engine.model_runner
            return engine
        except BaseException:
            process.stop()
            raise

    return start


def check_config(cfg: RunConfig) -> None:
    """runner.* in range: the URLs are server addresses, the timeouts and retries sensible."""
    rc = cfg.runner
    for key, url in (("runner.url", rc.url), ("runner.baseline_url", rc.baseline_url)):
        if url is not None:
            problem = url_problem(url)
            if problem is not None:
                raise ConfigError(
                    f"{key}={redact_url(url) or repr(url)}: {problem}; give http://host:port or "
                    "https://host:port (user:password@ before the host where the server needs it)."
                )
    timeouts = (("runner.start_timeout_s", rc.start_timeout_s), ("runner.request_timeout_s", rc.request_timeout_s))
    for key, seconds in timeouts:
        if not (math.isfinite(seconds) and 0 < seconds <= MAX_TIMEOUT_S):
            raise ConfigError(f"{key}={seconds:g}: must be a number of seconds > 0 and <= {MAX_TIMEOUT_S:g} (a day).")
    if not 0 <= rc.retries <= MAX_RETRIES:
        raise ConfigError(f"runner.retries={rc.retries}: must be an integer from 0 (no retry) to {MAX_RETRIES}.")


def url_problem(url: str) -> str | None:
    """What keeps `url` from being http(s)://host:port, or None."""
    if not url.strip():
        return "is empty"
    if "://" not in url:
        return "has no scheme"
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return f"has the scheme {parts.scheme!r}, not http or https"
    if not parts.hostname:
        return "has no host"
    try:
        port = parts.port
    except ValueError:
        port = -1
    if port is None:
        return "has no port"
    if not 0 < port <= 65535:
        return f"has the port {parts.netloc.rpartition(':')[2]!r}, not a number from 1 to 65535"
    if parts.path.strip("/") or parts.query or parts.fragment:
        return "has a path, query or fragment after the port (speclens adds the API's paths itself)"
    return None


def check_support(cfg: RunConfig, speculative: bool) -> None:
    """runner.* in range. Launch: vLLM must be installed. Attach: each server answers and serves the
    target; with a drafter, the speculative one reports per-request statistics at this D, and the
    baseline one (runner.baseline_url) does not speculate; with drafter=none, runner.url does not
    speculate either."""
    check_config(cfg)
    kind = ServerKind.of(cfg.runner.engine, "runner.engine")
    if cfg.runner.url is None:
        _check_launch(cfg, kind)
        return
    for key, value, why in _settings_the_server_owns(cfg):
        if value is not None:
            raise ConfigError(
                f"{key}={value} with runner.url: {why}; leave {key} unset, or let speclens launch the server."
            )
    _check_attached(cfg, speculative)


def _settings_the_server_owns(cfg: RunConfig) -> list[tuple[str, Any, str]]:
    """Each engine setting an attached server chose where it started: its key, the value this run
    sets (None where it is left unset) and where the server decides it."""
    engine, method = cfg.engine, cfg.verify.method
    return [
        (
            "engine.batch_invariant",
            "true" if engine.batch_invariant else None,
            "an attached server's kernels are chosen where it starts (VLLM_BATCH_INVARIANT=1 in its environment)",
        ),
        (
            "engine.model_runner",
            None if engine.model_runner == "auto" else engine.model_runner,
            "an attached server's model runner is chosen where it starts (VLLM_USE_V2_MODEL_RUNNER in its environment)",
        ),
        (
            "verify.method",
            None if method == "standard" else method,
            "an attached server verifies as its --speculative-config says (rejection_sample_method)",
        ),
        (
            "engine.kv_cache_dtype",
            None if engine.kv_cache_dtype == "auto" else engine.kv_cache_dtype,
            "an attached server's KV cache is chosen where it starts (its --kv-cache-dtype)",
        ),
    ]


def _check_launch(cfg: RunConfig, kind: ServerKind) -> None:
    """A server speclens launches: a vLLM one, with vLLM installed here, and no baseline URL."""
    check_requested(cfg.engine.model_runner, None)
    check_batch_invariance(cfg)
    if kind not in (ServerKind.auto, ServerKind.vllm):
        raise ConfigError(
            f"runner.engine={kind}: speclens launches vLLM servers only; start your {kind} server "
            "and attach to it with runner.url=http://host:port."
        )
    if cfg.runner.baseline_url:
        raise ConfigError(
            "runner.baseline_url goes with runner.url (attached servers); without runner.url "
            "speclens launches the plain server itself."
        )
    if importlib.util.find_spec("vllm") is None:
        raise ConfigError(
            "runner=server without runner.url launches a vLLM server and needs vLLM installed "
            "(make install); or attach to a running one with runner.url=http://host:port."
        )
    check_v2_runs_here(cfg.engine.model_runner)


def _check_attached(cfg: RunConfig, speculative: bool) -> None:
    """Attached servers: each answers and serves the target; the speculative one speculates as this
    run asks, and the baseline (and runner.url with drafter=none) does not speculate."""
    rc = cfg.runner
    if cfg.baseline and speculative and not rc.baseline_url:
        raise ConfigError(
            "baseline=true with runner.url needs runner.baseline_url=http://host:port, a server of the "
            "same target without speculative decoding (or leave runner.url unset to let speclens "
            "launch both)."
        )
    endpoint = _check_serves_target(cfg, rc.url, "runner.url")
    with _answering("runner.url", endpoint):
        dialect = dialect_of(cfg, endpoint, "runner.url")
        if speculative:
            _check_speculates(cfg, endpoint, dialect)
        else:
            _check_plain(
                endpoint,
                dialect,
                "runner.url",
                "drafter=none measures plain decoding: attach to a server "
                "started without a speculative config, or set drafter= and d= to what it serves",
            )
    if cfg.baseline and speculative:
        plain = _check_serves_target(cfg, rc.baseline_url, "runner.baseline_url")
        with _answering("runner.baseline_url", plain):
            _check_plain(
                plain,
                dialect_of(cfg, plain, "runner.baseline_url"),
                "runner.baseline_url",
                "the baseline must be plain decoding (start it without a speculative config)",
            )


@contextlib.contextmanager
def _answering(key: str, endpoint: Endpoint) -> Iterator[None]:
    """A server that stops answering, or answers what no server sends, while it is checked: refused
    in one line."""
    try:
        yield
    except (OSError, http.client.HTTPException, ValueError, MeasurementError) as exc:
        raise ConfigError(
            f"{key}={endpoint.shown} failed while it was checked, before any prompt was sent "
            f"({type(exc).__name__}: {exc})."
        ) from None


def _check_plain(endpoint: Endpoint, dialect: Dialect, key: str, advice: str) -> None:
    status, text = endpoint.get(dialect.metrics_path, timeout=ATTACH_TIMEOUT_S)
    if status == 200 and dialect.serves_speculation(text):
        raise ConfigError(f"{key}={endpoint.shown} serves with speculative decoding; {advice}.")


def _check_serves_target(cfg: RunConfig, url: str, key: str) -> Endpoint:
    endpoint = _endpoint(cfg, url, cfg.runner.model or cfg.target.model)
    try:
        status, _ = endpoint.get("/health", timeout=ATTACH_TIMEOUT_S)
    except (OSError, http.client.HTTPException) as exc:
        raise ConfigError(f"{key}={endpoint.shown}: no answer within {ATTACH_TIMEOUT_S:g} s ({exc}).") from None
    if status != 200:
        raise ConfigError(f"{key}={endpoint.shown}: /health answered HTTP {status}.")
    with _answering(key, endpoint):
        models = _served(endpoint, key)
    if endpoint.model not in models:
        raise ConfigError(
            f"{key}={endpoint.shown} does not serve {endpoint.model!r} (it serves: "
            f"{', '.join(map(str, models)) or 'nothing'}); set runner.model=<served name>."
        )
    window = models[endpoint.model].get("max_model_len")
    if isinstance(window, int) and cfg.engine.max_model_len > window:
        # The prompt-length check before sending uses engine.max_model_len: it must not exceed the server's.
        raise ConfigError(
            f"{key}={endpoint.shown} serves {endpoint.model!r} with max_model_len={window}, below "
            f"engine.max_model_len={cfg.engine.max_model_len}; set engine.max_model_len={window}."
        )
    return endpoint


# A repetitive prompt, so that even n-gram matching drafts within a few steps.
PROBE_TEXT = "1 2 3 4 5 " * 8


def _check_speculates(cfg: RunConfig, endpoint: Endpoint, dialect: Dialect) -> None:
    """The attached server drafts, reports what speclens records, at this run's D."""
    url = endpoint.shown
    status, metrics_text = endpoint.get(dialect.metrics_path, timeout=ATTACH_TIMEOUT_S)
    if dialect.name == "trtllm":
        if status != 200 or not dialect.serves_speculation(metrics_text):
            raise ConfigError(
                f"runner.url={url} (TensorRT-LLM) shows no speculative counters at "
                f"{dialect.metrics_path}: {Trtllm.missing_stats}, with a speculative_config."
            )
        served_d = _label_value(metrics_text, "trtllm_speculative_config_info", "max_draft_len")
        probe = _trtllm_probe(endpoint, dialect)
        if probe is not None:  # per request: its own D, where it says (null under a schedule)
            served_d = dialect.served_d(probe, endpoint) or served_d
    else:
        reply = _probe(endpoint, dialect)
        if not dialect.has_stats(reply.stats):
            if not (status == 200 and dialect.serves_speculation(metrics_text)) and dialect.name == "vllm":
                raise ConfigError(
                    f"runner.url={url} runs without speculative decoding: start it with "
                    "--speculative-config '<json>' (and --per-request-spec-decode-metrics detailed), "
                    "or use drafter=none."
                )
            raise ConfigError(
                f"runner.url={url} ({dialect.name}) reports no per-request speculative statistics: "
                f"{dialect.missing_stats}."
            )
        served_d = dialect.served_d(reply, endpoint)
    if served_d is not None and int(served_d) != cfg.d:
        raise ConfigError(
            f"runner.url={url} drafts num_spec_tokens={served_d} per step but d={cfg.d}; set "
            f"d={served_d} or restart the server."
        )


def _label_value(metrics_text: str, metric: str, label: str) -> str | None:
    return next(
        (labels[label] for name, labels, _ in prometheus_samples(metrics_text) if name == metric and label in labels),
        None,
    )
