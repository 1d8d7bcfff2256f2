"""`python -m evals.selfcheck [overrides]`: can this engine build be trusted, and how far do its
figures move from run to run?

Drafting with the target itself must accept every draft token, so AL = 1 + D:
- greedy: exactly, and the speculative output equals plain decoding token for token;
- temperature > 0 with probabilistic drafting (draft distribution = target
  distribution, so every proposal is accepted): AL within TOLERANCE of 1 + D
  (draft and target passes see different batch shapes, so their logits may
  differ in the last bits).
Reproducibility, where it is guaranteed (float32, speclens/figures/summary.py Numerics):
- the same config run twice gives the same records (every step's accepted count, every token);
- a vLLM server speclens launches gives the in-process engine's records (runner=vllm only).
And at the run's own dtype (engine.dtype, else the target's): the AL of an in-process run and of a
second run (a server with runner=vllm), how many outputs part between them, and how many of the
in-process run's outputs part from plain decoding at near-ties; it fails only on a divergence that
rounding cannot explain. In float32 that is the checks above.

With `engine=gpu` it checks the GPU paths too: n-gram measured on the engine's model runner (V2 on
vLLM's CUDA build) equals the replay of that runner's proposer, a bf16 run with batch-invariant
kernels gives the same records twice (every run's records are checked against vLLM's counters), and
a run at synthetic acceptance (the target drafting for itself, rates [0.8, 0.6, 0.4], B = 1 and 8)
reaches the rates' AL, its measured speedup printed beside evals.whatif's prediction for the GPU it
ran on.

Prints PASS/FAIL/SKIP per check; exits 1 if any check fails, 2 for bad input. Overrides are
`evals.run` keys, e.g. `target=custom target.model=/models/x d=5`; `hydra.run.dir=<dir>` says where
the runs go (default outputs/selfcheck/<time>).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable

from evals.pipeline.compose import compose_config, to_run_config
from evals.pipeline.run_job import run
from reports.table import cell
from runners.registry import runner_of
from speclens.errors import ConfigError, MeasurementError, guarded
from speclens.figures.summary import RunSummary
from speclens.file_formats.records import read_parquet
from speclens.file_formats.run_files import OUTPUTS_FILE, STEPS_FILE, read_outputs
from speclens.gpu_model.gpus import gpu_for_device

# Relative shortfall of AL from 1 + D allowed at temperature > 0.
TOLERANCE = 0.02
SAMPLED_TEMPERATURE = 0.8
COMMON = ["d=3", "dataset.num_requests=8", "sampling.max_tokens=64", "seed=0"]
# float32: in bf16, batch-shape-dependent rounding can flip near-tied argmaxes, so greedy
# speculative and plain outputs may differ for reasons that are not the engine's fault.
FLOAT32 = ["engine.dtype=float32"]
SELF_DRAFT = ["drafter=draft_model", "drafter.model=${target.model}"]
GREEDY = ["sampling.temperature=0"]
RUN_DIR_KEY = "hydra.run.dir="


@dataclass
class CheckResult:
    name: str
    passed: bool
    detail: str
    ran: bool = True

    @property
    def verdict(self) -> str:
        return "SKIP" if not self.ran else "PASS" if self.passed else "FAIL"


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
    ("greedy", [*GREEDY, "baseline=true"], greedy_check),
    (
        "sampled",
        [f"sampling.temperature={SAMPLED_TEMPERATURE}", "drafter.sample_method=probabilistic", "baseline=false"],
        sampled_check,
    ),
]


def records(run_dir: Path) -> dict[tuple[int, str, int], tuple[list[int], list[int]]]:
    """Each (batch size, request, turn)'s output tokens and its drafted steps' accepted counts, as
    the run recorded them."""
    keys = ["batch_size", "request_id", "turn"]
    accepted = (
        read_parquet(run_dir / STEPS_FILE).sort_values([*keys, "step"]).groupby(keys).num_accepted.apply(list).to_dict()
    )
    rows = read_outputs(run_dir / OUTPUTS_FILE)
    return {key: (r["token_ids"], accepted.get(key, [])) for r in rows for key in [tuple(r[k] for k in keys)]}


def parted(a: Path, b: Path) -> tuple[int, list[str]]:
    """How many turns the two runs recorded, and those whose tokens or accepted counts differ."""
    first, second = records(a), records(b)
    keys = sorted(set(first) | set(second))
    return len(keys), [f"{r}#{t} (B={b})" for b, r, t in keys if first.get((b, r, t)) != second.get((b, r, t))]


def same_records_check(name: str, reference: Path, again: Path) -> CheckResult:
    n, differing = parted(reference, again)
    shown = "" if not differing else f" (e.g. {', '.join(differing[:3])}; runs in {reference} and {again})"
    return CheckResult(
        name, not differing, f"{n - len(differing)}/{n} turns with the same tokens and accepted counts" + shown
    )


def spread_check(first: RunSummary, second: RunSummary, first_dir: Path, second_dir: Path, between: str) -> CheckResult:
    """The figures' run-to-run movement at a dtype where near-ties can flip."""
    n, differing = parted(first_dir, second_dir)
    loss = first.lossless
    moved = abs(second.al - first.al) / first.al
    detail = (
        f"{first.numerics.dtype}: AL {first.al:.4f} in-process, {second.al:.4f} {between} ({moved:.2%} apart); "
        f"{len(differing)}/{n} turns part between the two; in-process, {loss.n_near_ties} output(s) part from "
        f"plain decoding at near-ties and {loss.n_divergences} beyond rounding"
    )
    return CheckResult(f"run-to-run spread at {first.numerics.dtype}", loss.n_divergences == 0, detail)


