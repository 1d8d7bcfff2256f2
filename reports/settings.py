"""Settings, paired: each run measured under a changed setting (an FP8 KV cache, block
verification, a quantized draft: speclens/provenance.py SETTING_KEYS) beside the run of the same drafter,
D, temperature and chat template under the defaults, on the same prompts. AL on both sides with the
paired difference and its 95% CI (reports.compare's), tokens per target step and per-position
acceptance on both sides, and how far plain decoding under the setting parts from plain decoding
under the defaults (each run's own lossless check compares with plain decoding under its own
setting)."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

import pandas as pd

from reports.compare import compare_pair
from reports.page import Section
from reports.runs import RunView
from reports.table import cell
from speclens.errors import SpeclensError
from speclens.file_formats.run_files import BASELINE_OUTPUTS_FILE, read_outputs
from speclens.lossless import first_divergence
from speclens.provenance import IDENTITY_FIELDS, differences, field_label

# reports.compare's figures of the pooled group, as they are named there.
PAIRED_FIGURES = ("n_requests", "baseline_al", "candidate_al", "al_diff", "diff_ci95_lo", "diff_ci95_hi", "significant")
SETTINGS_COLUMNS = [
    "drafter",
    "d",
    "temperature",
    "chat_template_kwargs",
    "setting",
    # What both runs' figures are (speclens/provenance.py label): measured, fake, ...
    "provenance",
    # The identity fields the runs read with the pair differ in, as the pair has them
    # (`engine.dtype=float32`): what tells two pairs of one setting apart.
    "identity",
    *PAIRED_FIGURES,
    "baseline_tokens_per_step",
    "candidate_tokens_per_step",
    "baseline_per_position",
    "candidate_per_position",
    "plain_turns_parted",
    "plain_turns",
    "plain_first_parting_median",
    "baseline_run",
    "candidate_run",
]


@dataclass(frozen=True)
class PlainParting:
    """Plain decoding under a setting against plain decoding under the defaults, turn by turn."""

    parted: int
    turns: int
    first_position_median: float | None


def mode_of(run: RunView) -> tuple:
    """What a run is paired within: its mechanism, D, temperature and chat template."""
    return run.summary.mechanism, run.summary.d, run.temperature, run.template


BESIDE_THE_SETTING = tuple(name for name in IDENTITY_FIELDS if name != "setting")


def identity_but_setting(run: RunView) -> tuple:
    """What must agree besides the setting for two runs to be paired (speclens/provenance.py):
    the source, runner, dtype and model runner."""
    return run.provenance.identity(but=("setting",))


def setting_pairs(runs: list[RunView]) -> tuple[list[tuple[RunView, RunView]], list[str]]:
    """(defaults' run, setting's run) for each measured speculative run under a changed setting,
    paired only where everything but the setting agrees, and a note for each such run with no
    defaults' run to pair with, naming every difference of those that differ in more."""
    speculative = [r for r in runs if r.summary.d is not None and r.summary.synthetic_acceptance is None]
    defaults = [r for r in speculative if not r.axis_setting]
    pairs, notes = [], []
    for run in sorted((r for r in speculative if r.axis_setting), key=lambda r: (mode_of(r)[:2], r.setting)):
        same_mode = [r for r in defaults if mode_of(r) == mode_of(run)]
        same = [r for r in same_mode if identity_but_setting(r) == identity_but_setting(run)]
        if same:
            pairs.append((same[0], run))
        elif same_mode:
            other = same_mode[0]
            differ = "; ".join(differences(other.provenance, run.provenance, BESIDE_THE_SETTING))
            notes.append(
                f"{run.path.name} ({run.setting}) is not paired with {other.path.name}, the defaults' run of "
                f"drafter={run.summary.drafter} d={run.summary.d}: they differ in more than the setting ({differ}); "
                "measure the defaults under the same runner, engine.dtype and engine.model_runner"
            )
        else:
            notes.append(
                f"{run.path.name} ({run.setting}): no run of drafter={run.summary.drafter} d={run.summary.d} under the "
                "engine defaults beside it to pair with; measure one in the same sweep"
            )
    return pairs, notes


def plain_parting(base: RunView, cand: RunView) -> PlainParting | None:
    """How many turns plain decoding under `cand`'s setting parts from plain decoding under `base`'s
    (both with baseline=true; None otherwise), and the median first differing position of those."""
    files = [run.path / BASELINE_OUTPUTS_FILE for run in (base, cand)]
    if not all(f.is_file() for f in files):
        return None
    sides = [{(o["batch_size"], o["request_id"], o["turn"]): o["token_ids"] for o in read_outputs(f)} for f in files]
    shared = sorted(sides[0].keys() & sides[1].keys())
    firsts = [first_divergence(sides[0][k], sides[1][k]) for k in shared if sides[0][k] != sides[1][k]]
    return PlainParting(len(firsts), len(shared), median(firsts) if firsts else None)


