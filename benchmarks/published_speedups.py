"""The step-cost model's error on every published speedup in tests/data/published_speedups.json,
held out by source first: the nested coverage of the 80 % interval every prediction carries (each
case's interval built from the other sources' held-out errors only), the held-out median and worst
|error|, and whether the shipped default is what the fit gives on all sources; then the in-sample
figures (the shipped constants on every case), one row per case, and, where aiconfigurator-core is
installed (`speclens[whatif]`), each case with its engine's measured GEMM and all-reduce tables.

    python benchmarks/published_speedups.py [--no-aiconfigurator]

At the shipped constants: nested coverage 27 of 31 (87 %), held-out median |error| 15.6 %, worst
42.6 % (in-sample 15.6 %, 42.1 %); speclens/gpu_model/model_error.py says how each is made.
Pure arithmetic on a CPU (the tables need no GPU); tests/unit/test_nested_intervals.py and
tests/unit/test_published_speedups.py keep the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from speclens.errors import ConfigError  # noqa: E402
from speclens.gpu_model.measured_ops import AiconfiguratorOps  # noqa: E402
from speclens.gpu_model.model_error import (  # noqa: E402
    ENGINE_TERMS,
    FITTED,
    GRID,
    HELD_OUT,
    case_engine,
    case_error,
    engine_term_scores,
    fit,
    folds,
    held_out,
    leave_one_source_out,
    nested_covered,
)
from speclens.gpu_model.serving_engines import ALL_DRAFTERS, ENGINES  # noqa: E402
from speclens.gpu_model.step_cost import Efficiency  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "published_speedups.json"


def medians(cases: list[dict], errors: dict[str, float]) -> str:
    def med(chosen: list[dict]) -> float:
        return statistics.median(abs(errors[c["id"]]) for c in chosen)

    sources: dict[str, list[dict]] = {}
    for case in cases:
        sources.setdefault(case["source"], []).append(case)
    per_source = statistics.median(med(group) for group in sources.values())
    at_one = [c for c in cases if c["batch_size"] == 1]
    batched = [c for c in cases if c["batch_size"] > 1]
    worst = max(abs(errors[c["id"]]) for c in cases)
    return (
        f"{med(cases):.1%} over {len(cases)} (worst {worst:.1%}), {med(at_one):.1%} over {len(at_one)} at B = 1, "
        f"{med(batched):.1%} over {len(batched)} at B > 1; median of the {len(sources)} sources' medians {per_source:.1%}"
    )


def print_held_out(cases: list[dict], models: dict, errors: dict[str, float]) -> None:
    """The held-out figures, first: nested coverage, median and worst, the folds' constants."""
    found = held_out(cases, models, errors)
    covered = nested_covered(cases, models, errors)
    q = math.log1p(found.high)
    print(
        f"held out by source ({FITTED} fitted without the case's source; overhead_ms "
        f"{Efficiency().overhead_ms:g} and token_us {Efficiency().token_us:g} from SpecDecode-Bench's step fit):"
    )
    print(
        f"  nested coverage of the {found.level:.0%} interval: {sum(covered)} of {len(cases)} "
        f"({sum(covered) / len(cases):.1%}) published speedups inside the interval built from the other sources only"
    )
    missed = [c["id"] for c, inside in zip(cases, covered) if not inside]
    print(f"    outside: {', '.join(missed) or 'none'}")
    print(f"  median |error| {medians(cases, errors)}")
    print(
        f"  interval: published in [predicted · e^-{q:.3f}, predicted · e^{q:.3f}] (error {found.low:+.1%} / "
        f"{found.high:+.1%}), derived on {found.derived_on}"
    )
    picks = {case["source"]: eff for case, eff in folds(cases, models)}
    values = sorted(getattr(eff, FITTED) for eff in picks.values())
    everything = getattr(fit(cases, models), FITTED)
    shipped = getattr(Efficiency(), FITTED)
    edge = "at" if values[0] == GRID[0] or values[-1] == GRID[-1] else "inside"
    print(
        f"  {FITTED} per fold {values[0]:g}–{values[-1]:g} ({edge} the grid {GRID[0]:g}–{GRID[-1]:g}); on all "
        f"sources {everything:g}; shipped {shipped:g}" + ("" if everything == shipped else "  <-- NOT what ships")
    )
    if found != HELD_OUT:
        print(f"  speclens/gpu_model/model_error.py HELD_OUT is stale: {HELD_OUT} (these cases give {found})")
    for source in sorted(picks):
        mine = [errors[c["id"]] for c in cases if c["source"] == source]
        print(
            f"    {source:28} {len(mine):>2} cases, {FITTED} {getattr(picks[source], FITTED):g}, "
            f"median |error| {statistics.median(abs(e) for e in mine):.1%}"
        )


