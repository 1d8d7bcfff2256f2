"""runner=server against SGLang and TensorRT-LLM servers, and an attached server's faults, with
scripted stand-ins whose bodies are shaped as each engine's source writes them:

- SGLang 0.5.23 (PyPI wheel `sglang==0.5.23`, git tag v0.5.23): the native `/generate` stream sends
  `{"text", "output_ids", "meta_info"}` per chunk; the finished request's `meta_info` gains
  `spec_verify_ct`, `spec_num_correct_drafts`, `spec_num_proposed_drafts`, `spec_accept_rate`,
  `spec_accept_length`, `spec_correct_drafts_histogram` (srt/managers/tokenizer_manager.py,
  `_calculate_spec_decoding_metrics`); `/metrics` counts `sglang:spec_verify_calls_total`
  (srt/observability/metrics_collector.py); `/v1/models` cards are `owned_by: "sglang"`.
- TensorRT-LLM (NVIDIA/TensorRT-LLM tensorrt_llm/serve/openai_protocol.py @ 0076e9390e1ed11515f149eec356f5a03f4a00d8,
  tensorrt_llm/metrics/collector.py @ 050f80def8df236e326949c8bd9dee10fd896a83): completion chunks
  carry `choices[].text` and `avg_decoded_tokens_per_iter` only; `/prometheus/metrics` has
  `trtllm_spec_decode_drafted_tokens_total` / `..._accepted_tokens_total{token_position=}` and
  `trtllm_speculative_config_info`; model cards are `owned_by: "tensorrt_llm"`. With PR #19311
  (open; its shape as its author's AIPerf adapter, ai-dynamo/aiperf PR #1433, reads it) the finished
  choice also carries `speculative_decoding`: `acceptance_rate`, `total_accepted_draft_tokens`,
  `total_draft_tokens`, `num_spec_steps`, `acceptance_histogram` (dense, D + 1 long),
  `num_spec_tokens` (null under a draft-length schedule).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from evals.embedded.target import ensure_smollm2
from evals.pipeline.compose import compose_config
from evals.pipeline.run_job import run
from speclens.errors import ConfigError, MeasurementError, exit_status
from speclens.file_formats.records import read_parquet
from speclens.file_formats.summary_file import read_summary
from tests.unit.conftest import write_questions
from tests.unit.test_server_runner import FakeVllm

D = 3
ROWS = [
    {"question_id": f"q{i}", "category": "coding" if i % 2 else "writing", "turns": [f"task {i}"]} for i in range(4)
]


@pytest.fixture(scope="module")
def smollm2():
    return ensure_smollm2()


class Scripted(ThreadingHTTPServer):
    """A server on 127.0.0.1 whose GET pages are `pages` and whose POSTs `post(handler, body)` answers."""

    def __init__(self, pages: dict, post) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.pages, self.post, self.bodies = pages, post, []
        self.lock = threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: Scripted

    def log_message(self, *args):
        pass

    def send(self, status: int, body: str, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body.encode())))
        self.end_headers()
        self.wfile.write(body.encode())

    def events(self, events: list) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for event in events:
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")

    def do_GET(self):
        page = self.server.pages.get(self.path)
        if page is None:
            return self.send(404, '{"detail":"Not Found"}')
        self.send(
            200, page() if callable(page) else page, "text/plain" if "metrics" in self.path else "application/json"
        )

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.bodies.append(body)
        self.server.post(self, body)


def models(model: str, owner: str) -> str:
    return json.dumps(
        {
            "object": "list",
            "data": [
                {"id": model, "object": "model", "created": 0, "owned_by": owner, "root": model, "max_model_len": 2048}
            ],
        }
    )


# What the stand-ins say of themselves (SGLang in /get_server_info; the TensorRT-LLM one says nothing).
SGLANG_VERSION = "0.5.14"


def fake_sglang(
    model: str,
    chunks=(1, 4, 2),
    correct=4,
    verify=2,
    miscount=0,
    histogram=("spec_correct_drafts_histogram", [0, 1, 0, 1]),
) -> Scripted:
    """Every request: the prefill token, then verification steps giving chunks[1:] tokens (one
    accepting 1 draft, one 3: `histogram`, under the name SGLang gives it, or None)."""
    calls = {"verify": 0}

    def post(handler: _Handler, body: dict) -> None:
        assert handler.path == "/generate"
        events, ids = [], []
        for n in chunks:
            ids = ids + list(range(300 + len(ids), 300 + len(ids) + n))
            events.append(
                {
                    "text": "x" * len(ids),
                    "output_ids": list(ids),
                    "meta_info": {
                        "id": "r",
                        "finish_reason": None,
                        "prompt_tokens": 5,
                        "completion_tokens": len(ids),
                        "cached_tokens": 0,
                    },
                }
            )
        events[-1]["meta_info"] |= {
            "finish_reason": {"type": "length", "length": len(ids)},
            "e2e_latency": 0.01,
            "spec_accept_rate": correct / (verify * D),
            "spec_accept_length": len(ids) / verify,
            "spec_num_correct_drafts": correct,
            "spec_num_proposed_drafts": verify * D,
            "spec_verify_ct": verify,
        } | (dict([histogram]) if histogram else {})
        with handler.server.lock:
            calls["verify"] += verify + miscount
        handler.events(events)

    def metrics() -> str:
        return (
            "# HELP sglang:spec_verify_calls_total Total verify calls\n# TYPE sglang:spec_verify_calls_total counter\n"
            f'sglang:spec_verify_calls_total{{model_name="{model}",engine_type="unified"}} '
            f"{float(calls['verify'])}\n"
        )

    return Scripted(
        {
            "/health": "",
            "/v1/models": models(model, "sglang"),
            "/metrics": metrics,
            "/get_server_info": json.dumps(
                {"speculative_num_steps": D, "speculative_algorithm": "EAGLE3", "version": SGLANG_VERSION}
            ),
        },
        post,
    )


# TensorRT-LLM stand-in: a coding request verifies 2 steps accepting 3 each, a writing one 2 steps accepting 1.
ACCEPTS = {"coding": 3, "writing": 1}


def fake_trtllm(model: str, domain_of_prompt, per_request: dict | None = None, miscount: int = 0) -> Scripted:
    """Counters only; with `per_request` (fields over the defaults, None to leave one out), each
    finished choice carries PR #19311's `speculative_decoding`, and the stream's text is as many
    tokens as its steps gave (the prefill's, then 1 + a per step)."""
    drafted, accepted = [0] * D, [0] * D

    def post(handler: _Handler, body: dict) -> None:
        assert handler.path == "/v1/completions"
        a = ACCEPTS[domain_of_prompt(body["prompt"])] if isinstance(body["prompt"], list) else D  # the probe: text
        with handler.server.lock:
            for _ in range(2 + miscount):
                for k in range(D):
                    drafted[k] += 1
                    accepted[k] += k < a
        words = [" one", " two", " three", " four"]
        if per_request is not None:
            words = [" one", " two", " three", " four", " five", " six", " seven", " eight", " nine"][: 1 + 2 * (1 + a)]
        handler.events(
            [
                {
                    "id": "cmpl-1",
                    "object": "text_completion",
                    "created": 0,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "text": w,
                            "logprobs": None,
                            "finish_reason": "length" if w == words[-1] else None,
                            "stop_reason": None,
                            "avg_decoded_tokens_per_iter": 1.0 + a,
                        }
                        | (
                            {"speculative_decoding": trtllm_stats(a, per_request)}
                            if per_request is not None and w == words[-1]
                            else {}
                        )
                    ],
                }
                for w in words
            ]
        )

    def metrics() -> str:
        labels = 'model_name="undefined",engine_type="undefined"'
        lines = [f'trtllm_speculative_config_info{{{labels},decoding_type="Eagle3",max_draft_len="{D}"}} 1.0']
        lines += [
            f'trtllm_spec_decode_drafted_tokens_total{{{labels},token_position="{k}"}} {float(v)}'
            for k, v in enumerate(drafted)
        ]
        lines += [
            f'trtllm_spec_decode_accepted_tokens_total{{{labels},token_position="{k}"}} {float(v)}'
            for k, v in enumerate(accepted)
        ]
        return "\n".join(lines) + "\n"

    return Scripted({"/health": "", "/v1/models": models(model, "tensorrt_llm"), "/prometheus/metrics": metrics}, post)


