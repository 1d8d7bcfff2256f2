"""runner=server against faults: streams that do not carry a finished answer, a launched server's
run stopped with SIGTERM, runner.* values that are no server address or no sensible number,
drafter=none on an attached server, and credentials inside a URL (sent, and written nowhere)."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from evals.embedded.target import ensure_smollm2
from evals.pipeline.compose import compose_config, job_dirname
from evals.pipeline.run_job import run
from evals.sweep_report import redact_saved_config
from speclens.errors import ConfigError, MeasurementError, exit_status, user_message
from speclens.file_formats.records import read_parquet
from speclens.file_formats.run_files import record_failure
from speclens.redact import redact_overrides
from tests.unit.conftest import write_checkpoint, write_questions
from tests.unit.test_server_dialects import Scripted
from tests.unit.test_server_runner import ROWS, D, FakeVllm, Handler
from tests.wandb_offline import offline_runs

REPO = Path(__file__).resolve().parents[2]
SECRET = "pw-do-not-log-4711"
# The POSTs of an attached run with batch_sizes=[1]: the check's probe, the warm-up, then q0, q1, q2.
THIRD_REQUEST = 4


@pytest.fixture(scope="module")
def smollm2():
    return ensure_smollm2()


def with_credentials(url: str, user: str = "me") -> str:
    return url.replace("http://", f"http://{user}:{SECRET}@")


def attach(tmp_path: Path, smollm2: Path, url: str, *overrides: str, drafter: str = "ngram"):
    tmp_path.mkdir(parents=True, exist_ok=True)
    questions = write_questions(tmp_path / "q.jsonl", ROWS)
    cfg = compose_config(
        [
            "runner=server",
            f"runner.url={url}",
            "target=custom",
            f"target.model={smollm2}",
            "dataset=jsonl",
            f"dataset.path={questions}",
            f"drafter={drafter}",
            f"d={D}",
            "engine.max_model_len=2048",
            *overrides,
        ]
    )
    return run(cfg, tmp_path / "run", progress=lambda label: None)


# --- 1. a stream that does not carry a finished answer --------------------------------------------


def _cut(payloads):  # the server went away after two token chunks
    return payloads[:2]


def _no_done(payloads):  # every chunk and the statistics, but not the stream's last line
    return payloads[:-1]


def _no_finish(payloads):  # the stream ends in order, but no chunk says the request finished
    return [p.replace('"finish_reason": "length"', '"finish_reason": null') for p in payloads]


def _aborted(payloads):
    return [p.replace('"finish_reason": "length"', '"finish_reason": "abort"') for p in payloads]


def _no_tokens(payloads):  # a finished request with statistics but not one token
    empty = json.dumps({"choices": [{"index": 0, "text": "", "token_ids": [], "finish_reason": "length"}]})
    return [empty, *payloads[-2:]]


def _error_event(payloads):  # vLLM's completion stream on an engine error: an error object, then [DONE]
    error = json.dumps({"error": {"message": "EngineCore died", "type": "InternalServerError", "code": 500}})
    return [*payloads[:2], error, "[DONE]"]


@pytest.mark.parametrize(
    "reshape, problem",
    [
        (_cut, "ended before its last line `data: [DONE]`"),
        (_no_done, "ended before its last line `data: [DONE]`"),
        (_no_finish, "ended without a finish_reason"),
        (_aborted, "ended with finish_reason='abort', not stop or length"),
        (_no_tokens, "carried no tokens"),
        (_error_event, 'sent an error instead of the answer: {"error": {"message": "EngineCore died"'),
    ],
)
def test_a_stream_without_a_finished_answer_fails_the_measurement(tmp_path, smollm2, reshape, problem):
    server = FakeVllm(str(smollm2), reshape=lambda i, payloads: reshape(payloads) if i == THIRD_REQUEST else payloads)
    with pytest.raises(MeasurementError) as failure:
        attach(tmp_path, smollm2, with_credentials(server.url), "batch_sizes=[1]")
    message = user_message(failure.value)
    assert exit_status(failure.value) == 3 and "\n" not in message
    assert message.startswith("request q2#0: ") and problem in message and "2 of 3 requests" in message
    assert SECRET not in message and "http://***@127.0.0.1" in message
    run_dir = tmp_path / "run"
    assert not (run_dir / "summary.json").exists()
    assert sorted(read_parquet(run_dir / "requests.parquet").request_id) == ["q0", "q1"]  # q2 not counted


def test_a_plain_pass_counts_no_cut_stream_either(tmp_path, smollm2):
    """drafter=none: no per-request statistics are needed, so only the stream's end tells."""
    server = FakeVllm(
        str(smollm2), speculative=False, reshape=lambda i, payloads: _no_done(payloads) if i == 2 else payloads
    )  # warm-up, q0, q1
    with pytest.raises(MeasurementError, match=r"^request q1#0: the stream from .* ended before its last line"):
        attach(tmp_path, smollm2, server.url, "batch_sizes=[1]", drafter="none")
    assert sorted(read_parquet(tmp_path / "run" / "requests.parquet").request_id) == ["q0", "q2"]  # q1 not counted


