"""A notebook's view of a sweep: read it with `speclens.read_sweep`, regroup AL per drafter, D and
domain with pandas, and compare with the sweep's own curves.csv (docs/api.md).

    python benchmarks/read_sweep.py [SWEEP_DIR]

Without SWEEP_DIR it first measures a small sweep with the fake engine (no model: seconds) in a
temporary folder. Prints both ALs per curve point and exits 1 unless every one is equal.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

import speclens

ROWS = [
    {"question_id": f"q{i}", "category": ["coding", "writing", "math"][i % 3], "turns": [f"task {i}", f"and {i}"]}
    for i in range(6)
]


def fake_sweep(folder: Path) -> Path:
    """ngram and suffix at D = 1, 3 through the fake engine, on a fake target and six prompts."""
    target = folder / "target"
    target.mkdir()
    config = {"architectures": ["LlamaForCausalLM"], "vocab_size": 100, "hidden_size": 16, "num_hidden_layers": 2}
    (target / "config.json").write_text(json.dumps(config))
    prompts = folder / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    sweep = folder / "sweep"
    overrides = ["runner=fake", "target=custom", f"target.model={target}", "dataset=jsonl", f"dataset.path={prompts}"]
    command = [sys.executable, "-m", "evals.run", "-m", *overrides, "drafter=ngram,suffix", "d=1,3"]
    subprocess.run([*command, f"hydra.sweep.dir={sweep}"], cwd=folder, check=True, capture_output=True)
    return sweep


def regrouped(sweep: speclens.Sweep) -> pd.DataFrame:
    """AL per drafter, D and domain (and 'all'), by the user's own grouping of the step records."""
    steps = sweep.steps
    keys = ["drafter", "d"]
    per_domain = steps.groupby([*keys, "domain"]).num_accepted.agg(["sum", "count"]).reset_index()
    overall = steps.groupby(keys).num_accepted.agg(["sum", "count"]).reset_index().assign(domain="all")
    frame = pd.concat([overall, per_domain], ignore_index=True)
    frame["al"] = 1.0 + frame["sum"] / frame["count"]
    # the same through the definition speclens exports: one function, any grouping
    frame["al_speclens"] = [
        speclens.al(group) for _, group in _groups(steps, frame[keys + ["domain"]].itertuples(index=False))
    ]
    return frame[[*keys, "domain", "al", "al_speclens"]]


def _groups(steps: pd.DataFrame, points):
    for drafter, d, domain in points:
        mask = (steps.drafter == drafter) & (steps.d == d) & ((steps.domain == domain) | (domain == "all"))
        yield (drafter, d, domain), steps[mask]


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(argv[0]) if argv else fake_sweep(Path(scratch))
        sweep = speclens.read_sweep(path)
        mine = regrouped(sweep)
        curves = pd.read_csv(path / "curves.csv")
        # the runs' own points (measured, or the fake engine's), not a replay's
        curves = curves[~curves.source.isin(["replayed", "estimated"]) & (curves.segment == "all")]
        joined = mine.merge(
            curves[["drafter", "d", "domain", "al"]], on=["drafter", "d", "domain"], suffixes=("", "_curves")
        )
    equal = bool(len(joined) == len(curves) == len(mine)) and bool(
        ((joined.al == joined.al_curves) & (joined.al_speclens == joined.al_curves)).all()
    )
    print(f"{sweep}: {len(sweep.steps)} step records")
    print(joined.to_string(index=False))
    print(f"every curve point equal: {equal}")
    return 0 if equal else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