def measured(cfg, out_dir: Path, name: str) -> tuple[RunSummary | None, CheckResult | None]:
    """The run's summary, or the failed check that says why there is none."""
    try:
        return run(cfg, out_dir), None
    except MeasurementError as exc:
        return None, CheckResult(name, False, f"run failed: {exc}")


def selfcheck(user_overrides: list[str], out_root: Path) -> list[CheckResult]:
    def compose(*parts: list[str]):
        return compose_config([item for part in parts for item in part])

    # Every check's config first: a bad override is refused before any engine starts.
    configs = [
        (name, compose(COMMON, FLOAT32, SELF_DRAFT, user_overrides, overrides), judge)
        for name, overrides, judge in CHECKS
    ]
    repeat = compose(COMMON, FLOAT32, SELF_DRAFT, user_overrides, GREEDY, ["baseline=false"])
    # The server checks run where the engine is vLLM in-process (a server of the same build).
    in_process = runner_of(to_run_config(repeat)).name == "vllm"
    to_server = ["runner=server"] if in_process else []
    server = compose(COMMON, FLOAT32, SELF_DRAFT, user_overrides, GREEDY, ["baseline=false"], to_server)
    own_dtype = compose(COMMON, SELF_DRAFT, user_overrides, GREEDY, ["baseline=true"])
    second = compose(COMMON, SELF_DRAFT, user_overrides, GREEDY, ["baseline=false"], to_server)
    gpu = [synthetic_config(user_overrides)] if GPU_ENGINE in user_overrides else []
    for cfg in (*(c for _, c, _ in configs), repeat, server, own_dtype, second, *gpu):
        to_run_config(cfg)

    results = []

    def report(result: CheckResult) -> None:
        print(f"{result.verdict}  {result.name}: {result.detail}", flush=True)
        results.append(result)

    for name, cfg, judge in configs:
        summary, failed = measured(cfg, out_root / name, name)
        report(failed or judge(summary))
    greedy_dir = out_root / "greedy"
    if (greedy_dir / "summary.json").is_file():
        _, failed = measured(repeat, out_root / "repeat", "same records twice (float32)")
        report(failed or same_records_check("same records twice (float32)", greedy_dir, out_root / "repeat"))
        if in_process:
            _, failed = measured(server, out_root / "server", "a launched server's records (float32)")
            report(
                failed or same_records_check("a launched server's records (float32)", greedy_dir, out_root / "server")
            )
        else:
            report(CheckResult("a launched server's records (float32)", True, "runner=vllm only", ran=False))
    report(spread(own_dtype, second, out_root, "on a launched server" if in_process else "in a second run"))
    if GPU_ENGINE in user_overrides:
        for result in gpu_checks(user_overrides, out_root):
            report(result)
    return results