def test_the_command_exits_3_in_one_line_for_a_cut_stream(tmp_path, smollm2):
    server = FakeVllm(str(smollm2), reshape=lambda i, payloads: _no_done(payloads) if i == THIRD_REQUEST else payloads)
    questions = write_questions(tmp_path / "q.jsonl", ROWS)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "evals.run",
            "runner=server",
            f"runner.url={server.url}",
            "target=custom",
            f"target.model={smollm2}",
            "dataset=jsonl",
            f"dataset.path={questions}",
            "drafter=ngram",
            f"d={D}",
            "engine.max_model_len=2048",
            "batch_sizes=[1]",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 3, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("speclens: error: ")]
    assert len(errors) == 1 and errors[0].startswith("speclens: error: request q2#0: the stream from")
    assert "Traceback" not in proc.stderr and not (tmp_path / "run" / "summary.json").exists()


# --- 2. SIGTERM stops a launched server ------------------------------------------------------------

# A stand-in for `python -m vllm.entrypoints.openai.api_server`: answers /health and /metrics, holds
# a lock with a worker process in its group (as vLLM's engine core is), tells the test when the first
# request arrives and never answers it.
FAKE_API_SERVER = """
import fcntl, os, signal, socket, sys, threading
from http.server import BaseHTTPRequestHandler, HTTPServer

lock = open(os.environ["FAKE_VLLM_LOCK"], "w")
fcntl.flock(lock, fcntl.LOCK_EX)  # released once this process and its worker are both gone
with open(os.environ["FAKE_VLLM_PID"], "w") as out:
    out.write(str(os.getpid()))
if os.fork() == 0:
    while True:
        signal.pause()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        body = b'vllm:spec_decode_num_drafts_total{engine="0"} 0.0\\n' if self.path == "/metrics" else b""
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        socket.create_connection(("127.0.0.1", int(os.environ["FAKE_VLLM_NOTIFY"]))).close()
        threading.Event().wait()


HTTPServer(("127.0.0.1", int(sys.argv[sys.argv.index("--port") + 1])), Handler).serve_forever()
"""


def fake_vllm_package(root: Path) -> Path:
    server = root / "vllm" / "entrypoints" / "openai" / "api_server.py"
    server.parent.mkdir(parents=True)
    for folder in (root / "vllm", root / "vllm" / "entrypoints", server.parent):
        (folder / "__init__.py").write_text("")
    server.write_text(FAKE_API_SERVER)
    return root


def released(lock_file: Path, timeout_s: float) -> bool:
    """Whether the lock is free within `timeout_s` (a blocking flock in a thread: no polling)."""
    got = threading.Event()

    def take() -> None:
        with open(lock_file) as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            got.set()

    threading.Thread(target=take, daemon=True).start()
    return got.wait(timeout_s)