def per_position(run: RunView) -> str:
    rates = run.summary.per_position_acceptance or []
    return "/".join(f"{r:.2f}" for r in rates)


def settings_table(runs: list[RunView], seed: int = 0) -> tuple[pd.DataFrame, list[str]]:
    """One row per paired run (all prompts pooled, the whole output): SETTINGS_COLUMNS."""
    pairs, notes = setting_pairs(runs)
    rows = []
    for base, cand in pairs:
        try:
            paired, _ = compare_pair((cand.summary.mechanism, cand.summary.d, cand.axis_setting), base, cand, seed)
        except SpeclensError as exc:  # other prompts, another checkpoint: said, not paired
            notes.append(f"{cand.path.name} ({cand.setting}) is not paired: {exc}")
            continue
        (whole,) = [r for r in paired if r["domain"] == "all" and r["segment"] == "all"]
        parting = plain_parting(base, cand)
        rows.append(
            {
                "drafter": cand.summary.drafter,
                "d": cand.summary.d,
                "temperature": cand.temperature,
                "chat_template_kwargs": cand.template,
                # everything the pair differs in: the setting alone (setting_pairs pairs no other)
                "setting": cand.axis_setting,
                "provenance": cand.provenance.but(setting="").label(),
                "identity": ", ".join(field_label(cand.provenance, name) for name in cand.shown),
                **{k: whole[k] for k in PAIRED_FIGURES},
                "baseline_tokens_per_step": base.summary.tokens_per_step,
                "candidate_tokens_per_step": cand.summary.tokens_per_step,
                "baseline_per_position": per_position(base),
                "candidate_per_position": per_position(cand),
                "plain_turns_parted": parting.parted if parting else None,
                "plain_turns": parting.turns if parting else None,
                "plain_first_parting_median": parting.first_position_median if parting else None,
                "baseline_run": str(base.path),
                "candidate_run": str(cand.path),
            }
        )
    return pd.DataFrame(rows, columns=SETTINGS_COLUMNS), notes


def _plain_cell(row) -> str:
    if pd.isna(row.plain_turns):
        return "- (baseline=true on both to compare)"
    if not row.plain_turns_parted:
        return f"same tokens in all {int(row.plain_turns)} turns"
    return (
        f"{int(row.plain_turns_parted)}/{int(row.plain_turns)} turns part "
        f"(median first differing token {row.plain_first_parting_median:g})"
    )


def settings_section(runs: list[RunView]) -> Section | None:
    """The report's section: each setting's run beside the defaults' (None where no run changed one)."""
    if not any(r.axis_setting for r in runs):
        return None
    table, notes = settings_table(runs)
    # what the paired figures are, where any pair's were not measured (the fake engine's)
    unmeasured = not table.provenance.str.startswith("measured").all()
    header = [
        "drafter",
        "D",
        "setting",
        "prompts",
        "AL defaults",
        "AL setting",
        "difference",
        "95% CI",
        "tokens/step defaults → setting",
        "per position defaults → setting",
        "plain decoding vs defaults",
        *(["figures"] if unmeasured else []),
    ]
    rows = [
        [
            r.drafter,
            str(r.d),
            r.setting
            + (
                f" (T={r.temperature:g}{', ' + r.chat_template_kwargs if r.chat_template_kwargs else ''})"
                if r.temperature or r.chat_template_kwargs
                else ""
            )
            + (f" [{r.identity}]" if r.identity else ""),
            str(r.n_requests),
            cell(r.baseline_al, 3),
            cell(r.candidate_al, 3),
            cell(r.al_diff, 3, signed=True),
            "-" if pd.isna(r.diff_ci95_lo) else f"[{r.diff_ci95_lo:+.3f}, {r.diff_ci95_hi:+.3f}]",
            f"{cell(r.baseline_tokens_per_step, 3)} → {cell(r.candidate_tokens_per_step, 3)}",
            f"{r.baseline_per_position or '-'} → {r.candidate_per_position or '-'}",
            _plain_cell(r),
            *([r.provenance] if unmeasured else []),
        ]
        for r in table.itertuples()
    ]
    text = [
        "Each run under a changed setting beside the run of the same drafter and D under the defaults, on "
        "the same prompts: difference = setting − defaults, 95% CI from a paired bootstrap over prompts (as "
        "`python -m reports.compare`). Each run's lossless check compares with plain decoding under its own "
        "setting; the last column says how far that plain decoding parts from plain decoding under the defaults."
    ]
    return Section("Settings, paired", text=text + notes, tables=[(header, rows)] if rows else [])
