"""`python -m reports.curves <sweep dir>`: AL-vs-D curves per domain and drafter.

Writes curves.parquet and curves.csv (drafter, d, domain, al, al_ci95_lo, al_ci95_hi,
tokens_per_step, source = measured|replayed|estimated; domain `all` is the pooled
figure) and curve_<domain>.png (one line per drafter, CI band, measured points marked).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from evals.errors import SpeclensError, report
from reports.runs import Run, check_consistent, find_runs

CURVE_COLUMNS = ["drafter", "d", "domain", "al", "al_ci95_lo", "al_ci95_hi", "tokens_per_step", "source"]
# A replay's run dir: replay.json beside its curves.parquet.
REPLAY_FILE = "replay.json"


def curve_row(drafter: str, d: int, domain: str, figures: dict, source: str) -> dict:
    """One curve point from a group's figures (`al`, `al_ci95`, `tokens_per_step`)."""
    lo, hi = figures.get("al_ci95") or [None, None]
    return {"drafter": drafter, "d": d, "domain": domain, "al": figures["al"], "al_ci95_lo": lo,
            "al_ci95_hi": hi, "tokens_per_step": figures["tokens_per_step"], "source": source}


def measured_rows(run: Run) -> list[dict]:
    s = run.summary
    groups = {"all": s} | s["by_domain"]
    return [curve_row(s["drafter"], s["d"], domain, g, "measured") for domain, g in groups.items()]


def drafter_identity(run: Run) -> str:
    drafter = dict(run.stamp.get("config", {}).get("drafter", {}))
    return repr(sorted(drafter.items()))


def collect(root: Path) -> pd.DataFrame:
    """Curve rows from every finished run (and replayed curve) under `root`."""
    runs = [r for r in find_runs(root) if r.summary.get("d") is not None]
    replays = sorted(root.rglob(REPLAY_FILE))
    if not runs and not replays:
        raise SpeclensError(f"{root}: no finished speculative runs (summary.json) or replayed curves in it.")
    check_consistent(runs + [Run(p.parent, *_replay_meta(p)) for p in replays])
    seen: dict[tuple, str] = {}
    for run in runs:
        key = (run.summary["drafter"], run.summary["d"])
        ident = drafter_identity(run)
        if seen.setdefault(key, ident) != ident:
            raise SpeclensError(
                f"two runs of drafter={key[0]} d={key[1]} with different drafter settings under {root} "
                f"(one is {run.path}); sweep them into separate dirs."
            )
    frames = [pd.DataFrame([row for run in runs for row in measured_rows(run)], columns=CURVE_COLUMNS)]
    frames += [pd.read_parquet(p.with_name("curves.parquet"))[CURVE_COLUMNS] for p in replays]
    curves = pd.concat([f for f in frames if not f.empty], ignore_index=True)
    # A measured point wins over a replayed or estimated one at the same (drafter, d, domain).
    rank = curves["source"].map({"measured": 0, "replayed": 1, "estimated": 2})
    curves = curves.assign(_rank=rank).sort_values(["drafter", "domain", "d", "_rank"])
    curves = curves.drop_duplicates(["drafter", "d", "domain"]).drop(columns="_rank")
    return curves.astype({"d": "int64"}).reset_index(drop=True)


def _replay_meta(path: Path) -> tuple[dict, dict]:
    import json

    meta = json.loads(path.read_text())
    return meta["summary"], meta["stamp"]


def plot_domain(curves: pd.DataFrame, domain: str, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for drafter, g in curves[curves.domain == domain].groupby("drafter", sort=True):
        g = g.sort_values("d")
        (line,) = ax.plot(g.d, g.al, label=drafter)
        ax.fill_between(g.d, g.al_ci95_lo, g.al_ci95_hi, color=line.get_color(), alpha=0.15, linewidth=0)
        measured = g[g.source == "measured"]
        ax.plot(measured.d, measured.al, "o", color=line.get_color())
        other = g[g.source != "measured"]
        ax.plot(other.d, other.al, ".", color=line.get_color())
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("draft length D")
    ax.set_ylabel("AL (accepted + 1 per drafted step)")
    ax.set_title(f"AL vs D — {domain}  (dots: measured)")
    ax.grid(alpha=0.3)
    ax.legend()
    # Fixed margins: tight_layout costs more than the drawing itself.
    fig.subplots_adjust(left=0.12, right=0.97, top=0.91, bottom=0.12)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def safe_name(domain: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in domain)


def write_curves(root: Path, out_dir: Path | None = None) -> pd.DataFrame:
    out_dir = out_dir or root
    curves = collect(root)
    curves.to_parquet(out_dir / "curves.parquet", index=False)
    curves.to_csv(out_dir / "curves.csv", index=False)
    for domain in sorted(curves.domain.unique()):
        plot_domain(curves, domain, out_dir / f"curve_{safe_name(domain)}.png")
    return curves


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.curves", description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="where to write (default: the sweep dir)")
    args = parser.parse_args(argv)
    try:
        curves = write_curves(args.sweep_dir, args.out)
    except SpeclensError as exc:
        return report(exc)
    print(curves.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"curves: {(args.out or args.sweep_dir) / 'curves.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
