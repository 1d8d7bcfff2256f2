"""What a reasoning split (reasoning.end / reasoning.parser) adds to a run's wall time.

One real run of `evals.run` on the embedded target (n-gram d=3 by default) with a text delimiter;
then, on its own outputs, the split's work timed REPEATS times: every output's boundary found on
decoded prefixes (evals/pipeline/reasoning.py) and the records built with their segments, against the
records built without. Prints the extra time over the run's wall time (the whole `evals.run`,
start-up included, and the generate phase alone). Target: < 2 %.

    python benchmarks/reasoning_split_cost.py [evals.run overrides]
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPEATS = 5
DEFAULTS = ["drafter=ngram", "d=3", "dataset.num_requests=16", "sampling.max_tokens=128", "reasoning.end=."]


def main(overrides: list[str]) -> None:
    from evals.pipeline.compose import compose_config, to_run_config
    from evals.pipeline.plan import make_plan
    from evals.pipeline.reasoning import split_outputs
    from evals.pipeline.run_job import run
    from runners.registry import runner_of
    from speclens.file_formats import records
    from speclens.file_formats.summary_file import read_summary
    from speclens.generation import DraftedStep, TurnResult

    out = Path(tempfile.mkdtemp(prefix="speclens-split-")) / "run"
    cfg = compose_config(DEFAULTS + overrides)
    typed = to_run_config(cfg)
    runner_of(typed).prepare_process(typed)
    started = time.perf_counter()
    run(cfg, out, progress=lambda label: None)
    wall_s = time.perf_counter() - started
    summary = read_summary(out)
    plan = make_plan(typed)
    by_id = {p.request_id: p for p in plan.prompts}
    steps, requests = records.read_parquet(out / "steps.parquet"), records.read_parquet(out / "requests.parquet")
    outputs = [json.loads(line) for line in (out / "outputs.jsonl").read_text().splitlines()]
    results = []
    for o in outputs:
        row = requests[(requests.request_id == o["request_id"]) & (requests.turn == o["turn"])].iloc[0]
        own = steps[(steps.request_id == o["request_id"]) & (steps.turn == o["turn"])]
        results.append(
            TurnResult(
                o["request_id"],
                o["turn"],
                int(row.prompt_tokens),
                o["token_ids"],
                o["text"],
                [DraftedStep(int(s.position), int(s.num_drafted), int(s.num_accepted)) for s in own.itertuples()],
                int(row.target_steps),
                0.0,
                prompt_token_ids=tuple([0] * int(row.prompt_tokens)),
            )
        )

    def frames() -> None:
        records.step_frame(results, by_id, 0)
        records.request_frame(results, by_id, 0)

    def split_and_frames() -> None:
        split_outputs(plan.segmenter, results)
        frames()

    def plain_frames() -> None:
        for r in results:
            r.boundary = None
        frames()

    def timed(fn) -> float:
        times = []
        for _ in range(REPEATS):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return statistics.median(times)

    extra = timed(split_and_frames) - timed(plain_frames)
    generate_s = summary.timing.generate_s
    print(
        f"{len(results)} outputs, {sum(len(r.output_token_ids) for r in results)} tokens; split by "
        f"{plan.segmenter.description}: {summary.reasoning.n_closed} closed, {summary.reasoning.n_unclosed} unclosed"
    )
    print(f"split + segment columns: {extra * 1000:.1f} ms (median of {REPEATS})")
    print(
        f"run wall time {wall_s:.1f} s: ratio {extra / wall_s:.4f} ({100 * extra / wall_s:.2f} %); "
        f"generate phase {generate_s:.1f} s: ratio {extra / generate_s:.4f}"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