def test_sigterm_stops_the_launched_server_and_its_process_group(tmp_path, smollm2):
    notify = socket.create_server(("127.0.0.1", 0))
    notify.settimeout(240)
    lock, pid_file = tmp_path / "server.lock", tmp_path / "server.pid"
    lock.touch()
    questions = write_questions(tmp_path / "q.jsonl", ROWS)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), str(fake_vllm_package(tmp_path / "fake"))]),
        "FAKE_VLLM_LOCK": str(lock),
        "FAKE_VLLM_PID": str(pid_file),
        "FAKE_VLLM_NOTIFY": str(notify.getsockname()[1]),
    }
    stderr = tmp_path / "stderr.txt"
    with open(stderr, "w") as err:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "evals.run",
                "runner=server",
                "target=custom",
                f"target.model={smollm2}",
                "dataset=jsonl",
                f"dataset.path={questions}",
                "drafter=ngram",
                f"d={D}",
                "engine.max_model_len=2048",
                f"hydra.run.dir={tmp_path / 'run'}",
            ],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )

    def wake_if_it_ends() -> None:  # a run that ends before its first request wakes the accept below
        proc.wait()
        with contextlib.suppress(OSError):  # the test is over and closed it
            socket.create_connection(notify.getsockname()).close()

    threading.Thread(target=wake_if_it_ends, daemon=True).start()
    try:
        notify.accept()[0].close()  # the launched server has the warm-up request: the run is mid-pass
        assert proc.poll() is None, stderr.read_text()[-3000:]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        assert proc.returncode == 130, stderr.read_text()[-3000:]
        assert "speclens: interrupted" in stderr.read_text() and "Traceback" not in stderr.read_text()
        assert released(lock, timeout_s=60)  # the server and its worker are gone
    finally:
        if proc.poll() is None:
            proc.kill()
        if pid_file.is_file() and not released(lock, timeout_s=5):
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)  # what the run left behind
        notify.close()


# --- 3. runner.* values, /v1/models answers, drafter=none ------------------------------------------


@pytest.fixture
def no_server_starts(monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("a vLLM server was launched despite invalid input")

    monkeypatch.setattr("runners.server_runner.ServerProcess.__init__", never)


def refused(tmp_path: Path, *overrides: str) -> str:
    target = write_checkpoint(tmp_path / "target")
    cfg = compose_config(["runner=server", "target=custom", f"target.model={target}", *overrides])
    with pytest.raises(ConfigError) as refusal:
        run(cfg, tmp_path / "run", progress=lambda label: None)
    assert not list(tmp_path.rglob("stamp.json"))
    message = user_message(refusal.value)
    assert "\n" not in message and exit_status(refusal.value) == 2
    return message


@pytest.mark.parametrize(
    "url, problem",
    [
        ("", "runner.url='': is empty"),
        ("127.0.0.1:8000", "runner.url=127.0.0.1:8000: has no scheme"),
        ("localhost:8000", "runner.url=localhost:8000: has no scheme"),
        ("http://127.0.0.1", "runner.url=http://127.0.0.1: has no port"),
        (
            "http://127.0.0.1:70000",
            "runner.url=http://127.0.0.1:70000: has the port '70000', not a number from 1 to 65535",
        ),
        ("http://127.0.0.1:0", "has the port '0', not a number from 1 to 65535"),
        ("http://127.0.0.1:80a", "has the port '80a', not a number"),
        ("ftp://127.0.0.1:8000", "runner.url=ftp://127.0.0.1:8000: has the scheme 'ftp', not http or https"),
        ("http://:8000", "has no host"),
        ("http://127.0.0.1:8000/v1", "has a path, query or fragment after the port"),
        (f"http://me:{SECRET}@127.0.0.1", "runner.url=http://***@127.0.0.1: has no port"),
    ],
)
def test_a_url_that_is_no_server_address_is_refused_in_one_line(tmp_path, no_server_starts, url, problem):
    message = refused(tmp_path, f"runner.url='{url}'")
    assert message.startswith(problem if problem.startswith("runner.url") else "runner.url=") and problem in message
    assert (
        message.endswith(
            "give http://host:port or https://host:port (user:password@ before the host where the server needs it)."
        )
        and SECRET not in message
    )


def test_a_baseline_url_is_checked_too(tmp_path, no_server_starts):
    message = refused(tmp_path, "runner.url=http://127.0.0.1:8000", "runner.baseline_url=127.0.0.1:8001")
    assert message.startswith("runner.baseline_url=127.0.0.1:8001: has no scheme; give http://host:port")


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "runner.request_timeout_s=0",
            "runner.request_timeout_s=0: must be a number of seconds > 0 and <= 86400 (a day).",
        ),
        ("runner.request_timeout_s=-5", "runner.request_timeout_s=-5: must be a number of seconds > 0"),
        (
            "runner.request_timeout_s=1e12",
            "runner.request_timeout_s=1e+12: must be a number of seconds > 0 and <= 86400",
        ),
        ("runner.request_timeout_s=nan", "runner.request_timeout_s=nan: must be"),
        ("runner.start_timeout_s=0", "runner.start_timeout_s=0: must be a number of seconds > 0 and <= 86400 (a day)."),
        ("runner.start_timeout_s=-1", "runner.start_timeout_s=-1: must be"),
        ("runner.start_timeout_s=inf", "runner.start_timeout_s=inf: must be"),
        ("runner.retries=-1", "runner.retries=-1: must be an integer from 0 (no retry) to 10."),
        ("runner.retries=1000000", "runner.retries=1000000: must be an integer from 0 (no retry) to 10."),
    ],
)
def test_timeouts_and_retries_out_of_range_are_refused_in_one_line(tmp_path, no_server_starts, override, message):
    assert refused(tmp_path, override).startswith(message)


