"""runner=server with real vLLM servers on CPU (SmolLM2): the same records as in-process, and an
attached server checked before any prompt is sent."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from evals.embedded.target import ensure_smollm2
from runners.parent_watch import PARENT_ENV
from speclens.errors import ConfigError
from tests.integration.conftest import measure, requests_of, steps_of

REPO = Path(__file__).resolve().parents[2]

# float32: the server's greedy outputs are the in-process engine's only where they are a function of
# the prompts (bf16 outputs move with thread counts and batch shapes; benchmarks/reproducibility.py
# measures by how much).
SETTINGS = [
    "drafter=ngram",
    "d=3",
    "dataset=mt_bench",
    "dataset.num_requests=3",
    "sampling.max_tokens=40",
    "engine.max_model_len=2048",
    "engine.dtype=float32",
]


def servers_launched_here() -> list[int]:
    """The live processes speclens launched from this process (runners/parent_watch.py marks them),
    whatever other test processes on the machine are running."""
    mark = f"{PARENT_ENV}={os.getpid()}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and mark in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


# Under pytest-xdist, the tests of the attached server run on one worker, which starts it once.
ATTACHED = pytest.mark.xdist_group("attached_server")


def per_request(out: Path):
    """Each turn's accepted count per drafted step, and its output tokens."""
    steps = steps_of(out).sort_values(["request_id", "turn", "step"])
    accepted = steps.groupby(["request_id", "turn"]).num_accepted.apply(list).to_dict()
    return accepted, requests_of(out).set_index(["request_id", "turn"]).output_tokens.sort_index().to_dict()


def target_passes(out: Path) -> dict:
    return requests_of(out).set_index(["request_id", "turn"]).target_steps.sort_index().to_dict()


def test_a_launched_server_measures_what_the_in_process_engine_measures(tmp_path):
    assert servers_launched_here() == []
    served = measure(tmp_path / "server", "runner=server", *SETTINGS)
    inproc = measure(tmp_path / "inproc", *SETTINGS)
    # greedy, same prompts (two-turn conversations carrying their answers): the same steps
    assert served["al"] == inproc["al"] and per_request(tmp_path / "server") == per_request(tmp_path / "inproc")
    # target passes come from the stream: where the server's output queue merged two steps' chunks
    # (a busy machine) a turn counts one pass less; otherwise they are the engine's own
    served_passes, engine_passes = target_passes(tmp_path / "server"), target_passes(tmp_path / "inproc")
    assert all(0 <= engine_passes[k] - served_passes[k] <= 1 for k in engine_passes)
    assert served["vllm_counters"] == inproc["vllm_counters"] and served["runner"] == "server"
    assert servers_launched_here() == []
    # the server's own log is kept in the run dir; latency is measured from the stream
    log = (tmp_path / "server" / "server.log").read_text()
    assert (
        "===== speclens: the server of the speculative B=3 pass =====" in log and "Application startup complete" in log
    )
    latency = served["operating_points"][0]["latency"]
    assert 0 < latency["ttft_ms"]["p50"] < latency["e2e_ms"]["p50"] and latency["tpot_ms"]["p50"] > 0