# `engine=gpu`: the GPU paths too (vLLM's CUDA build runs n-gram on Model Runner V2, whose proposer
# replay transcribes; batch-invariant kernels make bf16 repeatable).
GPU_ENGINE = "engine=gpu"
NGRAM = ["drafter=ngram", "drafter.prompt_lookup_min=1"]
BF16_INVARIANT = ["engine.dtype=bfloat16", "engine.batch_invariant=true"]


def gpu_checks(user_overrides: list[str], out_root: Path) -> list[CheckResult]:
    """n-gram measured on the engine's model runner equals its proposer's replay (float32), and a
    bf16 run with batch-invariant kernels gives the same records twice."""
    from evals.replay import replay

    def compose(*parts: list[str], name: str = "config"):
        return compose_config([item for part in parts for item in part], name)

    measure_cfg = compose(COMMON, FLOAT32, user_overrides, GREEDY, NGRAM, ["baseline=false"])
    replay_cfg = compose(
        [o for o in COMMON if not o.startswith("d=")],
        FLOAT32,
        user_overrides,
        GREEDY,
        NGRAM,
        ["d_max=3"],
        name="replay",
    )
    invariant = compose(COMMON, SELF_DRAFT, user_overrides, GREEDY, BF16_INVARIANT, ["baseline=false"])
    results = []
    name = "n-gram replay == measured, on the run's model runner (float32)"
    summary, failed = measured(measure_cfg, out_root / "ngram", name)
    if failed:
        results.append(failed)
    else:
        try:
            curves = replay(replay_cfg, out_root / "ngram_replay")
        except (ConfigError, MeasurementError) as exc:
            results.append(CheckResult(name, False, f"replay failed: {exc}"))
        else:
            results.append(replay_check(name, summary, curves))
    name = "same records twice (bf16, batch-invariant kernels)"
    _, failed = measured(invariant, out_root / "invariant", name)
    if failed:
        results.append(failed)
    else:
        _, failed = measured(invariant, out_root / "invariant_again", name)
        results.append(failed or same_records_check(name, out_root / "invariant", out_root / "invariant_again"))
    results.append(synthetic_step_check(user_overrides, out_root))
    return results


# A step at synthetic acceptance (the target drafting for itself, so any target has a drafter of a
# known shape): its AL is the rates' by construction, its speed the engine's on this GPU.
SYNTHETIC_RATES = [0.8, 0.6, 0.4]
# its own D (one rate per draft position), whatever d= the other checks run at
SYNTHETIC = [f"acceptance.synthetic={json.dumps(SYNTHETIC_RATES)}", f"d={len(SYNTHETIC_RATES)}"]
SYNTHETIC += ["baseline=true", "batch_sizes=[1,8]"]
SYNTHETIC_CHECK = "a step at synthetic acceptance, beside whatif's prediction for this GPU"


def synthetic_config(user_overrides: list[str]):
    return compose_config([*COMMON, *SELF_DRAFT, *user_overrides, *GREEDY, *SYNTHETIC])


def synthetic_step_check(user_overrides: list[str], out_root: Path) -> CheckResult:
    summary, failed = measured(synthetic_config(user_overrides), out_root / "synthetic", SYNTHETIC_CHECK)
    return failed or synthetic_check(summary, out_root / "synthetic")


