"""The step-cost model's absolute figures against published ones: each case of
speclens/gpu_model/published_step_times.json (a published decode figure with the GPU, TP, engine, model,
weights, batch size and input/output lengths stated) predicted as output tokens/s per GPU from the plain
decoding step T_verif(B) at the case's mean context, scored held out by source, with an 80 % interval.

    python benchmarks/published_step_times.py

Held out: the model's constants (speclens/gpu_model/step_cost.py Efficiency) are taken as they ship. None
of them was fitted to these sources (they come from SpecDecode-Bench's simulator, aiconfigurator's measured
kernels and the published speedups), so no fold refits anything and each case's prediction is already
held out; what is nested is the interval. A case's error is predicted / measured - 1 on tokens/s per GPU
(positive: the model promises more throughput than was measured), so the measured figure lies at
predicted / (1 + error). Its interval is [predicted / (1 + q), predicted / (1 - q)], q the 80th
percentile of the |errors| of the other sources' cases only (the case's own source left out: the source,
not the case, is the unit); it covers the case where |error| <= q. The held-out figures (median and worst
|error|, the nested interval's coverage) are printed first, the table after, then the in-sample interval
(q over every case, the case's own source included) beside.

Pure arithmetic on a CPU; tests/unit/test_published_step_times.py checks the data and this computation.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from speclens.gpu_model.gpus import gpu_named  # noqa: E402
from speclens.gpu_model.model_shape import shape_of  # noqa: E402
from speclens.gpu_model.step_cost import Efficiency, Hardware, verify_step  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "speclens" / "gpu_model" / "published_step_times.json"
LEVEL = 0.8  # the interval's stated coverage

# How each published figure becomes output tokens/s per GPU (B requests on TP GPUs).
MEASURES = ("output_tokens_per_s_per_gpu", "output_tokens_per_s", "tpot_ms", "batch_latency_s")


def quantile(values: list[float], q: float) -> float:
    """The q-quantile by linear interpolation between order statistics (numpy's default)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    below = int(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def load(path: Path = DATA) -> dict[str, Any]:
    return json.loads(path.read_text())


def measured_tokens_per_s_per_gpu(case: dict[str, Any]) -> float:
    """The case's published figure as output tokens/s per GPU."""
    value, batch, tp = case["value"], case["batch_size"], case["tp"]
    measure = case["measure"]
    if measure == "output_tokens_per_s_per_gpu":
        return value
    if measure == "output_tokens_per_s":  # all TP GPUs together
        return value / tp
    if measure == "tpot_ms":  # each of B requests gets a token every TPOT
        return batch * 1000.0 / value / tp
    if measure == "batch_latency_s":  # one static batch: B requests, output_len tokens each
        return batch * case["output_len"] / value / tp
    raise ValueError(f"{case['id']}: measure {measure!r} is not one of {', '.join(MEASURES)}")


def hardware(case: dict[str, Any], eff: Efficiency | None = None) -> Hardware:
    return Hardware(
        gpu_named(case["gpu"]),
        case["tp"],
        case["weights"],
        eff=eff or Efficiency(),
        expert_weights=case.get("expert_weights"),
    )


def predicted_step_ms(case: dict[str, Any], models: dict[str, Any], eff: Efficiency | None = None) -> float:
    """The model's plain decoding step T_verif(B) at the case's mean context, in ms."""
    target = shape_of(models[case["target"]], case["target"])
    return verify_step(target, case["batch_size"], 0, case["context_len"], hardware(case, eff)).total_ms


def tokens_per_s_per_gpu(batch: int, step_ms: float, tp: int) -> float:
    """Output tokens/s per GPU of B requests each given a token every `step_ms` on TP GPUs (what
    speclens.gpu_model.whatif.operating_rows reports for plain decoding)."""
    return batch * 1000.0 / step_ms / tp


def predicted_tokens_per_s_per_gpu(
    case: dict[str, Any], models: dict[str, Any], eff: Efficiency | None = None
) -> float:
    return tokens_per_s_per_gpu(case["batch_size"], predicted_step_ms(case, models, eff), case["tp"])


def case_error(case: dict[str, Any], models: dict[str, Any], eff: Efficiency | None = None) -> float:
    """predicted / measured - 1 on output tokens/s per GPU."""
    return predicted_tokens_per_s_per_gpu(case, models, eff) / measured_tokens_per_s_per_gpu(case) - 1


def nested_bounds(cases: list[dict[str, Any]], errors: dict[str, float], level: float = LEVEL) -> dict[str, float]:
    """Per case, the `level` quantile of the |errors| of the other sources' cases (its own source's
    left out)."""
    bounds = {}
    for case in cases:
        others = [abs(errors[c["id"]]) for c in cases if c["source"] != case["source"]]
        if not others:
            raise ValueError(f"{case['id']}: no other source to take an interval from")
        bounds[case["id"]] = quantile(others, level)
    return bounds


def pooled_bound(cases: list[dict[str, Any]], errors: dict[str, float], level: float = LEVEL) -> float:
    """The in-sample bound: the `level` quantile of every case's |error|, its own included."""
    return quantile([abs(errors[c["id"]]) for c in cases], level)


def interval(predicted: float, bound: float) -> tuple[float, float]:
    """Where the measured figure lies when |predicted / measured - 1| <= bound (no top from bound 1 up)."""
    return predicted / (1 + bound), (predicted / (1 - bound) if bound < 1 else math.inf)


def covered(error: float, bound: float) -> bool:
    return abs(error) <= bound


def held_out(cases: list[dict[str, Any]], errors: dict[str, float], level: float = LEVEL) -> dict[str, Any]:
    """The held-out figures: median and worst |error|, and how many cases the nested interval covers."""
    bounds = nested_bounds(cases, errors, level)
    inside = [c["id"] for c in cases if covered(errors[c["id"]], bounds[c["id"]])]
    pooled = pooled_bound(cases, errors, level)
    return {
        "cases": len(cases),
        "sources": len({c["source"] for c in cases}),
        "median_abs": statistics.median(abs(errors[c["id"]]) for c in cases),
        "worst_abs": max(abs(errors[c["id"]]) for c in cases),
        "bounds": bounds,
        "covered": len(inside),
        "coverage": len(inside) / len(cases),
        "pooled_bound": pooled,
        "pooled_covered": sum(covered(errors[c["id"]], pooled) for c in cases),
    }


def by_source(cases: list[dict[str, Any]], errors: dict[str, float]) -> dict[str, float]:
    """Each source's median |error|."""
    groups: dict[str, list[float]] = {}
    for case in cases:
        groups.setdefault(case["source"], []).append(abs(errors[case["id"]]))
    return {source: statistics.median(values) for source, values in sorted(groups.items())}


def fmt_rate(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:,.0f}"


def rows(cases: list[dict[str, Any]], models: dict[str, Any], errors: dict[str, float], bounds: dict[str, float]):
    for case in cases:
        predicted = predicted_tokens_per_s_per_gpu(case, models)
        low, high = interval(predicted, bounds[case["id"]])
        yield {
            "source": case["source"],
            "gpu": f"{case['gpu']} x{case['tp']}",
            "model": case["target"],
            "engine": case["engine"],
            "batch_size": case["batch_size"],
            "context_len": case["context_len"],
            "measured": measured_tokens_per_s_per_gpu(case),
            "predicted": predicted,
            "interval": (low, high),
            "error": errors[case["id"]],
            "covered": covered(errors[case["id"]], bounds[case["id"]]),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="the table as Markdown (docs/whatif.md)")
    args = parser.parse_args()
    data = load()
    cases, models = data["cases"], data["models"]
    errors = {c["id"]: case_error(c, models) for c in cases}
    found = held_out(cases, errors)
    print(
        f"held out by source ({found['cases']} cases, {found['sources']} sources; the constants as shipped, none "
        f"fitted to these sources): median |error| {found['median_abs']:.1%}, worst {found['worst_abs']:.1%} "
        f"(output tokens/s per GPU, predicted / measured - 1); the nested {LEVEL:.0%} interval covers "
        f"{found['covered']} of {found['cases']} ({found['coverage']:.0%})"
    )
    table = list(rows(cases, models, errors, found["bounds"]))
    if args.markdown:
        print()
        print(f"| source | engine | GPU | model | B | context | measured | predicted | {LEVEL:.0%} interval | error |")
        print("| --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: |")
        for r in table:
            low, high = r["interval"]
            mark = "" if r["covered"] else " (outside)"
            print(
                f"| {r['source']} | {r['engine']} | {r['gpu']} | {r['model']} | {r['batch_size']} | "
                f"{r['context_len']:,} | {r['measured']:,.0f} | "
                f"{r['predicted']:,.0f} | [{fmt_rate(low)}, {fmt_rate(high)}]{mark} | {r['error']:+.1%} |"
            )
    else:
        print(
            f"{'source':19} {'GPU':16} {'model':13} {'B':>4} {'ctx':>5} {'measured':>9} {'predicted':>9} "
            f"{'interval (tokens/s per GPU)':>27} {'error':>7}"
        )
        for r in table:
            low, high = r["interval"]
            shown = f"[{fmt_rate(low)}, {fmt_rate(high)}]" + ("" if r["covered"] else "*")
            print(
                f"{r['source']:19} {r['gpu']:16} {r['model']:13} {r['batch_size']:>4} {r['context_len']:>5} "
                f"{r['measured']:>9,.0f} {r['predicted']:>9,.0f} {shown:>27} {r['error']:>+7.1%}"
            )
        print("(* outside its interval)")
    print("median |error| by source: " + ", ".join(f"{s} {m:.1%}" for s, m in by_source(cases, errors).items()))
    print(
        f"in-sample beside: the {LEVEL:.0%} quantile of all {found['cases']} |errors| "
        f"({found['pooled_bound']:.1%}, each case's own source included) covers {found['pooled_covered']} of "
        f"{found['cases']}; nested, the bound per case ranges {min(found['bounds'].values()):.1%} to "
        f"{max(found['bounds'].values()):.1%}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
