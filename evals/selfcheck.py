"""`python -m evals.selfcheck [overrides]`: can this engine build be trusted?

Drafting with the target itself must accept every draft token, so AL = 1 + D:
- greedy: exactly, and the speculative output equals plain decoding token for token;
- temperature > 0 with probabilistic drafting (draft distribution = target
  distribution, so every proposal is accepted): AL within TOLERANCE of 1 + D
  (draft and target passes see different batch shapes, so their logits may
  differ in the last bits).
Prints PASS/FAIL per check; exits 1 if any check fails. Overrides are
`evals.run` keys, e.g. `target=custom target.model=/models/x d=5`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable

from core.errors import SpeclensError, guarded
from core.summary import RunSummary
from evals.compose import compose_config, to_run_config
from evals.run import run
from runners.registry import runner_of

# Relative shortfall of AL from 1 + D allowed at temperature > 0.
TOLERANCE = 0.02
SAMPLED_TEMPERATURE = 0.8
# float32: in bf16, batch-shape-dependent rounding can flip near-tied argmaxes, so greedy
# speculative and plain outputs may differ for reasons that are not the engine's fault.
DEFAULTS = ["d=3", "dataset.num_requests=8", "sampling.max_tokens=64", "seed=0", "engine.dtype=float32"]
SELF_DRAFT = ["drafter=draft_model", "drafter.model=${target.model}"]


@dataclass
class CheckResult:
    name: str
    passed: bool
    detail: str


def greedy_check(summary: RunSummary) -> CheckResult:
    d = summary.d
    loss = summary.lossless
    passed = summary.al == 1 + d and bool(loss and loss.identical)
    detail = (
        f"AL {summary.al:.4f} (expected exactly {1 + d}); "
        f"{loss.n_identical}/{loss.n_compared} outputs identical to plain decoding"
    )
    return CheckResult("greedy draft == target", passed, detail)


def sampled_check(summary: RunSummary) -> CheckResult:
    d = summary.d
    floor = (1 + d) * (1 - TOLERANCE)
    passed = summary.al >= floor
    detail = f"AL {summary.al:.4f} at temperature {SAMPLED_TEMPERATURE} (expected >= {floor:.3f}, i.e. 1 + D within {TOLERANCE:.0%})"
    return CheckResult("sampled draft == target (probabilistic drafting)", passed, detail)


CHECKS: list[tuple[str, list[str], Callable[[RunSummary], CheckResult]]] = [
    ("greedy", ["sampling.temperature=0", "baseline=true"], greedy_check),
    (
        "sampled",
        [f"sampling.temperature={SAMPLED_TEMPERATURE}", "drafter.sample_method=probabilistic", "baseline=false"],
        sampled_check,
    ),
]


def selfcheck(user_overrides: list[str], out_root: Path) -> list[CheckResult]:
    # Every check's config first: a bad override is refused before any engine starts.
    configs = [(name, compose_config(DEFAULTS + SELF_DRAFT + user_overrides + overrides), judge)
               for name, overrides, judge in CHECKS]
    for _, cfg, _ in configs:
        to_run_config(cfg)
    results = []
    for name, cfg, judge in configs:
        try:
            result = judge(run(cfg, out_root / name))
        except SpeclensError as exc:
            result = CheckResult(name, False, f"run failed: {exc}")
        print(f"{'PASS' if result.passed else 'FAIL'}  {result.name}: {result.detail}", flush=True)
        results.append(result)
    return results


@guarded
def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    run_config = to_run_config(compose_config(DEFAULTS + SELF_DRAFT + argv))
    runner_of(run_config).prepare_process(run_config)
    out_root = Path("outputs/selfcheck") / datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    results = selfcheck(argv, out_root)
    failed = [r for r in results if not r.passed]
    print(f"selfcheck: {len(results) - len(failed)} passed, {len(failed)} failed (runs in {out_root})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
