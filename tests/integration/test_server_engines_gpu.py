"""runner=server attached to real SGLang and TensorRT-LLM servers (n-gram drafting, D = 3) that the
tests start on 127.0.0.1 and stop: for users' GPU machines with those engines installed
(`pytest -m gpu --run-gpu tests/integration/test_server_engines_gpu.py`). The response shapes
themselves are pinned by tests/unit/test_server_dialects.py on every machine."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from evals.embedded.target import ensure_smollm2
from tests.integration.conftest import measure

SETTINGS = [
    "drafter=ngram",
    "d=3",
    "dataset=mt_bench",
    "dataset.num_requests=4",
    "sampling.max_tokens=64",
    "engine.max_model_len=2048",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(command: list[str], port: int, log: Path, timeout_s: float = 900):
    """The server `command` starts, once it answers /health; its whole process group stopped after."""
    with open(log, "w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            with contextlib.suppress(OSError):
                if urllib.request.urlopen(f"{url}/health", timeout=2).status == 200:
                    break
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(2)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.gpu
@pytest.mark.skipif(importlib.util.find_spec("sglang") is None, reason="SGLang is not installed")
def test_a_real_sglang_server_gives_request_totals_matching_its_counter(tmp_path):
    model, port = ensure_smollm2(), free_port()
    command = [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--speculative-algorithm",
        "NGRAM",
        "--speculative-num-draft-tokens",
        "4",
        "--enable-metrics",
        "--context-length",
        "2048",
    ]
    with serving(command, port, tmp_path / "sglang.log") as url:
        summary = measure(tmp_path / "run", "runner=server", f"runner.url={url}", "runner.engine=sglang", *SETTINGS)
    assert summary["record_granularity"] == "request" and summary["al"] > 1
    # the run's verification steps, from its requests' totals, equal the server's counter delta
    assert summary["vllm_counters"]["num_drafts"] == summary["n_steps"] > 0


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("trtllm-serve") is None, reason="TensorRT-LLM is not installed")
def test_a_real_tensorrt_llm_server_gives_al_per_domain(tmp_path):
    model, port = ensure_smollm2(), free_port()
    options = tmp_path / "llm_api.yaml"
    options.write_text(
        "speculative_config:\n  decoding_type: NGram\n  max_draft_len: 3\n"
        "  max_matching_ngram_size: 2\nreturn_perf_metrics: true\n"
    )
    command = [
        "trtllm-serve",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max_seq_len",
        "2048",
        "--extra_llm_api_options",
        str(options),
    ]
    with serving(command, port, tmp_path / "trtllm.log") as url:
        summary = measure(tmp_path / "run", "runner=server", f"runner.url={url}", "runner.engine=trtllm", *SETTINGS)
    # released builds report counters only; one with PR #19311 each request's totals on its choice
    assert summary["record_granularity"] in ("domain", "request") and summary["al"] >= 1
    assert all(group["al"] is not None for group in summary["by_domain"].values())
    assert summary["vllm_counters"]["num_drafts"] == sum(g["n_steps"] for g in summary["by_domain"].values())
