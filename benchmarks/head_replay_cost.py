"""EAGLE-3's whole curve from one pass: the replay's cost against one measured run at d_max, and its
AL gap to measured runs, beside the gap of the estimate it replaced (min(accepted, D) over the
steps of one run at d_max), in each dtype asked.

For each dtype, in one process after a warm-up run: `evals.replay drafter=eagle3 d_max=7` (one
plain generation, the target's states, the head's chains: runners/head_chain.py), then
`evals.run` at D = 1, 3, 5 and 7 on the same prompts, each with its own engine load. Prints

  head_replay_cost_ratio <dtype>  = replay wall time / the measured run at D = d_max  (target <= 1.2)
  head_replay_gap <dtype> d=<D>   = |replayed AL - measured AL| / measured AL
  estimate_gap <dtype> d=<D>      = the same for min(accepted, D) over the run at d_max

    python benchmarks/head_replay_cost.py [--dtypes float32 bfloat16] [--d-max 7] [evals.run overrides]

The head is the embedded target's reduced build (`python -m evals.embedded_drafters eagle3
--budget reduced`) unless `drafter.model=` names another; `drafter=` names another drafter that
replays from one pass (mtp, a parallel draft_model: docs/usage.md "Replay"). In float32 the replay is a check (the
measured runs follow plain decoding's tokens; a gap there is a near-tie the replay counted, its
`near_ties`); in bfloat16 a measured run may part from plain decoding at a near-tie and follow
other tokens, and its gap is that.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEFAULTS = ["drafter=eagle3", "dataset=mt_bench", "dataset.num_requests=16", "sampling.max_tokens=96"]


def estimate(run_dir: Path, d: int) -> float:
    """The former estimate at D from the run at d_max (evals/replay.py clipped_at)."""
    from evals.replay import clipped_at
    from speclens.figures import metrics
    from speclens.file_formats.records import read_parquet
    from speclens.file_formats.run_files import STEPS_FILE

    return metrics.acceptance_length(clipped_at(read_parquet(run_dir / STEPS_FILE), d))


def one_dtype(dtype: str, d_max: int, settings: list[str], out: Path) -> None:
    from evals.pipeline.compose import compose_config
    from evals.pipeline.run_job import run
    from evals.replay import replay
    from speclens.file_formats.summary_file import read_replay

    settings = [*settings, f"engine.dtype={dtype}"]
    run(compose_config([*settings, "d=1", "dataset.num_requests=1", "sampling.max_tokens=8"]), out / "warmup")
    start = time.perf_counter()
    curves = replay(compose_config([*settings, f"d_max={d_max}"], "replay"), out / "replay")
    replay_s = time.perf_counter() - start
    near_ties = read_replay(out / "replay").summary.near_ties
    pooled = curves[(curves.domain == "all") & (curves.segment == "all")].set_index("d")
    measured, seconds = {}, {}
    for d in sorted({1, 3, 5, d_max} & set(range(1, d_max + 1))):
        start = time.perf_counter()
        measured[d] = run(compose_config([*settings, f"d={d}"]), out / f"d{d}", progress=lambda label: None).al
        seconds[d] = time.perf_counter() - start
    print(
        f"{dtype}: replay d=1..{d_max} {replay_s:.1f}s ({near_ties} near-tie drafts counted); measured run at d={d_max} {seconds[d_max]:.1f}s"
    )
    print(f"head_replay_cost_ratio {dtype} {replay_s / seconds[d_max]:.3f}  (target <= 1.2)")
    for d, al in measured.items():
        replayed, estimated = pooled.al[d], estimate(out / f"d{d_max}", d)
        print(
            f"head_replay_gap {dtype} d={d} {abs(replayed - al) / al:.4%}  (replayed {replayed:.4f}, measured {al:.4f}); "
            f"estimate_gap {dtype} d={d} {abs(estimated - al) / al:.4%}  (estimated {estimated:.4f})"
        )


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--d-max", type=int, default=7)
    args, overrides = parser.parse_known_args(argv)

    from runners.vllm_engine import set_process_env

    set_process_env(4)
    settings = DEFAULTS + overrides
    other = any(o.startswith("drafter=") and o != "drafter=eagle3" for o in overrides)
    if not other and not any(o.startswith("drafter.model=") for o in overrides):
        from evals.embedded.drafter_builds import ensure_drafter

        settings.append(f"drafter.model={ensure_drafter('eagle3', 'reduced')}")
    out = Path(tempfile.mkdtemp(prefix="speclens-head-replay-"))
    for dtype in args.dtypes:
        one_dtype(dtype, args.d_max, settings, out / dtype)


if __name__ == "__main__":
    main(sys.argv[1:])
