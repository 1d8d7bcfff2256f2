"""How long `reports.build` takes on a sweep of many runs, and how large its pages are.

    python benchmarks/report_build.py [--runs 40]

Measures a sweep with the fake engine (no model: ngram and suffix at D = 1 … and temperatures 0
and 0.5, two batch sizes, baseline=true, 8 prompts in two domains) into a temporary folder, then
times `reports.build` on it (median of 3) and prints the time, the report's size and its chart
count. Target: under 10 s for 40 runs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROWS = [
    {"question_id": f"q{i}", "category": "coding" if i % 2 else "writing", "turns": [f"task {i}"]} for i in range(8)
]


def fake_sweep(root: Path, runs: int) -> Path:
    from evals.pipeline.compose import compose_config
    from evals.pipeline.run_job import run

    target = root / "target"
    target.mkdir()
    config = {
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": 100,
        "hidden_size": 16,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "num_key_value_heads": 1,
    }
    (target / "config.json").write_text(json.dumps(config))
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    base = ["runner=fake", "target=custom", f"target.model={target}", "dataset=jsonl", f"dataset.path={prompts}"]
    base += ["batch_sizes=[1,4]", "baseline=true"]
    sweep = root / "sweep"
    points = [(drafter, d, t) for t in (0.0, 0.5) for drafter in ("ngram", "suffix") for d in range(1, 11)][:runs]
    for drafter, d, t in points:
        cfg = compose_config([*base, f"drafter={drafter}", f"d={d}", f"sampling.temperature={t}"])
        with contextlib.redirect_stdout(io.StringIO()):  # each run's result table
            run(cfg, sweep / f"{drafter}-d{d}-t{t}", progress=lambda label: None)
    return sweep


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args(argv)
    from reports.build import build

    with tempfile.TemporaryDirectory() as scratch:
        os.environ.setdefault("SPECLENS_CACHE", str(Path(scratch) / "cache"))
        sweep = fake_sweep(Path(scratch), args.runs)
        times = []
        for _ in range(3):
            start = time.perf_counter()
            html_file, md_file = build(sweep)
            times.append(time.perf_counter() - start)
        html = html_file.read_text()
        charts = len(json.loads(re.search(r'id="speclens-charts">(.*?)</script>', html).group(1)))
        pngs = len(list(sweep.glob("report_*.png")))
        print(
            f"{args.runs} runs: reports.build median {statistics.median(times):.2f} s (runs {', '.join(f'{t:.2f}' for t in times)}; target < 10 s)"
        )
        print(f"report.html {len(html.encode()) / 1e6:.2f} MB, {charts} charts; report.md with {pngs} PNGs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