def trtllm_stats(a: int, fields: dict) -> dict:
    """PR #19311's `speculative_decoding` for a request of 2 verification steps accepting `a` each."""
    histogram = [0] * (D + 1)
    histogram[a] = 2
    stats = {
        "acceptance_rate": a / D,
        "total_accepted_draft_tokens": 2 * a,
        "total_draft_tokens": 2 * D,
        "num_spec_steps": 2,
        "acceptance_histogram": histogram,
        "num_spec_tokens": D,
    }
    return stats | fields


def attach(tmp_path, smollm2, url: str, *overrides: str):
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
            "drafter=ngram",
            f"d={D}",
            "engine.max_model_len=2048",
            *overrides,
        ]
    )
    return run(cfg, tmp_path / "run", progress=lambda label: None)


def test_sglang_reports_request_totals_checked_against_its_verify_counter(tmp_path, smollm2):
    server = fake_sglang(str(smollm2))
    summary = attach(tmp_path, smollm2, server.url)
    # issue 66: the figures are SGLang's, at the version it reports, never this machine's vLLM
    found = summary.provenance
    assert (found.source, found.runner, found.engine, found.engine_version) == (
        "measured",
        "server",
        "sglang",
        SGLANG_VERSION,
    )
    # each request: 2 verification steps accepting 4 drafts in all -> AL 3; 7 tokens over 3 passes
    assert (summary.record_granularity, summary.al, summary.tokens_per_step) == ("request", 3.0, pytest.approx(7 / 3))
    assert summary.vllm_counters.num_drafts == 8
    # each request's histogram (steps accepting 1 and 3 of D = 3): position k accepted in the steps
    # that accepted more than k
    assert summary.per_position_acceptance == [1.0, 0.5, 0.5]
    requests = read_parquet(tmp_path / "run" / "requests.parquet")
    assert list(requests.output_tokens) == [7] * 4 and list(requests.drafted_steps) == [2] * 4
    sent = server.bodies[-1]
    assert sent["stream"] and all(isinstance(t, int) for t in sent["input_ids"])
    assert sent["sampling_params"] == {"max_new_tokens": 128, "temperature": 0.0, "top_p": 1.0, "ignore_eos": False}
    # the stand-in says every prompt was 5 tokens: speclens sent longer ones
    (drift,) = [d for d in summary.diagnostics if d.code == "prompt_drift"]
    assert drift.evidence["requests"] == 4 and {e["server"] for e in drift.evidence["examples"]} == {5}
    assert all(e["speclens"] > 5 for e in drift.evidence["examples"]) and drift.evidence["mean_difference"] < 0
    with pytest.raises(MeasurementError, match=r"num_drafts: records 8 vs engine 12"):
        attach(tmp_path / "miscounted", smollm2, fake_sglang(str(smollm2), miscount=1).url)
    # the name SGLang wrote before 0.5.23 (still written beside the canonical one) reads alike
    older = attach(
        tmp_path / "older", smollm2, fake_sglang(str(smollm2), histogram=("spec_accept_histogram", [0, 1, 0, 1])).url
    )
    assert older.per_position_acceptance == [1.0, 0.5, 0.5]
    # no histogram, or one that does not add up to the request's own totals: per position is absent, not zeros
    for name, histogram in (("none", None), ("off", ("spec_correct_drafts_histogram", [0, 2, 0, 0]))):
        assert (
            attach(tmp_path / name, smollm2, fake_sglang(str(smollm2), histogram=histogram).url).per_position_acceptance
            is None
        )


