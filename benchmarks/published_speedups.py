"""The step-cost model's error on every published speedup in tests/data/published_speedups.json,
with the roofline's defaults and, where aiconfigurator-core is installed (`speclens[whatif]`), with
its measured GEMM and all-reduce tables for each case's engine. Prints one row per case and the
medians docs/whatif.md quotes (all cases, B = 1, B > 1, the median of each source's median).

    python benchmarks/published_speedups.py [--no-aiconfigurator]

Pure arithmetic on a CPU (the tables need no GPU); tests/unit/test_published_speedups.py keeps the
roofline's figures from getting worse.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from speclens.errors import ConfigError  # noqa: E402
from speclens.gpu_model.measured_ops import AiconfiguratorOps  # noqa: E402
from speclens.gpu_model.model_error import HELD_OUT, case_error, held_out, leave_one_source_out  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "published_speedups.json"


def engine_of(case: dict) -> str:
    engine = case["engine"].lower()
    return "trtllm" if "tensorrt" in engine else "sglang" if "sglang" in engine else "vllm"


def medians(cases: list[dict], errors: dict[str, float]) -> str:
    def med(chosen: list[dict]) -> float:
        return statistics.median(abs(errors[c["id"]]) for c in chosen)

    sources: dict[str, list[dict]] = {}
    for case in cases:
        sources.setdefault(case["source"], []).append(case)
    per_source = statistics.median(med(group) for group in sources.values())
    at_one = [c for c in cases if c["batch_size"] == 1]
    batched = [c for c in cases if c["batch_size"] > 1]
    return (
        f"{med(cases):.1%} over {len(cases)}, {med(at_one):.1%} over {len(at_one)} at B = 1, "
        f"{med(batched):.1%} over {len(batched)} at B > 1; median of the {len(sources)} sources' medians {per_source:.1%}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-aiconfigurator", action="store_true", help="the roofline only")
    parser.add_argument(
        "--held-out", action="store_true", help="also each source predicted with the fixed costs fitted without it"
    )
    args = parser.parse_args()
    data = json.loads(DATA.read_text())
    cases, models = data["cases"], data["models"]
    roofline: dict[str, float] = {}
    measured: dict[str, float] = {}
    tables: dict[tuple[str, str], AiconfiguratorOps | None] = {}  # None: no tables for that pair
    use_tables = not args.no_aiconfigurator
    said: set[str] = set()
    print(f"{'case':32} {'engine':7} {'B':>3} {'D':>2} {'published':>9} {'roofline':>9} {'tables':>8}")
    for case in cases:
        roofline[case["id"]] = case_error(case, models)
        shown = "-"
        if use_tables:
            key = (case["gpu"], engine_of(case))
            if key not in tables:
                try:
                    tables[key] = AiconfiguratorOps(*key)
                except ConfigError as exc:  # not installed, or no tables for this GPU and engine
                    if str(exc) not in said:
                        print(f"speclens: {exc}", file=sys.stderr)
                        said.add(str(exc))
                    tables[key] = None
            if tables[key] is not None:
                measured[case["id"]] = case_error(case, models, ops=tables[key])
                shown = f"{measured[case['id']]:+.1%}"
        print(
            f"{case['id']:32} {engine_of(case):7} {case['batch_size']:>3} {case['d']:>2} "
            f"x{case['speedup']:>8.2f} {roofline[case['id']]:>+9.1%} {shown:>8}"
        )
    print(f"median |error|, roofline: {medians(cases, roofline)}")
    if measured:
        left = len(cases) - len(measured)
        print(
            f"median |error|, aiconfigurator's tables: {medians([c for c in cases if c['id'] in measured], measured)}"
        )
        if left:
            print(f"({left} cases without tables, left out of that median)")
    if args.held_out:
        print_held_out(cases, models)
    return 0


def print_held_out(cases: list[dict], models: dict) -> None:
    """Leave one source out: its cases predicted with overhead_ms, draft_pass_overhead_ms and
    token_us fitted on the other sources (speclens/gpu_model/model_error.py), beside the in-sample errors."""
    errors = leave_one_source_out(cases, models)
    print("held out by source (the fixed costs fitted without the case's source):")
    for source in sorted({c["source"] for c in cases}):
        mine = [errors[c["id"]] for c in cases if c["source"] == source]
        print(f"  {source:28} {len(mine):>2} cases, median |error| {statistics.median(abs(e) for e in mine):.1%}")
    print(f"median |error|, held out: {medians(cases, errors)}")
    found = held_out(cases, errors)
    print(
        f"held out: median |error| {found.median_abs:.1%}, worst {found.worst_abs:.1%}; 10th/90th percentile "
        f"{found.low:+.1%} / {found.high:+.1%} (speclens/gpu_model/model_error.py HELD_OUT: {HELD_OUT.low:+.1%} / {HELD_OUT.high:+.1%})"
    )


if __name__ == "__main__":
    sys.exit(main())
