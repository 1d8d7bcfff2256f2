"""speclens's load ladder against GuideLLM's on the same server, rates and arrivals (issue 67, part 6).

    python benchmarks/vs_guidellm.py --guidellm-path <dir> [--rates 0.25,0.5] [--requests 16]
        [--output-len 64]

Launches one vLLM server (the embedded SmolLM2 target, plain decoding, float32, no prefix cache),
then at each rate runs `python -m evals.load runner=server runner.url=… drafter=none` (Poisson
arrivals, the sample prompts, every answer `--output-len` tokens: sampling.ignore_eos=true) and
`guidellm run --profile kind=poisson,rate=R --constraint kind=max_requests,count=N --data
kind=synthetic_text,prompt_tokens=<speclens's mean prompt>,output_tokens=<--output-len>`, and prints
per rate both tools' TPOT p50 and output tokens/s and their ratios (target: within 5 %, or the
difference explained). GuideLLM (PyPI `guidellm`, which pins its own torch and pydantic) lives in a
side folder or venv: `pip install --target <dir> guidellm==0.8.1` (its dependencies this venv
lacks beside it) and `--guidellm-path <dir>`, which goes on GuideLLM's PYTHONPATH only. Measured:
both clients on this machine's cores beside the server; what differs besides the client: speclens
sends the prompt set's prompts (chat-templated token ids), GuideLLM synthetic text of the same mean
length.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd  # noqa: E402

from speclens.errors import ArgumentParser, guarded  # noqa: E402


def speclens_ladder(url: str, target: Path, rates: list[float], args, out: Path) -> tuple[dict, float]:
    """Per rate (TPOT p50 ms, output tokens/s) of speclens's ladder, and its mean prompt tokens."""
    from evals.load import main as load_main
    from speclens.file_formats.load_file import LOAD_REQUESTS_FILE, read_load_file

    status = load_main(
        [
            "runner=server",
            f"runner.url={url}",
            "target=custom",
            f"target.model={target}",
            "drafter=none",
            f"request_rates=[{','.join(f'{r:g}' for r in rates)}]",
            f"stage.requests={args.requests}",
            "stage.warmup_requests=1",
            f"sampling.max_tokens={args.output_len}",
            "sampling.ignore_eos=true",
            "engine.dtype=float32",
            "engine.max_model_len=2048",
            "force=true",
            f"hydra.run.dir={out}",
        ]
    )
    if status != 0:
        raise SystemExit(f"speclens's ladder exited {status}")
    found = read_load_file(out)
    figures = {s.request_rate: (s.tpot_ms.p50, s.output_tokens_per_s) for s in found.stages}
    prompts = pd.read_parquet(out / LOAD_REQUESTS_FILE)["prompt_tokens"].mean()
    return figures, float(prompts)


def guidellm_stage(url: str, target: Path, rate: float, prompt_tokens: int, args, out: Path) -> tuple[float, float]:
    """(TPOT p50 ms, output tokens/s) of one GuideLLM poisson stage."""
    result = out / f"guidellm_{rate:g}.json"
    command = [
        sys.executable,
        "-m",
        "guidellm",
        "run",
        "--backend",
        f"kind=openai_http,target={url}",
        "--profile",
        f"kind=poisson,rate={rate:g}",
        "--constraint",
        f"kind=max_requests,count={args.requests + 1}",
        "--data",
        f"kind=synthetic_text,prompt_tokens={prompt_tokens},output_tokens={args.output_len}",
        "--tokenizer",
        f"kind=huggingface_auto,model={target}",
        "--output",
        f"kind=json,path={result}",
        "--disable-console-interactive",
    ]
    env = {**os.environ, "PYTHONPATH": str(args.guidellm_path)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"guidellm exited {done.returncode}: {done.stderr[-2000:]}")
    tpot, tokens_per_s, concurrency = guidellm_figures(json.loads(result.read_text()))
    print(f"  guidellm at {rate:g} req/s: mean concurrency {concurrency:.1f}")
    return tpot, tokens_per_s


def guidellm_figures(report: dict) -> tuple[float, float, float]:
    """(TPOT p50 ms, output tokens/s, mean requests in flight) of a GuideLLM 0.8 JSON report's
    first benchmark, over its successful requests."""
    metrics = report["benchmarks"][0]["metrics"]
    return (
        float(metrics["time_per_output_token_ms"]["successful"]["median"]),
        float(metrics["output_tokens_per_second"]["successful"]["mean"]),
        float(metrics["request_concurrency"]["successful"]["mean"]),
    )


@guarded
def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="python benchmarks/vs_guidellm.py", description=__doc__.splitlines()[0])
    parser.add_argument("--guidellm-path", type=Path, required=True, help="a folder holding guidellm (pip --target)")
    parser.add_argument("--rates", default="0.25,0.5")
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--output-len", type=int, default=64)
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]

    from evals.embedded.target import ensure_smollm2
    from evals.pipeline.compose import compose_config, to_run_config
    from runners.server_runner import ServerProcess

    target = ensure_smollm2()
    cfg = to_run_config(
        compose_config(
            [
                "runner=server",
                "engine.dtype=float32",
                "engine.max_model_len=2048",
                "engine.cpu_kvcache_space_gib=1",
                "+engine.extra_args.enable_prefix_caching=false",
            ]
        )
    )
    server = ServerProcess(target, None, cfg)
    out = Path(tempfile.mkdtemp(prefix="speclens-vs-guidellm-"))
    try:
        ours, prompt_tokens = speclens_ladder(server.url, target, rates, args, out / "speclens")
        theirs = {r: guidellm_stage(server.url, target, r, round(prompt_tokens), args, out) for r in rates}
    finally:
        server.stop()
        server.log_file.unlink(missing_ok=True)
    print(f"measured on one plain vLLM server (SmolLM2-135M, float32), {args.requests} requests a stage, poisson:")
    for rate in rates:
        (our_tpot, our_tps), (their_tpot, their_tps) = ours[rate], theirs[rate]
        print(
            f"{rate:g} req/s: TPOT p50 speclens {our_tpot:.1f} ms, guidellm {their_tpot:.1f} ms, ratio "
            f"{our_tpot / their_tpot:.3f}; output tokens/s speclens {our_tps:.1f}, guidellm {their_tps:.1f}, ratio "
            f"{our_tps / their_tps:.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