def test_tensorrt_llm_gives_al_per_domain_from_counters_one_domain_at_a_time(tmp_path, smollm2):
    from runners.chat import ChatTokenizer

    tokenizer = ChatTokenizer(smollm2)
    domain_of = {
        tuple(tokenizer.chat_token_ids([{"role": "user", "content": r["turns"][0]}])): "coding" if i % 2 else "writing"
        for i, r in enumerate(ROWS)
    }
    server = fake_trtllm(str(smollm2), lambda prompt: domain_of.get(tuple(prompt), "writing"))  # + the warm-up
    summary = attach(tmp_path, smollm2, server.url)
    assert (summary.provenance.engine, summary.provenance.engine_version) == ("trtllm", None)  # it says no version
    assert summary.record_granularity == "domain"
    # coding: 4 steps accepting 3 -> AL 4; writing: AL 2; together 1 + 16/8
    assert summary.by_domain["coding"].al == 4.0 and summary.by_domain["writing"].al == 2.0 and summary.al == 3.0
    assert summary.per_position_acceptance == [1.0, 0.5, 0.5] and summary.al_ci95 is None
    # the text-only stream re-encoded: " one two three four" is four tokens of SmolLM2's vocabulary
    assert list(read_parquet(tmp_path / "run" / "requests.parquet").output_tokens) == [4] * 4


