"""runner=server against a scripted stand-in for vLLM's OpenAI server (the response bodies are
shaped as vLLM 0.32 writes them: vllm/entrypoints/openai/completion/serving.py streams
`choices[].token_ids` per engine step with return_token_ids, and the final usage chunk carries
`metrics.speculative_decoding` from vllm/entrypoints/generate/base/protocol.py)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from evals.embedded.target import ensure_smollm2
from evals.pipeline.compose import compose_config
from evals.pipeline.run_job import run
from runners.server_runner import server_flags
from speclens.errors import ConfigError
from tests.unit.conftest import write_questions

D = 3
ROWS = [
    {"question_id": f"q{i}", "category": "coding" if i % 2 else "writing", "turns": [f"task {i}"]} for i in range(3)
]
# Every request: the prefill token, a step accepting 3, an undrafted step, a step accepting 1.
CHUNKS = [1, 4, 1, 2]
ACCEPTED, DRAFTED = [3, 1], [3, 3]


class FakeVllm(ThreadingHTTPServer):
    def __init__(
        self,
        model: str,
        spec_metrics: bool = True,
        num_spec_tokens: int = D,
        busy_first: int = 0,
        speculative: bool = True,
        last_token_shift: int = 0,
        margin: float = 5.0,
        reshape=None,
        handler: type[BaseHTTPRequestHandler] | None = None,
    ) -> None:
        super().__init__(("127.0.0.1", 0), handler or Handler)
        # reshape(i, payloads) -> the `data:` payloads the i-th POST's stream sends instead (a fault).
        self.reshape = reshape or (lambda i, payloads: payloads)
        # Its answers' last token moved by this much (a plain server whose output parts from the
        # speculative one's), and the top-2 log-probability margin it reports for every token.
        self.last_token_shift, self.margin = last_token_shift, margin
        self.model, self.spec_metrics, self.num_spec_tokens = model, spec_metrics and speculative, num_spec_tokens
        self.speculative = speculative
        self.busy = busy_first
        self.counters = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0}
        self.per_pos = [0] * D
        self.bodies: list[dict] = []
        self.lock = threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def metrics_text(self) -> str:
        if not self.speculative:  # vLLM registers the spec-decode series only with a speculative config
            return 'vllm:num_requests_running{engine="0"} 0.0\n'
        lines = [
            f'vllm:spec_decode_{k}_total{{engine="0",model_name="{self.model}"}} {v}.0'
            for k, v in self.counters.items()
        ]
        lines += [
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="{k}"}} {v}.0'
            for k, v in enumerate(self.per_pos)
        ]
        return "\n".join(lines) + "\n"


class Handler(BaseHTTPRequestHandler):
    server: FakeVllm

    def log_message(self, *args):
        pass

    def _send(self, status: int, body: str, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body.encode())))
        self.end_headers()
        self.wfile.write(body.encode())

    def do_GET(self):
        if self.path == "/health":
            self._send(200, "")
        elif self.path == "/v1/models":
            self._send(
                200, json.dumps({"data": [{"id": self.server.model, "owned_by": "vllm", "max_model_len": 2048}]})
            )
        elif self.path == "/metrics":
            self._send(200, self.server.metrics_text(), "text/plain")
        else:
            self._send(404, '{"detail":"Not Found"}')

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.bodies.append(body)
            if self.server.busy:
                self.server.busy -= 1
                return self._send(429, "busy")
            for a, d in zip(ACCEPTED, DRAFTED):
                c = self.server.counters
                c["num_drafts"] += 1
                c["num_draft_tokens"] += d
                c["num_accepted_tokens"] += a
                for k in range(a):
                    self.server.per_pos[k] += 1
            index = len(self.server.bodies) - 1
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        payloads, token = [], 200
        for i, n in enumerate(CHUNKS):
            ids = list(range(token, token + n))
            if i == len(CHUNKS) - 1:
                ids[-1] += self.server.last_token_shift
            # vLLM's last token chunk says why the request ended
            chunk = {
                "choices": [
                    {
                        "index": 0,
                        "text": "x",
                        "token_ids": ids,
                        "finish_reason": "length" if i == len(CHUNKS) - 1 else None,
                    }
                ]
            }
            if body.get("logprobs"):  # vLLM's completions logprobs, keyed "token_id:<id>"
                chunk["choices"][0]["logprobs"] = {
                    "top_logprobs": [
                        {f"token_id:{t}": -0.1, f"token_id:{t + 1000}": -0.1 - self.server.margin} for t in ids
                    ]
                }
            token += n
            payloads.append(json.dumps(chunk))
        final = {"choices": [], "usage": {"completion_tokens": sum(CHUNKS)}}
        if self.server.spec_metrics:
            final["metrics"] = {
                "speculative_decoding": {
                    "mean_acceptance_length": 3.0,
                    "draft_acceptance_rate": 0.66,
                    "acceptance_histogram": [0, 1, 0, 1],
                    "num_spec_steps": 2,
                    "num_accepted_draft_tokens": 4,
                    "num_draft_tokens": 6,
                    "num_spec_tokens": self.server.num_spec_tokens,
                    "per_step_accepted": ACCEPTED,
                    "per_step_drafted": DRAFTED,
                }
            }
        for payload in self.server.reshape(index, [*payloads, json.dumps(final), "[DONE]"]):
            self.wfile.write(f"data: {payload}\n\n".encode())
            self.wfile.flush()


@pytest.fixture(scope="module")
def smollm2():
    return ensure_smollm2()


def attach(tmp_path, smollm2, server: FakeVllm, *overrides: str):
    tmp_path.mkdir(parents=True, exist_ok=True)
    questions = write_questions(tmp_path / "q.jsonl", ROWS)
    cfg = compose_config(
        [
            "runner=server",
            f"runner.url={server.url}",
            "target=custom",
            f"target.model={smollm2}",
            "dataset=jsonl",
            f"dataset.path={questions}",
            "drafter=ngram",
            f"d={D}",
            "engine.max_model_len=2048",
            *overrides,
        ]
    )
    return run(cfg, tmp_path / "run", progress=lambda label: None)


def test_an_attached_server_gives_exact_records_checked_against_its_counters(tmp_path, smollm2):
    server = FakeVllm(str(smollm2))
    summary = attach(tmp_path, smollm2, server)
    # two drafted steps per request accepting 3 and 1: AL 3; 8 tokens over 4 target passes
    assert summary.al == pytest.approx(3.0) and summary.tokens_per_step == pytest.approx(2.0)
    assert summary.runner == "server" and summary.vllm_counters.num_drafts == 6
    # the chat-templated prompt goes as token ids, the same tokens an in-process run sends
    sent = server.bodies[-1]
    assert all(isinstance(t, int) for t in sent["prompt"]) and sent["return_token_ids"] and sent["stream"]
    import pandas as pd

    steps = pd.read_parquet(tmp_path / "run" / "steps.parquet")
    prompt = pd.read_parquet(tmp_path / "run" / "requests.parquet").set_index("request_id").prompt_tokens
    # positions: after the prefill token, and after 1 + 4 + 1 tokens (the undrafted step counted)
    for rid, group in steps.groupby("request_id"):
        assert list(group.position - prompt[rid]) == [1, 6]


def test_other_traffic_on_the_server_fails_the_check_unless_it_is_declared(tmp_path, smollm2, capsys):
    from speclens.errors import MeasurementError

    server = FakeVllm(str(smollm2))
    real = server.metrics_text

    def busy_metrics() -> str:  # someone else's requests land once the pass's requests (after probe and warm-up) begin
        text = real()
        return (
            text.replace(
                f'num_drafts_total{{engine="0",model_name="{server.model}"}} ',
                f'num_drafts_total{{engine="0",model_name="{server.model}"}} 1',
            )
            if len(server.bodies) > 2
            else text
        )

    server.metrics_text = busy_metrics
    with pytest.raises(MeasurementError, match="do not sum to the engine's speculative counters"):
        attach(tmp_path, smollm2, server)
    server.bodies.clear()
    summary = attach(tmp_path / "shared", smollm2, server, "runner.exclusive=false")
    assert summary.al == pytest.approx(3.0) and "not enforced" in capsys.readouterr().err


def test_a_busy_server_is_retried(tmp_path, smollm2):
    server = FakeVllm(str(smollm2), busy_first=1)
    assert attach(tmp_path, smollm2, server).al == pytest.approx(3.0)


def test_an_attached_server_is_checked_before_any_prompt(tmp_path, smollm2):
    with pytest.raises(
        ConfigError, match=r"does not serve '.*SmolLM2-135M-Instruct' \(it serves: /models/other\); set runner.model"
    ):
        attach(tmp_path, smollm2, FakeVllm("/models/other"))
    with pytest.raises(
        ConfigError,
        match=r"\(vllm\) reports no per-request speculative statistics: start the server with --per-request-spec-decode-metrics detailed",
    ):
        attach(tmp_path, smollm2, FakeVllm(str(smollm2), spec_metrics=False))
    with pytest.raises(ConfigError, match=r"runs without speculative decoding: start it with --speculative-config"):
        attach(tmp_path, smollm2, FakeVllm(str(smollm2), speculative=False))
    with pytest.raises(ConfigError, match=r"drafts num_spec_tokens=5 per step but d=3"):
        attach(tmp_path, smollm2, FakeVllm(str(smollm2), num_spec_tokens=5))
    with pytest.raises(
        ConfigError, match=r"serves '.*' with max_model_len=2048, below engine.max_model_len=4096; set engine"
    ):
        attach(tmp_path, smollm2, FakeVllm(str(smollm2)), "engine.max_model_len=4096")
    with pytest.raises(ConfigError, match=r"baseline=true with runner.url needs runner.baseline_url=http://host:port"):
        attach(tmp_path, smollm2, FakeVllm(str(smollm2)), "baseline=true")
    spec = FakeVllm(str(smollm2))
    with pytest.raises(ConfigError, match=rf"runner.baseline_url={spec.url} serves with speculative decoding"):
        attach(tmp_path, smollm2, spec, "baseline=true", f"runner.baseline_url={spec.url}")
    with pytest.raises(ConfigError, match=r"runner.engine=sglang: speclens launches vLLM servers only"):
        run(
            compose_config(["runner=server", "runner.engine=sglang", "target=custom", f"target.model={smollm2}"]),
            tmp_path / "launch",
        )


def test_an_unreachable_server_is_refused_quickly(tmp_path, smollm2):
    server = FakeVllm(str(smollm2))
    url = server.url
    server.shutdown()
    server.server_close()
    start = time.monotonic()
    with pytest.raises(ConfigError, match=rf"runner.url={url}: no answer within 10 s"):
        attach(tmp_path, smollm2, type("Gone", (), {"url": url})())
    assert time.monotonic() - start < 10


def test_engine_keys_become_server_flags():
    cfg = compose_config(
        [
            "runner=server",
            "engine.max_model_len=1024",
            "engine.dtype=float32",
            "seed=7",
            "+engine.extra_args.max_num_batched_tokens=2048",
        ]
    )
    from evals.pipeline.compose import to_run_config

    flags = server_flags(to_run_config(cfg))
    assert flags[flags.index("--max-model-len") + 1] == "1024" and flags[flags.index("--dtype") + 1] == "float32"
    assert "--enforce-eager" in flags and flags[flags.index("--seed") + 1] == "7"
    assert flags[flags.index("--max-num-batched-tokens") + 1] == "2048"
    flags = server_flags(to_run_config(compose_config(["runner=server", "engine=gpu"])))
    assert "--no-enforce-eager" in flags and "--enforce-eager" not in flags


def test_open_loop_load_sends_requests_at_seeded_poisson_arrivals(tmp_path, smollm2):
    from runners.server_engine import Arrivals

    offsets = Arrivals(50.0, seed=0).offsets_s(2000)
    assert offsets == Arrivals(50.0, seed=0).offsets_s(2000) and offsets != Arrivals(50.0, seed=1).offsets_s(2000)
    assert all(b > a for a, b in zip(offsets, offsets[1:]))
    assert offsets[-1] / len(offsets) == pytest.approx(1 / 50.0, rel=0.1)  # mean gap 1/rate
    summary = attach(tmp_path, smollm2, FakeVllm(str(smollm2)), "request_rate=20")
    assert summary.al == pytest.approx(3.0) and summary.operating_points[0].request_rate == 20.0
    assert summary.operating_points[0].latency.ttft_ms.p50 > 0


def test_open_loop_load_needs_a_server(tmp_path):
    from tests.unit.conftest import fake_overrides

    with pytest.raises(ConfigError, match=r"request_rate=5.0 \(open-loop load\) needs runner=server"):
        run(compose_config([*fake_overrides(tmp_path, ROWS), "request_rate=5"]), tmp_path / "run")
    with pytest.raises(ConfigError, match="give one of them"):
        run(compose_config([*fake_overrides(tmp_path, ROWS), "request_rate=5", "batch_sizes=[1]"]), tmp_path / "run")
