"""The simulated ladder scored against a measured one on the same machine (issue 67, part 5): the
step-cost model calibrated on this machine (`calibrate=` a run measured with baseline=true) predicts
the ladder `python -m evals.load` measured, at its rates, arrivals and mean request lengths; printed
per stage (each arm at each rate): output tokens/s and TPOT p50, predicted / measured - 1, and at the
crossover.

    python benchmarks/ladder_prediction.py <ladder dir> <calibration run dir>

The calibration run gives the acceptance too (its speculation profile): measure it with the
ladder's drafter and D, on the same target and prompts, e.g.
`python -m evals.run drafter=ngram d=3 baseline=true 'batch_sizes=[1,2,4]' runner=server`.
In-sample where the calibration run's prompts are the ladder's (its step costs were fitted on this
machine's passes of them); what is held out is the load: the calibration measures closed-loop batches,
the ladder open-loop arrivals.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd  # noqa: E402

from evals.whatif import build  # noqa: E402
from speclens.errors import ArgumentParser, guarded  # noqa: E402
from speclens.file_formats.load_file import LOAD_REQUESTS_FILE, read_load_file  # noqa: E402
from speclens.file_formats.records import read_parquet  # noqa: E402
from speclens.file_formats.run_files import REQUESTS_FILE  # noqa: E402


def predicted_for(ladder: Path, calibration: Path) -> tuple[Any, dict[str, Any]]:
    found = read_load_file(ladder)
    requests = pd.read_parquet(ladder / LOAD_REQUESTS_FILE)
    rates = sorted({s.request_rate for s in found.stages})
    ds = sorted({s.d for s in found.stages if s.arm == "static"})
    if "prompt_tokens" in requests.columns:
        input_tokens = round(requests["prompt_tokens"].mean())
    else:  # a ladder recorded before its requests kept their prompt lengths: the calibration run's
        input_tokens = round(read_parquet(calibration / REQUESTS_FILE)["prompt_tokens"].mean())
        print(f"input tokens: the calibration run's mean prompt ({input_tokens}); the ladder does not record its own")
    argv = [
        str(calibration),
        f"calibrate={calibration}",
        f"request_rates=[{','.join(f'{r:g}' for r in rates)}]",
        f"input_tokens={input_tokens}",
        f"output_tokens={round(requests['output_tokens'].mean())}",
        f"arrivals={found.stages[0].arrivals}",
        # as many requests a stage as the ladder measured (a queue's length follows the stage's)
        f"stage.requests={max(s.n_requests for s in found.stages)}",
        f"d=[{','.join(map(str, ds))}]",
    ]
    result, _ = build(argv)
    return found, result


def error(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or not measured:
        return None
    return predicted / measured - 1.0


def shown(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def compare(found: Any, result: dict[str, Any]) -> list[str]:
    predicted = {(s["arm"], s["d"], s["request_rate"]): s for s in result["ladder"]}
    rows, tput_errors, tpot_errors = [], [], []
    for stage in sorted(found.stages, key=lambda s: (s.request_rate, s.arm, s.d or 0)):
        if stage.arm == "schedule":
            continue
        mine = predicted.get((stage.arm, stage.d, stage.request_rate))
        if mine is None:
            continue
        tput = error(mine["output_tokens_per_s"], stage.output_tokens_per_s)
        tpot = error(mine["tpot_ms"]["p50"] if mine["tpot_ms"] else None, stage.tpot_ms.p50 if stage.tpot_ms else None)
        tput_errors += [abs(tput)] if tput is not None else []
        tpot_errors += [abs(tpot)] if tpot is not None else []
        arm = "plain" if stage.arm == "plain" else f"{stage.drafter} d={stage.d}"
        rows.append(
            f"  {stage.request_rate:>6g}  {arm:<12} measured {stage.output_tokens_per_s:8.1f} tok/s "
            f"{stage.tpot_ms.p50 if stage.tpot_ms else float('nan'):7.1f} ms   predicted "
            f"{mine['output_tokens_per_s']:8.1f} tok/s {mine['tpot_ms']['p50'] if mine['tpot_ms'] else float('nan'):7.1f} ms"
            f"   error tok/s {shown(tput)}, TPOT {shown(tpot)}"
        )
    lines = [
        f"per stage (predicted / measured - 1): median |error| output tokens/s "
        f"{statistics.median(tput_errors):.1%} over {len(tput_errors)} stages, TPOT p50 "
        f"{statistics.median(tpot_errors):.1%} over {len(tpot_errors)}"
        if tput_errors and tpot_errors
        else "per stage: no stage of both ladders to compare",
    ]
    measured_cross = {(c.drafter, c.d): c for c in found.crossover if c.domain == "all"}
    for row in result["crossover"]:
        theirs = measured_cross.get((row["drafter"], row["d"]))
        if theirs is None:
            continue
        for key in ("throughput_rate", "tpot_rate"):
            lines.append(
                f"crossover {row['drafter']} d={row['d']} {key}: measured "
                f"{_rate(getattr(theirs, key), theirs.below_ladder)}, predicted {_rate(row[key], row['below_ladder'])} "
                f"(range {row.get(f'{key}_range')})"
            )
    return lines + ["stages:"] + rows


def _rate(rate: float | None, below: bool) -> str:
    if rate is None:
        return "not reached"
    return f"{'<= ' if below else ''}{rate:.2f} req/s"


@guarded
def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="python benchmarks/ladder_prediction.py", description=__doc__.splitlines()[0])
    parser.add_argument("ladder", type=Path, help="a ladder dir (python -m evals.load)")
    parser.add_argument("calibration", type=Path, help="a run dir measured with baseline=true on the same machine")
    args = parser.parse_args(argv)
    found, result = predicted_for(args.ladder, args.calibration)
    source = found.stages[0].provenance.source if found.stages else "unknown"
    print(
        f"ladder: {args.ladder} ({source}); predicted on this machine calibrated from {args.calibration} "
        f"(source predicted, {result['cost_model']})"
    )
    for line in compare(found, result):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