def test_a_models_page_that_is_not_an_openai_model_list_is_refused(tmp_path, smollm2):
    html = Scripted({"/health": "", "/v1/models": "<html>It works!</html>"}, None)
    with pytest.raises(
        ConfigError,
        match=r"^runner.url=http://127.0.0.1:\d+: /v1/models answered "
        r"'<html>It works!</html>', not an OpenAI model list",
    ):
        attach(tmp_path, smollm2, html.url)
    listed = Scripted({"/health": "", "/v1/models": "[1, 2]"}, None)
    with pytest.raises(ConfigError, match=r"/v1/models answered '\[1, 2\]', not an OpenAI model list"):
        attach(tmp_path, smollm2, listed.url)


class NeedsCredentials(Handler):
    """vLLM behind basic authentication (as a reverse proxy puts it): /v1 routes need the password."""

    def _allowed(self) -> bool:
        expected = "Basic " + base64.b64encode(f"me@corp:{SECRET}".encode()).decode()
        if not self.path.startswith("/v1") or self.headers.get("Authorization") == expected:
            return True
        self._send(401, '{"error": "unauthorized"}')
        return False

    def do_GET(self):
        if self._allowed():
            super().do_GET()

    def do_POST(self):
        if self._allowed():
            super().do_POST()


def test_refused_credentials_are_said_so_not_taken_for_a_missing_model(tmp_path, smollm2):
    server = FakeVllm(str(smollm2), handler=NeedsCredentials)
    with pytest.raises(
        ConfigError,
        match=r"/v1/models answered HTTP 401 \(credentials missing or refused: the API "
        r"key in the variable runner.api_key_env names, or user:password@ in the "
        r"URL\)\.$",
    ):
        attach(tmp_path, smollm2, server.url)


def test_drafter_none_measures_plain_decoding_on_the_attached_server(tmp_path, smollm2):
    plain = FakeVllm(str(smollm2), speculative=False)
    summary = attach(tmp_path, smollm2, plain.url, drafter="none")
    assert (summary.drafter, summary.d, summary.n_requests) == ("none", None, len(ROWS))
    assert len(plain.bodies) == 1 + len(ROWS)  # the warm-up and every prompt, all on runner.url
    with pytest.raises(
        ConfigError,
        match=r"^runner.url=http://127.0.0.1:\d+ serves with speculative decoding; "
        r"drafter=none measures plain decoding: attach to a server started without",
    ):
        attach(tmp_path / "spec", smollm2, FakeVllm(str(smollm2)).url, drafter="none")


# --- 4. credentials inside a URL -------------------------------------------------------------------