def test_tensorrt_llm_with_per_request_acceptance_gives_request_totals_checked_against_its_counters(tmp_path, smollm2):
    from runners.chat import ChatTokenizer

    tokenizer = ChatTokenizer(smollm2)
    domain_of = {
        tuple(tokenizer.chat_token_ids([{"role": "user", "content": r["turns"][0]}])): "coding" if i % 2 else "writing"
        for i, r in enumerate(ROWS)
    }

    def trtllm(**kwargs) -> str:
        return fake_trtllm(str(smollm2), lambda prompt: domain_of.get(tuple(prompt), "writing"), **kwargs).url

    summary = attach(tmp_path, smollm2, trtllm(per_request={}))
    assert summary.record_granularity == "request"
    # coding: 2 steps accepting 3 -> AL 4; writing: 2 steps accepting 1 -> AL 2; all domains in one pass
    assert (summary.by_domain["coding"].al, summary.by_domain["writing"].al, summary.al) == (4.0, 2.0, 3.0)
    # the histograms: position 0 accepted in all 8 steps, 1 and 2 in the coding requests' 4
    assert summary.per_position_acceptance == [1.0, 0.5, 0.5]
    requests = read_parquet(tmp_path / "run" / "requests.parquet")
    assert sorted(requests.output_tokens) == [5, 5, 9, 9] and list(requests.drafted_steps) == [2] * 4
    assert summary.vllm_counters.num_drafts == 8 and summary.vllm_counters.num_accepted_tokens == 16
    with pytest.raises(MeasurementError, match=r"num_drafts: records 8 vs engine 12"):
        attach(tmp_path / "miscounted", smollm2, trtllm(per_request={}, miscount=1))
    # a histogram that does not add up to the request's totals: per position is absent, not zeros
    off = attach(tmp_path / "off", smollm2, trtllm(per_request={"acceptance_histogram": [0, 0, 0, 2]}))
    assert off.per_position_acceptance is None and off.al == 3.0
    # the D it reports, else (null under a schedule) its config label's, must be the run's
    for name, fields in (("said", {}), ("schedule", {"num_spec_tokens": None})):
        with pytest.raises(ConfigError, match=r"drafts num_spec_tokens=3 per step but d=5"):
            attach(tmp_path / name, smollm2, trtllm(per_request=fields), "d=5")


def test_the_engine_is_detected_and_a_server_that_does_not_report_is_refused(tmp_path, smollm2):
    plain_sglang = Scripted(
        {"/health": "", "/v1/models": models(str(smollm2), "sglang"), "/metrics": ""},
        lambda handler, body: handler.events(
            [
                {
                    "text": "x",
                    "output_ids": [1],
                    "meta_info": {"completion_tokens": 1, "finish_reason": {"type": "length"}},
                }
            ]
        ),
    )
    with pytest.raises(
        ConfigError, match=r"\(sglang\) reports no per-request speculative statistics: use SGLang 0.5.9"
    ):
        attach(tmp_path, smollm2, plain_sglang.url)
    no_metrics = Scripted({"/health": "", "/v1/models": models(str(smollm2), "tensorrt_llm")}, None)
    with pytest.raises(
        ConfigError,
        match=r"\(TensorRT-LLM\) shows no speculative counters at /prometheus/metrics: "
        r"start trtllm-serve with return_perf_metrics: true",
    ):
        attach(tmp_path, smollm2, no_metrics.url)
    with pytest.raises(ConfigError, match=r"drafts num_spec_tokens=3 per step but d=5"):
        attach(tmp_path, smollm2, fake_sglang(str(smollm2)).url, "d=5")