@pytest.fixture(scope="module")
def attached_server(tmp_path_factory):
    """A vLLM server the tests start themselves (ngram, D = 3, per-step metrics), stopped afterwards."""
    tmp_path = tmp_path_factory.mktemp("attached")
    target = ensure_smollm2()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 5})
    log = open(tmp_path / "server.log", "w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(target),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--max-model-len",
            "2048",
            "--enforce-eager",
            "--dtype",
            "float32",
            "--speculative-config",
            spec,
            "--per-request-spec-decode-metrics",
            "detailed",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"},
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
            try:
                if urllib.request.urlopen(f"{url}/health", timeout=2).status == 200:
                    break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(1)
        yield url
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(60)
        log.close()


@ATTACHED
def test_an_attached_server_is_checked_then_measured(tmp_path, attached_server):
    with pytest.raises(ConfigError, match=r"drafts num_spec_tokens=3 per step but d=2"):
        measure(tmp_path / "wrong_d", "runner=server", f"runner.url={attached_server}", *SETTINGS, "d=2")
    first = measure(tmp_path / "a", "runner=server", f"runner.url={attached_server}", *SETTINGS)
    # a second run against the same server: its counters are read as deltas, per pass
    second = measure(tmp_path / "b", "runner=server", f"runner.url={attached_server}", *SETTINGS)
    assert first["al"] == second["al"] > 1 and first["vllm_counters"] == second["vllm_counters"]
    assert per_request(tmp_path / "a") == per_request(tmp_path / "b")


@ATTACHED
def test_a_sweep_shares_an_attached_server_without_mixing_counter_deltas(tmp_path, attached_server):
    """Two jobs at once (joblib) on one attached server: their passes take turns on it (a lock per
    server address), so each pass's counter deltas, checked exactly against its records, are its own."""
    sweep = tmp_path / "sweep"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "evals.run",
            "-m",
            "hydra/launcher=local",
            "hydra.launcher.n_jobs=2",
            f"hydra.sweep.dir={sweep}",
            "runner=server",
            f"runner.url={attached_server}",
            *SETTINGS,
            "dataset.num_requests=2",
            "seed=0,1",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summaries = [json.loads(p.read_text()) for p in sorted(sweep.rglob("summary.json"))]
    assert len(summaries) == 2 and all(s["al"] > 1 for s in summaries)
    # runner.exclusive (default) enforced the check: each run's counters are its own steps' sums
    for s in summaries:
        assert s["vllm_counters"]["num_drafts"] == s["n_steps"]


@ATTACHED
def test_agent_trajectories_measure_alike_in_process_and_through_a_server(tmp_path, attached_server):
    from tests.fixtures.trajectories import TOOLS, messages, openai_row, speed_bench_row, write_rows

    data = tmp_path / "trajectories"
    data.mkdir()
    write_rows(data / "swe.jsonl", [speed_bench_row("swe1", "swe", messages(2))])
    write_rows(data / "retail.jsonl", [openai_row("tau1", "retail", messages(1))])
    agentic = [
        *SETTINGS[:2],
        "dataset=agentic",
        f"dataset.path={data}",
        "sampling.max_tokens=32",
        "engine.max_model_len=2048",
        "engine.dtype=float32",
    ]
    # SmolLM2's template drops tools and tool calls: refused unless they are written as text
    with pytest.raises(ConfigError, match="drops tools, tool calls from the prompt"):
        measure(tmp_path / "refused", *agentic)
    local = measure(tmp_path / "local", *agentic, "dataset.tools_as_text=true")
    served = measure(
        tmp_path / "served", "runner=server", f"runner.url={attached_server}", *agentic, "dataset.tools_as_text=true"
    )
    assert sorted(requests_of(tmp_path / "local").request_id) == ["swe1@0", "swe1@1", "swe1@2", "tau1@0", "tau1@1"]
    # each prompt is the recorded history before its turn, tool calls and results written as text
    from evals.datasets.agentic import Trajectory, as_text
    from runners.chat import ChatTokenizer

    history = as_text(Trajectory("swe1", "swe", tuple(messages(2)), tuple(TOOLS)))
    text = ChatTokenizer(ensure_smollm2()).chat_text(list(history.messages[:4]))
    assert '<tool_call>{"arguments": {"pattern": "bug0"}, "name": "grep"}</tool_call>' in text
    prompt_tokens = requests_of(tmp_path / "local").set_index("request_id").prompt_tokens
    assert prompt_tokens["swe1@1"] == len(ChatTokenizer(ensure_smollm2()).chat_token_ids(list(history.messages[:4])))
    assert per_request(tmp_path / "served") == per_request(tmp_path / "local")
    assert served["by_turn"] == local["by_turn"] and set(local["by_turn"]) == {"0", "1", "2"}
    assert set(local["by_domain"]) == {"swe", "retail"}