def test_url_credentials_are_sent_but_written_nowhere(tmp_path, smollm2, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    server = FakeVllm(str(smollm2), handler=NeedsCredentials)
    url = with_credentials(server.url, user="me%40corp")  # percent-encoded in the URL, sent decoded
    summary = attach(tmp_path, smollm2, url, "logger=wandb")
    assert summary.al == pytest.approx(3.0)  # every /v1 request got through with the credentials
    run_dir = tmp_path / "run"
    stamp = json.loads((run_dir / "stamp.json").read_text())
    assert stamp["config"]["runner"]["url"] == server.url.replace("http://", "http://***@")
    assert offline_runs(run_dir)  # wandb's files are in the run dir, searched below
    leaked = [p for p in run_dir.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert leaked == []


def test_url_credentials_stay_out_of_error_messages(tmp_path, smollm2):
    other = FakeVllm("/models/other")
    with pytest.raises(ConfigError) as refusal:
        attach(tmp_path, smollm2, with_credentials(other.url))
    message = str(refusal.value)
    assert message.startswith(f"runner.url={other.url.replace('http://', 'http://***@')} does not serve")
    assert SECRET not in message


def test_url_credentials_stay_out_of_sweep_dir_names_failures_and_the_saved_sweep_config(tmp_path):
    url = f"http://me:{SECRET}@127.0.0.1:8000"
    assert job_dirname(f"d=3,runner.url={url}") == "d=3,runner.url=http:__***@127.0.0.1:8000"
    assert SECRET not in job_dirname(f"runner.url={url},d=3" + ",seed=1" * 30)  # hashed when long
    # as Hydra's logs write an override, its colons escaped
    escaped = rf"runner.url=http\://me\:{SECRET}@127.0.0.1\:8000"
    assert redact_overrides(escaped) == r"runner.url=http\://***@127.0.0.1\:8000"
    saved = tmp_path / "multirun.yaml"
    saved.write_text(
        OmegaConf.to_yaml(
            {
                "hydra": {
                    "overrides": {"task": ["d=3", f"runner.url={url}"]},
                    "job": {"override_dirname": f"d=3,runner.url={url}"},
                },
                "runner": {"url": url, "baseline_url": url.replace("8000", "8001")},
            }
        )
    )
    redact_saved_config(saved)
    text = saved.read_text()
    assert SECRET not in text and "runner.url=http://***@127.0.0.1:8000" in text
    assert OmegaConf.load(saved).runner.baseline_url == "http://***@127.0.0.1:8001"
    record_failure(tmp_path / "job", ["d=3", f"runner.url={url}"], "a message", 2)
    assert json.loads((tmp_path / "job" / "failure.json").read_text())["overrides"] == [
        "d=3",
        "runner.url=http://***@127.0.0.1:8000",
    ]


def test_a_sweep_on_a_server_with_credentials_writes_them_nowhere(tmp_path, smollm2):
    server = FakeVllm(str(smollm2))
    questions = write_questions(tmp_path / "q.jsonl", ROWS)
    sweep = tmp_path / "sweep"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "evals.run",
            "-m",
            "runner=server",
            f"runner.url={with_credentials(server.url)}",
            "target=custom",
            f"target.model={smollm2}",
            "dataset=jsonl",
            f"dataset.path={questions}",
            "drafter=ngram",
            f"d={D}",
            "engine.max_model_len=2048",
            "seed=0,1",
            f"hydra.sweep.dir={sweep}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Hydra's launcher logs each job's overrides ("[HYDRA] #0 : ..."): through speclens's filter
    printed = (proc.stdout + proc.stderr).splitlines()
    assert not [line for line in printed if SECRET in line]
    assert sum("[HYDRA]" in line and "runner.url=http\\://***@" in line for line in printed) == 2
    jobs = [p for p in sweep.iterdir() if p.is_dir()]
    assert len(jobs) == 2 and all((job / "summary.json").is_file() for job in jobs)
    assert (sweep / "multirun.yaml").is_file()
    leaked = [p for p in sweep.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert leaked == []
