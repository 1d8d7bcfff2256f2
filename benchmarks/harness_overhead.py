"""Generate-phase overhead of speclens over a bare vLLM `LLM.generate`.

One vLLM engine (SmolLM2, n-gram d=3 by default) serves both: speclens's
step loop with per-step capture (`run_conversations`, the generate phase of
`evals.run`) and vLLM's own `LLM.generate` on the same chat-templated token
ids with the same speculative config. They alternate REPEATS times after a
warm-up; the ratio of the medians (and of the fastest runs) is printed. Target: <= 1.05.

    python benchmarks/harness_overhead.py [evals.run overrides]
"""

from __future__ import annotations

import statistics
import sys
import time

REPEATS = 7
DEFAULTS = ["drafter=ngram", "d=3", "dataset=humaneval", "dataset.num_requests=16", "sampling.max_tokens=128"]


def main(overrides: list[str]) -> None:
    from runners.vllm_engine import set_process_env

    set_process_env(4)
    from vllm import SamplingParams

    from evals.compose import compose_config, to_run_config
    from evals.conversation import run_conversations
    from evals.plan import make_plan
    from runners.vllm_runner import engine_factory

    plan = make_plan(to_run_config(compose_config(DEFAULTS + overrides)))
    if any(len(p.turns) > 1 for p in plan.prompts):
        sys.exit("use single-turn prompts (e.g. dataset=humaneval): bare LLM.generate has no turns")
    engine = engine_factory(plan.config, plan.d)(plan.target_dir, plan.speculative_config())
    prompts = [{"prompt_token_ids": engine.chat_token_ids([{"role": "user", "content": p.turns[0]}])} for p in plan.prompts]
    params = SamplingParams(temperature=0.0, max_tokens=plan.sampling.max_tokens)

    def harness() -> int:
        return sum(len(r.output_token_ids) for r in run_conversations(engine, plan.prompts, plan.sampling))

    def bare() -> int:
        return sum(len(o.outputs[0].token_ids) for o in engine.llm.generate(prompts, params, use_tqdm=False))

    harness(), bare()  # warm-up: first shapes, caches
    times: dict[str, list[float]] = {"harness": [], "bare": []}
    tokens: dict[str, int] = {}
    for _ in range(REPEATS):
        for name, fn in (("harness", harness), ("bare", bare)):
            start = time.perf_counter()
            tokens[name] = fn()
            times[name].append(time.perf_counter() - start)
    engine.close()
    if tokens["harness"] != tokens["bare"]:
        print(f"warning: output tokens differ (harness {tokens['harness']}, bare {tokens['bare']})")
    med = {k: statistics.median(v) for k, v in times.items()}
    for name, values in times.items():
        print(f"{name:8s} median {med[name]:.3f}s  runs {' '.join(f'{v:.3f}' for v in values)}  ({tokens[name]} tokens)")
    print(f"harness_overhead_ratio {med['harness'] / med['bare']:.3f}  (medians; target <= 1.05)")
    # The fastest run of each is the least disturbed by other load on a shared machine.
    print(f"harness_overhead_ratio_min {min(times['harness']) / min(times['bare']):.3f}  (fastest runs)")


if __name__ == "__main__":
    main(sys.argv[1:])
