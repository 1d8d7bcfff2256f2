"""The night's per-drafter diagnosis after a target fine-tune (issue 68): did a learned drafter
lose its match to the target (it fell while the model-free control on the same prompts held), or
did the workload change (the control moved with it)? One verdict per drafter and D, in the
history's rows of the night (domain `all`: every prompt), and one sentence each.

The rule, on each 95 % interval of the paired difference against the baseline night:
- a model-free drafter (n-gram, suffix) has nothing to retrain: `none`;
- a drafter whose interval does not lie below zero held: `none`;
- one that fell, beside a control that fell too: `workload`;
- one that fell beside a control that held (or no control measured, said so): the mechanism's
  remedy, `realign` (MTP), `distil` (a draft model) or `adapt` (a head: EAGLE, EAGLE-3, DFlash,
  DSpark, Medusa, MLP speculator).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from drafters.facts_table import facts_of
from speclens.file_formats.diagnosis_file import (
    DIAGNOSIS_VERSION,
    DiagnosisFile,
    DrafterDiagnosis,
    write_diagnosis_file,
)

CONTROLS = ("ngram", "suffix")  # model-free: they track the workload, not the target's weights
REMEDY = {"mtp": "realign", "draft_model": "distil"}  # every other learned drafter: adapt
_WHAT = {
    "realign": "realign its MTP module with the new target",
    "distil": "distil or fine-tune the draft model on the new target",
    "adapt": "adapt its head with more training on the new target",
}


def _interval(row) -> tuple[float, float] | None:
    lo, hi = row.diff_ci95_lo, row.diff_ci95_hi
    return None if pd.isna(lo) or pd.isna(hi) else (float(lo), float(hi))


def _fell(interval: tuple[float, float] | None) -> bool:
    return interval is not None and interval[1] < 0


def _control_for(d: int, controls: pd.DataFrame):
    """The control at the same D where measured, else the first there is."""
    same = controls[controls.d == d]
    chosen = same if not same.empty else controls
    return None if chosen.empty else chosen.iloc[0]


def _shown(change: float, interval: tuple[float, float] | None) -> str:
    return f"{change:+.3f}" + (f" [{interval[0]:+.3f}, {interval[1]:+.3f}]" if interval else " (no interval)")


def diagnose(night_rows: pd.DataFrame) -> list[DrafterDiagnosis]:
    """One diagnosis per drafter and D compared with a baseline this night."""
    rows = night_rows[(night_rows.domain == "all") & night_rows.al_diff.notna()]
    controls = rows[rows.drafter.isin(CONTROLS)]
    found = []
    for row in rows.sort_values(["drafter", "d"]).itertuples():
        interval = _interval(row)
        control = None if row.drafter in CONTROLS else _control_for(int(row.d), controls)
        control_interval = None if control is None else _interval(control)
        facts = facts_of(row.drafter)
        cost = facts.training_cost if facts else "unknown"
        head = f"{row.drafter} d={row.d}: AL {_shown(float(row.al_diff), interval)}"
        beside = (
            ""
            if control is None
            else f" beside {control.drafter} d={control.d} {_shown(float(control.al_diff), control_interval)}"
        )
        if row.drafter in CONTROLS:
            verdict, why = "none", "model-free, nothing to retrain; it moves with how repetitive the prompts are"
        elif not _fell(interval):
            verdict, why = "none", "it held: still matched to the target"
        elif control is not None and _fell(control_interval):
            verdict, why = "workload", "the control fell too: the prompts changed, not the drafter's match"
        else:
            verdict = REMEDY.get(row.drafter, "adapt")
            missing = (
                ""
                if control is not None
                else " (no n-gram or suffix control measured: a workload change is not ruled out)"
            )
            why = f"it lost its match to the target: {_WHAT[verdict]} (training cost {cost}){missing}"
        found.append(
            DrafterDiagnosis(
                drafter=row.drafter,
                d=int(row.d),
                al_change=float(row.al_diff),
                interval=interval,
                control=None if control is None else str(control.drafter),
                control_change=None if control is None else float(control.al_diff),
                control_interval=control_interval,
                verdict=verdict,
                training_cost=cost,
                sentence=f"{head}{beside}: {why}.",
            )
        )
    return found


def write_diagnosis(
    night_rows: pd.DataFrame, night: str, night_dir: Path, baseline_dir: Path
) -> list[DrafterDiagnosis]:
    """diagnosis.json in the night's dir; returns its rows."""
    found = diagnose(night_rows)
    write_diagnosis_file(DiagnosisFile(DIAGNOSIS_VERSION, night, str(baseline_dir.resolve()), found), night_dir)
    return found
