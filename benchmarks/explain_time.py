"""What `reports.explain` costs on two large runs: `python benchmarks/explain_time.py [--requests 1000]`.

Measures two runs of the same prompts with the fake runner (no model): A at max_tokens 64, B at
256, each request answering 200 tokens in steps cycling through the fake's pattern. Then times
`reports.explain` on them, against the time to read both runs' records (summary, steps, requests,
outputs) as any report does: the ratio is what explaining adds to reading. Prints both times, the
ratio, the parts and the conclusion (the parts must sum to the difference).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evals.pipeline.compose import compose_config  # noqa: E402
from evals.pipeline.run_job import run  # noqa: E402
from reports import explain  # noqa: E402
from speclens.file_formats.reading import read_run  # noqa: E402


def measure(folder: Path, requests: int, max_tokens: int) -> Path:
    target = folder / "target"
    if not target.exists():
        target.mkdir(parents=True)
        config = {"architectures": ["LlamaForCausalLM"], "vocab_size": 1000, "hidden_size": 16, "num_hidden_layers": 2}
        (target / "config.json").write_text(json.dumps(config))
        rows = [
            {"question_id": f"q{i}", "category": "chat", "turns": [f"question {i} " * (i % 7 + 1)]}
            for i in range(requests)
        ]
        (folder / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = compose_config(
        [
            "runner=fake",
            "target=custom",
            f"target.model={target}",
            "dataset=jsonl",
            f"dataset.path={folder / 'prompts.jsonl'}",
            f"dataset.num_requests={requests}",
            "drafter=ngram",
            "d=3",
            "runner.output_tokens=200",
            f"sampling.max_tokens={max_tokens}",
        ]
    )
    out = folder / f"max_tokens_{max_tokens}"
    run(cfg, out, progress=lambda label: None)
    return out


def read_both(a: Path, b: Path) -> float:
    started = time.perf_counter()
    for path in (a, b):
        r = read_run(path)
        _ = (r.steps, r.requests, r.outputs)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="speclens-explain-") as tmp:
        folder = Path(tmp)
        a, b = measure(folder, args.requests, 64), measure(folder, args.requests, 256)
        reading = min(read_both(a, b) for _ in range(2))
        started = time.perf_counter()
        report = explain.explain(a, b)
        explaining = time.perf_counter() - started
    total = sum(report["parts"].values())
    print(f"two runs of {args.requests:,} requests: {report['outputs']['parted']:,} outputs parted")
    print(f"reading both runs' records: {reading:.2f} s")
    print(f"reports.explain: {explaining:.2f} s ({explaining / reading:.1f}x reading them)")
    print(f"difference {report['difference']:+.4f}, parts sum {total:+.4f}")
    for name, value in report["parts"].items():
        print(f"  {name}: {value:+.4f}")
    print(f"conclusion: {report['conclusion']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
