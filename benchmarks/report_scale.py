"""Curves plus ranking from one million synthetic step records: `python benchmarks/report_scale.py`.

Synthesises a sweep (4 drafters x 4 draft lengths x 2 batch sizes, 8 domains, 1,000,000
drafted-step records with their request rows and engine-step timings), then times what a
sweep's report costs: every run's summary from its records (AL, bootstrap CIs, per-domain,
per-position, histogram, step costs, predicted speedups, via the same code as `evals.run`),
`reports.curves` and `reports.rank`. Target: under 10 s at 10M records (`--records 10000000`),
under 3 s at 1M. Prints the time and records/s, the summaries (which grow with the records) apart
from curves and ranking (about 2 s of drawing ten PNGs, whatever the record count).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evals.pipeline.stamp import RunOrigin  # noqa: E402
from evals.pipeline.summarise import build_summary, operating_points  # noqa: E402
from speclens.figures.summary import Timing  # noqa: E402
from speclens.file_formats import records  # noqa: E402
from speclens.file_formats.summary_file import write_summary  # noqa: E402
from speclens.generation import RecordGranularity  # noqa: E402
from speclens.provenance import Provenance  # noqa: E402

DRAFTERS = ["ngram", "suffix", "eagle3", "draft_model"]
DRAFT_LENGTHS = [1, 2, 3, 5]
BATCH_SIZES = [1, 8]
DOMAINS = ["coding", "chat", "math", "summarization", "rag", "writing", "reasoning", "long_context"]
REQUESTS_PER_PASS = 400


@dataclass(frozen=True)
class SyntheticPass:
    """A pass as the summary builder reads one (evals/pipeline/summarise.py MeasuredPass), without results."""

    batch_size: int
    output_tokens_per_s: float
    generate_s: float
    elapsed_s: float
    results: tuple = ()
    warmup_s: float = 0.0
    domain_counters: None = None
    # no length buckets: the synthetic engine steps are the run's own (not split by length)
    engine_steps: tuple = ()
    record_granularity: RecordGranularity = RecordGranularity.step

    @property
    def output_tokens(self) -> int:
        return round(self.output_tokens_per_s * self.generate_s)


def synthetic_run(rng: np.random.Generator, d: int, n_steps: int) -> dict:
    """Records of one run: steps and requests per batch size, and engine steps of all three modes."""
    steps, requests, engine = [], [], []
    per_pass = n_steps // len(BATCH_SIZES)
    for b in BATCH_SIZES:
        request_of_step = rng.integers(0, REQUESTS_PER_PASS, per_pass)
        accepted = np.minimum(rng.geometric(0.45, per_pass) - 1, d)
        ids = np.array([f"r{i}" for i in range(REQUESTS_PER_PASS)])
        domains = np.array(DOMAINS)[np.arange(REQUESTS_PER_PASS) % len(DOMAINS)]
        steps.append(
            pd.DataFrame(
                {
                    "batch_size": b,
                    "request_id": ids[request_of_step],
                    "domain": domains[request_of_step],
                    "category": domains[request_of_step],
                    "turn": 0,
                    "step": np.arange(per_pass),
                    "position": rng.integers(100, 4000, per_pass),
                    "num_drafted": d,
                    "num_accepted": accepted,
                }
            )
        )
        per_request = (
            pd.Series(accepted)
            .groupby(request_of_step)
            .agg(["sum", "count"])
            .reindex(range(REQUESTS_PER_PASS), fill_value=0)
        )
        drafted, acc = per_request["count"].to_numpy(), per_request["sum"].to_numpy()
        requests.append(
            pd.DataFrame(
                {
                    "batch_size": b,
                    "request_id": ids,
                    "domain": domains,
                    "category": domains,
                    "turn": 0,
                    "prompt_tokens": 200,
                    "output_tokens": 1 + drafted + acc,
                    "drafted_steps": drafted,
                    "target_steps": 1 + drafted,
                    "num_accepted": acc,
                    "al": 1 + acc / np.maximum(drafted, 1),
                    "latency_s": 1.0,
                }
            )
        )
        for mode, base_ms in (("plain", 20.0), ("speculative", 22.0 + 2.0 * d), ("verify", 20.0 + 1.5 * d)):
            n = 2000
            engine.append(
                pd.DataFrame(
                    {
                        "mode": mode,
                        "batch_size": b,
                        "step": np.arange(n),
                        "wall_s": rng.normal(base_ms, 1.0, n) / 1000,
                        "num_requests": b,
                        "num_tokens": b * (1 + (d if mode != "plain" else 0)),
                        "num_draft_tokens": b * (d if mode != "plain" else 0),
                    }
                )
            )
    return {
        "steps": pd.concat(steps, ignore_index=True),
        "requests": pd.concat(requests, ignore_index=True),
        "engine": pd.concat(engine, ignore_index=True),
    }


def summarize(run: dict, drafter: str, d: int, out_dir: Path) -> None:
    """A run's summary.json from its records, as `evals.pipeline.measure.measure` builds it."""
    steps, requests = run["steps"], run["requests"]
    passes = [SyntheticPass(b, 100.0 * b, 10.0, 10.5) for b in BATCH_SIZES]
    baseline = [SyntheticPass(b, 80.0 * b, 10.0, 10.5) for b in BATCH_SIZES]
    points = operating_points(passes, baseline, steps, requests, run["engine"], d, 0, {})
    summary = build_summary(
        drafter=drafter,
        d=d,
        target="synthetic",
        dataset="synthetic",
        runner="fake",
        steps=steps,
        requests=requests,
        counters=None,
        seed=0,
        timing=Timing(generate_s=20.0, output_tokens_per_s=100.0),
        origin=RunOrigin({}, {"target": "t", "draft": None, "dataset": "p"}, None, None),
        operating_points=points,
    )
    # scripted records, as the fake engine's: every figure of this sweep is fake
    summary = replace(
        summary, provenance=Provenance(source="fake", runner="fake", engine="fake", batch_sizes=BATCH_SIZES)
    )
    out_dir.mkdir(parents=True)
    write_summary(summary, out_dir)
    stamp = {"config": {"sampling": {"temperature": 0.0, "top_p": 1.0, "max_tokens": 256}, "seed": 0, "drafter": {}}}
    (out_dir / "stamp.json").write_text(json.dumps(stamp))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    from reports.curves import write_curves
    from reports.ranking_tables import write_ranking

    rng = np.random.default_rng(0)
    n_runs = len(DRAFTERS) * len(DRAFT_LENGTHS)
    runs = {(dr, d): synthetic_run(rng, d, args.records // n_runs) for dr in DRAFTERS for d in DRAFT_LENGTHS}
    total = sum(len(r["steps"]) for r in runs.values())
    assert set(runs[("ngram", 1)]["steps"].columns) == set(records.STEP_COLUMNS)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "sweep"
        start = time.perf_counter()
        for (drafter, d), run in runs.items():
            summarize(run, drafter, d, root / f"drafter={drafter},d={d}")
        summarized = time.perf_counter()
        curves = write_curves(root)
        ranking, _ = write_ranking([root])
        elapsed = time.perf_counter() - start
    print(f"{total:,} step records, {n_runs} runs x {len(BATCH_SIZES)} batch sizes, {len(DOMAINS)} domains")
    print(f"summaries {summarized - start:.2f} s, curves + ranking {elapsed - (summarized - start):.2f} s")
    print(
        f"total {elapsed:.2f} s (target < 10 s at 10M records, < 3 s at 1M), {total / elapsed:,.0f} records/s; "
        f"{len(curves)} curve points, {len(ranking)} ranking rows"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
