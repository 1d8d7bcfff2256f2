"""Generate-phase overhead of speclens over a bare vLLM `LLM.generate`.

One vLLM engine (SmolLM2, n-gram d=3 by default) serves both: speclens's step loop with per-step
capture (`run_conversations`, the generate phase of `evals.run`) and vLLM's own `LLM.generate` on
the same chat-templated token ids with the same speculative config. After a warm-up they run
`--repeats` times in pairs, the order alternating (AB BA AB …) so that drift on a shared machine
falls on both alike. Each pair gives a ratio, harness over bare, of wall time and of this
process's CPU time (the in-process engine computes in this process; CPU time moves less with other
load). Printed: the median ratio of each with a 95 % bootstrap interval over the pairs. Target:
<= 1.05, resolved to 2 % (the interval's half-width).

    python benchmarks/harness_overhead.py [--repeats N] [evals.run overrides]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

DEFAULTS = ["drafter=ngram", "d=3", "dataset=humaneval", "dataset.num_requests=16", "sampling.max_tokens=128"]
TARGET = 1.05
RESOLUTION = 0.02


def median_ci(ratios: list[float], seed: int = 0, samples: int = 4000) -> tuple[float, float, float]:
    """The median of the pairs' ratios and its 95 % percentile bootstrap interval."""
    values = np.asarray(ratios)
    idx = np.random.default_rng(seed).integers(0, len(values), size=(samples, len(values)))
    lo, hi = np.percentile(np.median(values[idx], axis=1), [2.5, 97.5])
    return float(np.median(values)), float(lo), float(hi)


def timed(fn) -> tuple[int, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    tokens = fn()
    return tokens, time.perf_counter() - wall, time.process_time() - cpu


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=16, help="pairs of runs (default 16)")
    args, overrides = parser.parse_known_args(argv)
    from runners.vllm_engine import set_process_env

    set_process_env(4)
    from vllm import SamplingParams

    from evals.pipeline.compose import compose_config, to_run_config
    from evals.pipeline.conversation import run_conversations
    from evals.pipeline.plan import make_plan
    from runners.vllm_runner import engine_factory

    plan = make_plan(to_run_config(compose_config(DEFAULTS + overrides)))
    if any(len(p.turns) > 1 for p in plan.prompts):
        sys.exit("use single-turn prompts (e.g. dataset=humaneval): bare LLM.generate has no turns")
    engine = engine_factory(plan.config, plan.d)(plan.target_dir, plan.speculative_config())
    prompts = [
        {"prompt_token_ids": engine.chat_token_ids([{"role": "user", "content": p.turns[0]}])} for p in plan.prompts
    ]
    params = SamplingParams(temperature=0.0, max_tokens=plan.sampling.max_tokens)

    def harness() -> int:
        return sum(len(r.output_token_ids) for r in run_conversations(engine, plan.prompts, plan.sampling))

    def bare() -> int:
        return sum(len(o.outputs[0].token_ids) for o in engine.llm.generate(prompts, params, use_tqdm=False))

    harness(), bare()  # warm-up: first shapes, caches
    runs: dict[str, list[tuple[int, float, float]]] = {"harness": [], "bare": []}
    for i in range(args.repeats):
        order = (("harness", harness), ("bare", bare)) if i % 2 == 0 else (("bare", bare), ("harness", harness))
        for name, fn in order:
            runs[name].append(timed(fn))
    engine.close()
    tokens = {name: {r[0] for r in values} for name, values in runs.items()}
    if tokens["harness"] != tokens["bare"]:
        print(f"warning: output tokens differ (harness {sorted(tokens['harness'])}, bare {sorted(tokens['bare'])})")
    for name, values in runs.items():
        walls = [r[1] for r in values]
        print(f"{name:8s} wall median {statistics.median(walls):.3f}s  runs {' '.join(f'{w:.3f}' for w in walls)}")
    resolved = True
    for label, column in (("wall", 1), ("cpu", 2)):
        ratios = [h[column] / b[column] for h, b in zip(runs["harness"], runs["bare"], strict=True)]
        median, lo, hi = median_ci(ratios)
        half = (hi - lo) / 2
        resolved &= half <= RESOLUTION
        print(
            f"harness_overhead_ratio_{label} {median:.3f} [{lo:.3f}, {hi:.3f}] over {len(ratios)} pairs "
            f"(target <= {TARGET}; half-width {half:.3f}, resolution {RESOLUTION})"
        )
    if not resolved:
        print(f"not resolved to {RESOLUTION:.0%}: run more --repeats, or on a quieter machine")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