def test_a_plain_server_beside_an_attached_one_gives_the_speedup(tmp_path, smollm2):
    spec, plain = FakeVllm(str(smollm2)), FakeVllm(str(smollm2), speculative=False)
    summary = attach(tmp_path, smollm2, spec.url, "baseline=true", f"runner.baseline_url={plain.url}")
    assert summary.lossless.identical and summary.operating_points[0].speedup is not None
    assert all("prompt" in b for b in plain.bodies) and len(plain.bodies) == len(ROWS) + 1  # + the warm-up


def test_a_server_dying_mid_pass_keeps_the_finished_requests_but_no_summary(tmp_path, smollm2):
    server = FakeVllm(str(smollm2))
    real = server.RequestHandlerClass.do_POST
    sent = []

    def dies_on_the_third(handler):
        if len(sent) == 1 + 1 + 2:  # the check's probe, the warm-up, then two of the run's requests
            handler.connection.close()
            return
        sent.append(1)
        real(handler)

    server.RequestHandlerClass = type("Dying", (server.RequestHandlerClass,), {"do_POST": dies_on_the_third})
    with pytest.raises(MeasurementError) as failure:
        attach(tmp_path, smollm2, server.url, "batch_sizes=[1]")
    assert exit_status(failure.value) == 3
    assert "stopped answering during the pass" in str(failure.value) and "2 of 4 requests" in str(failure.value)
    run_dir = tmp_path / "run"
    assert not (run_dir / "summary.json").exists()
    assert len(read_parquet(run_dir / "requests.parquet")) == 2
    assert len((run_dir / "outputs.jsonl").read_text().splitlines()) == 2


def test_a_vllm_request_without_verification_steps_has_no_arrays_and_no_steps():
    """vLLM's RequestSpecDecodeMetrics.to_dict (vllm/v1/metrics/stats.py) leaves per_step_* out when
    they are empty: a request that never verified is read as zero drafted steps; arrays missing
    while steps were counted mean the server runs without `detailed` and are refused."""
    from runners.server_dialects import DIALECTS, Reply

    vllm = DIALECTS["vllm"]
    none_drafted = {
        "mean_acceptance_length": 1.0,
        "acceptance_histogram": [0, 0, 0, 0],
        "num_spec_steps": 0,
        "num_accepted_draft_tokens": 0,
        "num_draft_tokens": 0,
        "num_spec_tokens": 3,
    }
    assert vllm.has_stats(none_drafted)
    acceptance = vllm.acceptance(10, Reply(chunks=[[1], [2], [3]], stats=none_drafted))
    assert (acceptance.steps, acceptance.target_steps) == ([], 3)
    assert not vllm.has_stats(none_drafted | {"num_spec_steps": 2, "acceptance_histogram": [1, 1, 0, 0]})


@pytest.mark.parametrize("margin,kind", [(0.1, "near_tie"), (3.0, "divergence")])
def test_a_server_mismatch_is_explained_by_the_plain_servers_log_probabilities(tmp_path, smollm2, margin, kind):
    """The plain server's answers part from the speculative one's at their last token; its top-2
    log-probabilities there (completions `logprobs`) say whether that was a bfloat16 near-tie."""
    spec = FakeVllm(str(smollm2))
    plain = FakeVllm(str(smollm2), speculative=False, last_token_shift=1, margin=margin)
    args = (tmp_path, smollm2, spec.url, "baseline=true", f"runner.baseline_url={plain.url}")
    if kind == "near_tie":
        loss = attach(*args).lossless
    else:
        with pytest.raises(MeasurementError, match=rf"top-2 margin {margin:g}, bound 0.5"):
            attach(*args)
        loss = read_summary(tmp_path / "run").lossless
    assert {m.classification for m in loss.mismatches} == {kind} and len(loss.mismatches) == len(ROWS)
    assert all(m.top2_margin == pytest.approx(margin) and m.first_divergence == 7 for m in loss.mismatches)
    explain = plain.bodies[-1]  # the plain turn's prompt and its own prefix, one token, top-2 asked for
    assert (explain["max_tokens"], explain["logprobs"], explain["return_tokens_as_token_ids"]) == (1, 2, True)