def synthetic_check(summary: RunSummary, run_dir: Path) -> CheckResult:
    """Passes where the measured AL's CI holds the rates' AL (the synthetic sampler works on this
    engine); beside it, per B, the speedup measured and the one evals.whatif predicts for this GPU."""
    from evals.whatif import run_point
    from reports.whatif_text import interval_label
    from speclens.gpu_model.model_error import HELD_OUT

    expected = summary.synthetic_acceptance.expected_al
    low, high = summary.al_ci95 or (summary.al, summary.al)
    device = ((summary.numerics.gpu if summary.numerics else None) or {}).get("name")
    gpu = gpu_for_device(device) if device else None
    parts = [f"AL {summary.al:.2f} [{low:.2f}, {high:.2f}] at rates {SYNTHETIC_RATES} (expected {expected:.2f})"]
    for op in summary.operating_points:
        line = f"B={op.batch_size}: measured x{cell(op.predicted_speedup)} steady, x{cell(op.speedup)} end to end"
        if gpu is not None:
            try:
                point = run_point(run_dir, op.batch_size, f"gpu={gpu}")
            except ConfigError as exc:  # a target the step-cost model cannot shape: the check stands
                line += f", no prediction on {gpu}: {exc}"
            else:
                unscored = point.get("speedup_interval_derived_on", HELD_OUT.derived_on) != HELD_OUT.derived_on
                shown = interval_label(point.get("speedup_interval"), unscored)
                line += f", predicted on {gpu} x{point['speedup']:.2f} {shown}"
        parts.append(line)
    if gpu is None:
        where = "the run saw no GPU" if device is None else f"{device} is not in evals.whatif's table"
        parts.append(f"no prediction: {where} (evals.whatif calibrate={run_dir} fits this machine instead)")
    return CheckResult(SYNTHETIC_CHECK, low <= expected <= high, "; ".join(parts))


def replay_check(name: str, summary: RunSummary, curves) -> CheckResult:
    """The replayed point of the measured run's proposer (its model runner's) at its D equals it."""
    runner = summary.numerics.model_runner if summary.numerics else None
    whole = curves[(curves.domain == "all") & (curves.segment == "all") & (curves.d == summary.d)]
    point = whole[whole.proposer == (runner or "v1")]
    if point.empty:
        return CheckResult(name, False, f"no replayed point for proposer {runner} at d={summary.d}")
    al = float(point.al.iloc[0])
    others = ", ".join(f"{p} {a:.4f}" for p, a in zip(whole.proposer, whole.al) if p != (runner or "v1"))
    detail = f"model runner {runner}: measured AL {summary.al:.4f}, replayed {al:.4f} (other proposer: {others})"
    return CheckResult(name, abs(al - summary.al) <= 1e-9 * summary.al, detail)


def spread(own_dtype, second, out_root: Path, between: str) -> CheckResult:
    name = "run-to-run spread at the run's own dtype"
    first_summary, failed = measured(own_dtype, out_root / "own_dtype", name)
    if failed:
        return failed
    if first_summary.numerics.reproducible:
        return CheckResult(name, True, f"{first_summary.numerics.dtype}: reproducible (the checks above)", ran=False)
    second_summary, failed = measured(second, out_root / "own_dtype_again", name)
    return failed or spread_check(
        first_summary, second_summary, out_root / "own_dtype", out_root / "own_dtype_again", between
    )


def split_run_dir(argv: list[str]) -> tuple[list[str], Path]:
    """The overrides, and where the runs go (`hydra.run.dir=`, as for evals.run)."""
    dirs = [a[len(RUN_DIR_KEY) :] for a in argv if a.startswith(RUN_DIR_KEY)]
    if len(dirs) > 1 or (dirs and not dirs[0]):
        raise ConfigError("hydra.run.dir= takes one folder for the self-check's runs.")
    rest = [a for a in argv if not a.startswith(RUN_DIR_KEY)]
    return rest, Path(dirs[0]) if dirs else Path("outputs/selfcheck") / datetime.now().strftime("%Y-%m-%d_%H-%M-%S")


@guarded
def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    overrides, out_root = split_run_dir(argv)
    run_config = to_run_config(compose_config(COMMON + FLOAT32 + SELF_DRAFT + overrides))
    runner_of(run_config).prepare_process(run_config)
    results = selfcheck(overrides, out_root)
    failed = [r for r in results if r.ran and not r.passed]
    skipped = [r for r in results if not r.ran]
    print(
        f"selfcheck: {len(results) - len(failed) - len(skipped)} passed, {len(failed)} failed, "
        f"{len(skipped)} skipped (runs in {out_root})"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
