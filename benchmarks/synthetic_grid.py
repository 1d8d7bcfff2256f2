"""The step-cost model checked on this machine's engine, held out: a grid of runs at synthetic
acceptance (one per D, each at its own rates, every run at B = 1 and B = 4, capped at --requests,
with baseline=true), then for each D the model calibrated (`evals.whatif calibrate=`,
`gpu=measured`) on the step costs of the other D's runs only and asked for that D's steady decode
speedup at each B. Prints one row per held-out point (predicted, measured from the run's own step
timings, the run's end-to-end speedup beside) and the median and worst held-out error that
docs/whatif.md quotes, with the in-sample error (calibrated on every run) beside it. Each
calibration also fits the K=0 tax (an undrafted step's cost, from the idle pass) and T_draft (the
drafter's per-pass overhead) beside its three constants (speclens/gpu_model/calibrate.py): what
each fold fitted is printed under the held-out table, with those fits' own held-out errors.

    python benchmarks/synthetic_grid.py [--out DIR] [--drafter eagle3] [--requests 8] [--max-tokens 48] [OVERRIDE ...]

The runs are real vLLM runs on this machine's CPU (the embedded target and its untrained EAGLE-3
head on the sample prompts: about eight minutes each on one core); a run already finished under
--out is reused, so an interrupted grid resumes. The acceptance is synthetic (vLLM's synthetic
rejection sampler): the drafter's compute is real, its acceptance set.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evals import whatif  # noqa: E402
from reports.runs import find_runs  # noqa: E402
from speclens.errors import (  # noqa: E402
    EXIT_USER_ERROR,
    ArgumentParser,
    ConfigError,
    MeasurementError,
    guarded,
)
from speclens.file_formats.summary_file import SUMMARY_FILE

# Marginal per-position rates per D: non-increasing, ALs from 1.7 to 4.5 across the grid.
GRID = {1: [0.7], 3: [0.8, 0.6, 0.4], 5: [0.9, 0.8, 0.7, 0.6, 0.5]}
BATCH_SIZES = [1, 4]
REPO = Path(__file__).resolve().parents[1]


def batch_sizes(requests: int) -> list[int]:
    """BATCH_SIZES capped at the request count (a batch of B needs B prompts)."""
    return sorted({min(b, requests) for b in BATCH_SIZES})


def run_child(command: list[str]) -> None:
    """Run one evals.run: its own error, on the terminal above, is followed by one line naming it
    (a refusal exits 2 like the child's; a failed measurement 3)."""
    status = subprocess.run(command, cwd=REPO).returncode
    if status == 0:
        return
    shown = " ".join(command[2:])  # from `evals.run`, without the interpreter's path
    message = f"synthetic_grid: `{shown}` exited with status {status} (its error is above)."
    raise (ConfigError if status == EXIT_USER_ERROR else MeasurementError)(message)


def run_grid(out: Path, drafter: str, requests: int, max_tokens: int, overrides: list[str]) -> None:
    for d, rates in GRID.items():
        run_dir = out / f"{drafter}_d{d}"
        if (run_dir / SUMMARY_FILE).exists():
            continue
        command = [
            sys.executable,
            "-m",
            "evals.run",
            f"drafter={drafter}",
            f"d={d}",
            f"acceptance.synthetic={json.dumps(rates)}",
            "baseline=true",
            f"batch_sizes={json.dumps(batch_sizes(requests))}",
            f"dataset.num_requests={requests}",
            f"sampling.max_tokens={max_tokens}",
            f"hydra.run.dir={run_dir}",
            *overrides,
        ]
        print(f"synthetic_grid: d={d} rates={rates}", file=sys.stderr, flush=True)
        run_child(command)


def rows_for(held: list, calibrate_on: Path) -> tuple[list[dict], dict]:
    """Each operating point of the `held` runs: whatif's prediction calibrated on the runs under
    `calibrate_on`, beside what the run measured; with that calibration's record (whatif.json's
    `calibration`: the three constants, the K=0 tax and T_draft fitted beside them)."""
    rows, calibration = [], {}
    for run in held:
        for op in run.summary.operating_points:
            result = whatif.run_result(run.path, op.batch_size, f"calibrate={calibrate_on}")
            (point,) = result["points"]
            calibration = result["calibration"]
            rows.append(
                {
                    "d": run.summary.d,
                    "al": run.summary.al,
                    "batch_size": op.batch_size,
                    "predicted": point["speedup"],
                    "interval": point.get("speedup_interval"),
                    "measured_steady": op.predicted_speedup,  # from the run's own step timings
                    "measured_end_to_end": op.speedup,
                    "t_step_predicted_ms": point["t_step_ms"],
                    "t_step_measured_ms": op.t_step.median_ms if op.t_step else None,
                }
            )
    return rows, calibration


def gathered(runs: list, into: Path) -> Path:
    """A folder holding copies of just these runs: what calibrate= reads."""
    into.mkdir(parents=True)
    for run in runs:
        shutil.copytree(run.path, into / run.path.name)
    return into


def error(row: dict) -> float:
    return row["predicted"] / row["measured_steady"] - 1


def checked(runs: list) -> list:
    """One run per D, each with step costs at every B: what a fold holds out and predicts."""
    ds = [run.summary.d for run in runs]
    if len(set(ds)) != len(ds):
        raise ConfigError(
            f"synthetic_grid: two runs at one D under --out ({sorted(ds)}); give each grid its own --out."
        )
    for run in runs:
        for op in run.summary.operating_points:
            if op.predicted_speedup is None or op.t_step is None:
                raise MeasurementError(f"synthetic_grid: {run.path} has too few steady steps at B={op.batch_size}.")
    return runs


def beside_errors(calibration: dict) -> dict[str, list[float]]:
    """The held-out errors of the fits beside the three constants in one calibration: the K=0 tax
    (its T_idle points) and each T_draft constant fitted (as a share of the measured step)."""
    out = {"K=0 tax": [p["held_out_error"] for p in (calibration.get("k0_tax") or {}).get("points", [])]}
    for kind, fit in calibration["t_draft"].items():
        if fit["fitted"]:
            out[f"T_draft ({kind})"] = [p["held_out_error"] for p in fit["points"]]
    return out


def beside_report(folds: list[tuple[str, dict]]) -> None:
    """Per calibration: what was fitted beside the three constants, and how far its own points are
    off held out (each point left out of that fit)."""
    for name, calibration in folds:
        print(f"{name}: {calibration['fitted_beside']}")
        for what, errs in beside_errors(calibration).items():
            finite = [abs(e) for e in errs if e is not None]
            if finite:
                print(
                    f"  {what} held out: median |error| {statistics.median(finite):.1%}, worst {max(finite):.1%} "
                    f"({len(finite)} of its points)"
                )
            else:
                print(f"  {what}: too few points to hold one out ({len(errs)})")


def report(title: str, rows: list[dict]) -> None:
    print(f"\n{title}")
    print("   D    AL   B  predicted   80% range       measured steady  end-to-end  error   T_step pred/meas ms")
    for r in rows:
        interval = "-" if not r["interval"] else f"[{r['interval'][0]:.2f}, {r['interval'][1]:.2f}]"
        print(
            f"{r['d']:>4} {r['al']:>5.2f} {r['batch_size']:>3}  x{r['predicted']:<8.2f} {interval:<15} "
            f"x{r['measured_steady']:<15.2f} x{r['measured_end_to_end']:<9.2f} {error(r):+6.1%}  "
            f"{r['t_step_predicted_ms']:.1f} / {r['t_step_measured_ms']:.1f}"
        )
    errs = [abs(error(r)) for r in rows]
    print(f"median |error| {statistics.median(errs):.1%}, worst {max(errs):.1%} over {len(rows)} points")


def check_counts(args: argparse.Namespace) -> None:
    """--requests and --max-tokens refused here, in one line, before any run is started."""
    for flag, value in (("--requests", args.requests), ("--max-tokens", args.max_tokens)):
        if value < 1:
            raise ConfigError(f"synthetic_grid: {flag} {value}: must be >= 1.")


@guarded
def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="synthetic_grid", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("outputs/benchmarks/synthetic_grid"))
    parser.add_argument("--drafter", default="eagle3")
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument(
        "overrides", nargs="*", help="more evals.run overrides for every run (runner=fake in the tests)"
    )
    args = parser.parse_args(argv)
    check_counts(args)
    run_grid(args.out, args.drafter, args.requests, args.max_tokens, args.overrides)
    runs = checked(sorted(find_runs(args.out), key=lambda r: r.summary.d))
    held_out, folds = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for run in runs:
            others = [r for r in runs if r is not run]
            rows, calibration = rows_for([run], gathered(others, Path(tmp) / f"without_d{run.summary.d}"))
            held_out += rows
            folds.append((f"calibrated without D={run.summary.d}", calibration))
        in_sample, everything = rows_for(runs, gathered(runs, Path(tmp) / "all"))
    report("held out: each D predicted by the model calibrated on the other D's runs", held_out)
    beside_report(folds)
    report("in-sample: calibrated on every run (for comparison only)", in_sample)
    beside_report([("calibrated on every run", everything)])
    print(
        "\nmeasured steady = T_verif(B)·tokens per step / T_step(B, D) from the run's median step times "
        "(the quantity whatif predicts); end-to-end adds prefill and ramp (speedup_account)."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