def print_engine_terms(cases: list[dict], models: dict) -> None:
    """Each engine's term scored on its own published cases: supported, or assumed (widened, marked)."""
    scores = engine_term_scores(cases, models)
    print("engine terms on their own published cases (held out by source, fold constants):")
    for score in scores.values():
        verdict = "scored" if score.supports else "assumed: widened and marked * in every prediction"
        print(f"  engine={score.engine} {score.drafter}: {score.describe()} -> {verdict}")
    unscored = [
        f"{engine.name}: {', '.join(d for d in sorted(ALL_DRAFTERS) if engine.moves(d) and (engine.name, d) not in scores)}"
        for engine in ENGINES.values()
        if any(engine.moves(d) and (engine.name, d) not in scores for d in ALL_DRAFTERS)
    ]
    print(f"  no published case scores the rest ({'; '.join(unscored)}): assumed, widened and marked *")
    if scores != ENGINE_TERMS:
        print(f"  speclens/gpu_model/model_error.py ENGINE_TERMS is stale: these cases give {scores}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog=f"At the shipped constants: nested coverage {HELD_OUT.nested_covered} of {HELD_OUT.cases}, held-out "
        f"median |error| {HELD_OUT.median_abs:.1%}, worst {HELD_OUT.worst_abs:.1%} (in-sample "
        f"{HELD_OUT.in_sample_median_abs:.1%}, {HELD_OUT.in_sample_worst_abs:.1%}).",
    )
    parser.add_argument("--no-aiconfigurator", action="store_true", help="the roofline only")
    parser.add_argument("--held-out", action="store_true", help="(the default now; kept for old command lines)")
    args = parser.parse_args()
    data = json.loads(DATA.read_text())
    cases, models = data["cases"], data["models"]
    held = leave_one_source_out(cases, models)
    print_held_out(cases, models, held)
    print_engine_terms(cases, models)
    roofline: dict[str, float] = {}
    measured: dict[str, float] = {}
    tables: dict[tuple[str, str], AiconfiguratorOps | None] = {}  # None: no tables for that pair
    use_tables = not args.no_aiconfigurator
    said: set[str] = set()
    print("in-sample (the shipped constants on every case), beside each case's held-out error:")
    print(f"{'case':32} {'engine':7} {'B':>3} {'D':>2} {'published':>9} {'held out':>9} {'roofline':>9} {'tables':>8}")
    for case in cases:
        roofline[case["id"]] = case_error(case, models)
        shown = "-"
        if use_tables:
            key = (case["gpu"], case_engine(case))
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
            f"{case['id']:32} {case_engine(case):7} {case['batch_size']:>3} {case['d']:>2} "
            f"x{case['speedup']:>8.2f} {held[case['id']]:>+9.1%} {roofline[case['id']]:>+9.1%} {shown:>8}"
        )
    print(f"median |error|, in-sample, roofline: {medians(cases, roofline)}")
    if measured:
        left = len(cases) - len(measured)
        print(
            "median |error|, in-sample, aiconfigurator's tables: "
            f"{medians([c for c in cases if c['id'] in measured], measured)}"
        )
        if left:
            print(f"({left} cases without tables, left out of that median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
