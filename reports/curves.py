"""`python -m reports.curves <sweep dir>`: AL-vs-D curves per domain and drafter.

Writes curves.parquet and curves.csv (drafter, d, domain, al, al_ci95_lo, al_ci95_hi,
tokens_per_step, source = measured|replayed|estimated, temperature; domain `all` is the pooled
figure) and curve_<domain>.png (one line per drafter, CI band, measured points marked). Runs at
several sampling temperatures are one more axis: their lines are labelled by temperature, and
curve_temperature_<domain>.png draws AL against temperature per drafter and D.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from core.errors import SpeclensError, guarded
from core.metrics import GroupFigures
from reports import figures
from reports.runs import (
    CONSISTENT_ACROSS_TEMPERATURES,
    Run,
    check_consistent,
    find_replays,
    find_runs,
)

CURVE_COLUMNS = ["drafter", "d", "domain", "al", "al_ci95_lo", "al_ci95_hi", "tokens_per_step", "source",
                 "temperature"]
# Where several sources give the same (drafter, d, domain), the first of these wins.
SOURCE_ORDER = {"measured": 0, "replayed": 1, "estimated": 2}


def curve_row(drafter: str, d: int, domain: str, figures: GroupFigures, source: str, temperature: float = 0.0) -> dict:
    """One curve point from a group's figures."""
    lo, hi = figures.al_ci95 or [None, None]
    return {"drafter": drafter, "d": d, "domain": domain, "al": figures.al, "al_ci95_lo": lo,
            "al_ci95_hi": hi, "tokens_per_step": figures.tokens_per_step, "source": source,
            "temperature": temperature}


def measured_rows(run: Run) -> list[dict]:
    s = run.summary
    return [curve_row(s.drafter, s.d, domain, g, "measured", run.temperature) for domain, g in s.groups().items()]


def drafter_identity(run: Run) -> str:
    drafter = dict(run.stamp.get("config", {}).get("drafter", {}))
    return repr(sorted(drafter.items()))


def collect(root: Path) -> pd.DataFrame:
    """Curve rows from every finished run (and replayed curve) under `root`."""
    # A run of a draft-length schedule has no one D: it is ranked, not drawn on an AL-vs-D curve.
    runs = [r for r in find_runs(root) if r.summary.d is not None and not r.summary.schedule]
    replays = find_replays(root)
    if not runs and not replays:
        raise SpeclensError(f"{root}: no finished speculative runs (summary.json) or replayed curves in it.")
    check_consistent(runs + replays, CONSISTENT_ACROSS_TEMPERATURES)
    seen: dict[tuple, str] = {}
    for run in runs:
        key = (run.summary.drafter, run.summary.d, run.temperature)
        ident = drafter_identity(run)
        if seen.setdefault(key, ident) != ident:
            raise SpeclensError(
                f"two runs of drafter={key[0]} d={key[1]} (temperature {key[2]:g}) with different drafter settings under {root} "
                f"(one is {run.path}); sweep them into separate dirs."
            )
    frames = [pd.DataFrame([row for run in runs for row in measured_rows(run)], columns=CURVE_COLUMNS)]
    # replays written before curves carried a temperature: it is in their stamp
    frames += [pd.read_parquet(r.path / "curves.parquet").assign(temperature=r.temperature)[CURVE_COLUMNS]
               for r in replays]
    curves = pd.concat([f for f in frames if not f.empty], ignore_index=True)
    curves = curves.assign(_rank=curves["source"].map(SOURCE_ORDER)).sort_values(
        ["drafter", "domain", "temperature", "d", "_rank"])
    curves = curves.drop_duplicates(["drafter", "d", "domain", "temperature"]).drop(columns="_rank")
    return curves.astype({"d": "int64"}).reset_index(drop=True)


def safe_name(domain: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in domain)


def write_curves(root: Path, out_dir: Path | None = None) -> pd.DataFrame:
    curves = collect(root)
    out_dir = out_dir or root
    out_dir.mkdir(parents=True, exist_ok=True)
    curves.to_parquet(out_dir / "curves.parquet", index=False)
    curves.to_csv(out_dir / "curves.csv", index=False)
    for domain in sorted(curves.domain.unique()):
        (out_dir / f"curve_{safe_name(domain)}.png").write_bytes(figures.al_vs_d(curves, domain))
        if curves.temperature.nunique() > 1:
            (out_dir / f"curve_temperature_{safe_name(domain)}.png").write_bytes(figures.al_vs_temperature(curves, domain))
    return curves


@guarded
def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.curves", description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="where to write (default: the sweep dir)")
    args = parser.parse_args(argv)
    curves = write_curves(args.sweep_dir, args.out)
    print(curves.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"curves: {(args.out or args.sweep_dir) / 'curves.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
