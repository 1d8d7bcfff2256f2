"""How far a run's figures move between engines and runs, by dtype: in-process vs a launched server,
and a launched server's run-to-run spread.

    python benchmarks/reproducibility.py [--repeats 5] [--dtypes float32,bfloat16] [evals.run overrides]

For each dtype (float32, bfloat16) it measures the same config in-process (with baseline=true:
how many outputs part from plain decoding at near-ties) and `--repeats` times through a vLLM server
speclens launches, and prints, per dtype: each AL, the servers' spread (max - min, relative to the
in-process AL), and how many turns each server run parts from the in-process run. Where speclens
claims equality (float32) every figure must agree; the last line says whether it did.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

SETTINGS = [
    "drafter=ngram",
    "d=3",
    "dataset=mt_bench",
    "dataset.num_requests=3",
    "sampling.max_tokens=40",
    "engine.max_model_len=2048",
    "engine.cpu_kvcache_space_gib=1",
]
DTYPES = ("float32", "bfloat16")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated, of float32 and bfloat16")
    args, overrides = parser.parse_known_args(argv)
    dtypes = args.dtypes.split(",")
    if not set(dtypes) <= set(DTYPES):
        parser.error(f"--dtypes takes {', '.join(DTYPES)}, not {args.dtypes}")

    from evals.pipeline.compose import compose_config
    from evals.pipeline.run_job import run
    from evals.selfcheck import parted
    from runners.vllm_engine import set_process_env

    set_process_env(1)
    out = Path(tempfile.mkdtemp(prefix="speclens-reproducibility-"))
    quiet = lambda label: None  # noqa: E731
    exact = True
    for dtype in dtypes:
        base = [*SETTINGS, f"engine.dtype={dtype}", *overrides]
        local = run(compose_config([*base, "baseline=true"]), out / dtype / "in_process", progress=quiet)
        served = []
        for i in range(args.repeats):
            run_dir = out / dtype / f"server{i}"
            summary = run(compose_config([*base, "runner=server"]), run_dir, progress=quiet)
            n, differing = parted(out / dtype / "in_process", run_dir)
            served.append((summary.al, len(differing), n))
        als = [al for al, _, _ in served]
        spread = (max(als) - min(als)) / local.al
        loss = local.lossless
        print(
            f"{dtype}: in-process AL {local.al:.4f} ({loss.n_near_ties} near-tie flip(s) from plain decoding, "
            f"{local.numerics.threads} threads); server ALs {', '.join(f'{a:.4f}' for a in als)} "
            f"(mean {statistics.mean(als):.4f}, spread {spread:.2%} of in-process); turns parting from in-process: "
            + ", ".join(f"{k}/{n}" for _, k, n in served),
            flush=True,
        )
        if dtype == "float32":
            exact = all(al == local.al and k == 0 for al, k, _ in served)
    if "float32" in dtypes:
        print(f"float32 server == in-process on every run: {exact} (runs in {out})")
    else:
        print(f"float32 not measured: nothing claimed equal was checked (runs in {out})")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
