"""`evals.whatif calibrate=<runs>`: the step costs measured on this machine's runs as the points a
calibration fits (speclens/gpu_model/calibrate.py), the K=0 tax and T_draft fitted beside the
three constants, and the lines and record that say what was fitted and how far it held out."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from evals.whatif_inputs import read_checkpoint_config
from reports.runs import RunView, find_runs
from speclens import provenance as prov
from speclens.errors import ConfigError
from speclens.figures import costs
from speclens.file_formats.records import read_parquet
from speclens.file_formats.run_files import ENGINE_STEPS_FILE, REQUESTS_FILE
from speclens.gpu_model import calibrate
from speclens.gpu_model.calibrate import StepCostPoint
from speclens.gpu_model.draft_cost import MECHANISMS, drafter_shape, needs_draft_config
from speclens.gpu_model.model_shape import ModelShape
from speclens.gpu_model.step_cost import Efficiency
from speclens.gpu_model.whatif import (
    mean_context,
)


def calibration_runs(folder: Path) -> list[RunView]:
    """The runs under `folder` measured with baseline=true (step costs to fit), all of one identity
    (speclens/provenance.py: source, runner, engine, dtype, model runner, setting): a calibration
    fits one machine's steps, and a script's step times, another dtype's or an FP8 cache's are not
    that machine's under the same settings."""
    runs = [r for r in find_runs(folder) if any(op.t_verif for op in r.summary.operating_points)]
    if not runs:
        raise ConfigError(f"calibrate={folder}: no run there was measured with baseline=true (no step costs).")
    by_identity: dict[tuple, list[RunView]] = {}
    for run in runs:
        by_identity.setdefault(run.provenance.identity(), []).append(run)
    if len(by_identity) > 1:
        held = "; ".join(
            f"{members[0].provenance.identity_label()} ({len(members)} run(s), e.g. {members[0].path})"
            for members in by_identity.values()
        )
        raise ConfigError(
            f"calibrate={folder} holds step costs of {len(by_identity)} identities ({held}); a calibration fits one "
            "machine's steps under one setting: give calibrate= a folder of one of them."
        )
    return runs


def calibration_what(folder: Path) -> dict[str, Any]:
    """What the step costs a calibration fits are: each run's provenance label, and whether any
    came from the scripted engine (runner=fake), whose step times are a script's."""
    found = [r.provenance for r in calibration_runs(folder)]
    sources = sorted({p.source for p in found})
    return {"sources": sources, "runs": sorted({p.label() for p in found}), "fake": prov.FAKE in sources}


def calibration_points(folder: Path) -> tuple[list[StepCostPoint], str | None]:
    """The measured T_verif of every run under `folder` measured with baseline=true: plain steps
    at each B (D = 0) and the zero-cost verify pass's at B·(1+D); context: each B's requests' mean
    prompt plus half their output. Points measured by several runs are averaged. With the
    runs' target folder (None where the stamp names none)."""
    runs = calibration_runs(folder)
    found: dict[tuple[int, int, int], list[float]] = {}
    for run in runs:
        requests = read_parquet(run.path / REQUESTS_FILE)
        for op in run.summary.operating_points:
            mine = requests[requests.batch_size == op.batch_size]
            context = mean_context(mine.prompt_tokens, mine.output_tokens)
            # the step costs are of the requests held in flight (fewer than B where a pass had fewer)
            if op.t_verif is not None:
                found.setdefault((op.held, 0, context), []).append(op.t_verif.median_ms)
            if op.t_verif_spec is not None and run.summary.d:
                found.setdefault((op.held, run.summary.d, context), []).append(op.t_verif_spec.median_ms)
    points = [StepCostPoint(b, d, c, sum(ts) / len(ts)) for (b, d, c), ts in sorted(found.items())]
    return points, runs[0].stamp.get("target_dir")


@dataclass(frozen=True)
class CalibrationSteps:
    """What the runs under a calibrate= folder measured besides T_verif: the undrafted steps
    (T_verif(B) beside T_idle(B)) the K=0 tax is fitted on, each speculative pass's drafting cost
    (`drafted`: calibrate.Drafted's fields but its shape, with `draft_ref`, the drafter's
    checkpoint, to read it from) the T_draft fits are on, and what was taken in place of a missing
    figure (`notes`)."""

    undrafted: list[calibrate.Undrafted]
    drafted: list[dict[str, Any]]
    notes: list[str]


def steady_spec_steps(engine_steps: Any, batch_size: int) -> tuple[float, float] | None:
    """The speculative pass's steady steps at B (as speclens/figures/costs.py counts them: as many requests
    as it held, no prefill): the share that drafted, s, and the mean step as their mixture,
    s·median(drafted) + (1 − s)·median(undrafted) (each median robust to a slow step, the mixture
    what the model's mean step is). None where the pass shows no steady steps."""
    steps = engine_steps[
        (engine_steps["mode"] == costs.PassMode.speculative) & (engine_steps["batch_size"] == batch_size)
    ]
    if steps.empty:
        return None
    steady = steps[
        (steps["num_requests"] == costs.in_flight(steps))
        & (steps["num_tokens"] == steps["num_requests"] + steps["num_draft_tokens"])
    ]
    if len(steady) < costs.MIN_STEADY_STEPS:
        return None
    drafted = steady["num_draft_tokens"] > 0
    share = float(drafted.mean())
    walls = [steady.loc[part, "wall_s"].median() * 1e3 for part in (drafted, ~drafted) if part.any()]
    t_step = share * walls[0] + (1 - share) * walls[-1] if len(walls) == 2 else walls[0]
    return share, float(t_step)


def calibration_steps(folder: Path) -> CalibrationSteps:
    """Per operating point of the runs under `folder` measured with baseline=true: T_verif(B) and
    T_idle(B) (schema 12's idle pass) for the K=0 tax, and the drafting cost measured on the
    speculative pass, T_step − [s·T_verif(B·(1+D)) + (1 − s)·T_undrafted(B)], s the share of its
    steady steps that drafted and T_undrafted the idle pass's T_idle(B) (Model Runner V2: the
    verify, which an undrafted step is there; a run before schema 12, or whose idle pass did not
    run: plain decoding's T_verif(B), and a note says so). Points measured by several runs are
    averaged; the context is as calibration_points takes it."""
    taxes: dict[tuple[int, int], list[tuple[float, float]]] = {}
    drafting: dict[tuple[str, int, int, int, str | None], list[tuple[float, float]]] = {}
    plain_for_idle = 0
    for run in calibration_runs(folder):
        requests = read_parquet(run.path / REQUESTS_FILE)
        steps_file = run.path / ENGINE_STEPS_FILE
        engine_steps = read_parquet(steps_file) if steps_file.is_file() else None
        summary = run.summary
        v2 = bool(summary.numerics and summary.numerics.model_runner == "v2")
        draft_ref = (run.stamp.get("config", {}).get("drafter") or {}).get("model")
        for op in summary.operating_points:
            if op.t_verif is None:
                continue
            mine = requests[requests.batch_size == op.batch_size]
            context = mean_context(mine.prompt_tokens, mine.output_tokens)
            plain = op.t_verif.median_ms
            if op.t_idle is not None:
                taxes.setdefault((op.held, context), []).append((plain, op.t_idle.median_ms))
            if not summary.d or op.t_step is None or op.t_verif_spec is None or summary.drafter not in MECHANISMS:
                continue
            verify = op.t_verif_spec.median_ms
            split = None if engine_steps is None else steady_spec_steps(engine_steps, op.batch_size)
            share, t_step = split or (1.0 if op.draft_share is None else op.draft_share, op.t_step.median_ms)
            if v2:
                undrafted = verify
            elif op.t_idle is not None:
                undrafted = op.t_idle.median_ms
            else:
                undrafted = plain
                plain_for_idle += share < 1
            t_draft = t_step - (share * verify + (1 - share) * undrafted)
            key = (summary.drafter, summary.d, op.held, context, draft_ref)
            drafting.setdefault(key, []).append((t_draft, t_step))
    undrafted_points = [
        calibrate.Undrafted(b, c, sum(p for p, _ in ts) / len(ts), sum(i for _, i in ts) / len(ts))
        for (b, c), ts in sorted(taxes.items())
    ]
    drafted = [
        {"drafter": m, "batch_size": b, "d": d, "context": c, "draft_ref": ref}
        | {"t_draft_ms": sum(t for t, _ in ts) / len(ts), "t_step_ms": sum(s for _, s in ts) / len(ts)}
        for (m, d, b, c, ref), ts in sorted(drafting.items(), key=lambda kv: (*kv[0][:4], kv[0][4] or ""))
    ]
    notes = []
    if not undrafted_points:
        notes.append(
            "no run there measured T_idle (the idle pass: baseline=true on summary.json version 12 or later, Model "
            "Runner V1): an undrafted step is priced as plain decoding's, with no K=0 tax"
        )
    if plain_for_idle:
        notes.append(
            f"{plain_for_idle} operating point(s) without T_idle: their undrafted steps were taken at plain decoding's "
            "cost in the T_draft fit"
        )
    return CalibrationSteps(undrafted_points, drafted, notes)


def fit_beside(
    fitted: calibrate.Fit, target: ModelShape, steps: CalibrationSteps, weights: str
) -> tuple[calibrate.Fit, dict[str, Any]]:
    """The K=0 tax and T_draft fitted beside the three constants (speclens/gpu_model/calibrate.py),
    in the Fit whose hardware predicts; with the record whatif.json's `calibration` holds: each
    fitted value, its points' errors fitted and held out, and what was kept where nothing measured it."""
    record: dict[str, Any] = {"notes": list(steps.notes)}
    if steps.undrafted:
        tax = calibrate.fit_tax(steps.undrafted)
        fitted = replace(fitted, k0_tax_ms=tax.ms, k0_tax_us_per_request=tax.us_per_request)
        record["k0_tax"] = {
            "ms": tax.ms,
            "us_per_request": tax.us_per_request,
            "form": tax.form,
            "points": [
                {**asdict(p), "tax_ms": p.tax_ms, "error": round(e, 4), "held_out_error": nan_none(h)}
                for p, e, h in calibrate.tax_errors(steps.undrafted, tax)
            ],
        }
    else:
        record["k0_tax"] = None
    configs: dict[str, dict[str, Any] | None] = {}
    by_kind: dict[str, list[calibrate.Drafted]] = {}
    for raw in steps.drafted:
        ref = raw["draft_ref"]
        if ref is not None and ref not in configs:
            try:
                configs[ref] = read_checkpoint_config(ref, "drafter.model")
            except ConfigError as exc:
                configs[ref] = None
                record["notes"].append(f"{raw['drafter']}'s draft {ref} is unreadable ({exc}): its T_draft not fitted")
        config = None if ref is None else configs[ref]
        if config is None and needs_draft_config(raw["drafter"]):
            note = f"{raw['drafter']}'s run names no draft checkpoint: its T_draft not fitted"
            if ref is None and note not in record["notes"]:
                record["notes"].append(note)
            continue
        shape = drafter_shape(raw["drafter"], target, config)
        point = calibrate.Drafted(**{k: v for k, v in raw.items() if k != "draft_ref"}, draft=shape)
        by_kind.setdefault(calibrate.draft_kind(raw["drafter"]), []).append(point)
    record["t_draft"] = {}
    for kind in ("draft_pass_overhead_ms", "lookup_us_per_request"):
        points = by_kind.get(kind, [])
        if not points:
            record["t_draft"][kind] = {"fitted": False, "value": getattr(Efficiency(), kind)}
            continue
        value = calibrate.fit_draft(target, fitted, points, weights)
        rows = calibrate.draft_errors(target, fitted, points, weights, everything=value)
        fitted = replace(fitted, **{kind: value})
        record["t_draft"][kind] = {
            "fitted": True,
            "value": value,
            "points": [
                {
                    **{k: v for k, v in asdict(p).items() if k != "draft"},
                    "error": round(e, 4),
                    "held_out_error": nan_none(h),
                }
                for p, e, h in rows
            ],
        }
    return fitted, record


def beside_warnings(record: dict[str, Any]) -> list[str]:
    """What fit_beside's record says cannot be trusted: a K=0 tax or T_draft fit that misses a point
    held out of it by more than the calibration's bound, and a measured T_draft below zero (no
    drafting is cheaper than none: timing noise)."""
    out = []
    fits = [("the K=0 tax fit", (record.get("k0_tax") or {}).get("points", []))]
    fits += [(f"the T_draft fit ({kind})", fit.get("points", [])) for kind, fit in record.get("t_draft", {}).items()]
    for name, points in fits:
        held = [p["held_out_error"] for p in points if p.get("held_out_error") is not None]
        worst = max(held, key=abs, default=None)
        if worst is not None and abs(worst) > calibrate.HELD_OUT_BOUND:
            out.append(
                f"{name} predicts a point held out of it {worst:+.0%} off (bound ±{calibrate.HELD_OUT_BOUND:.0%}): "
                "it does not predict what it was not given; measure more batch sizes or D, or less noisy steps"
            )
    negative = [
        p for fit in record.get("t_draft", {}).values() for p in fit.get("points", []) if p.get("t_draft_ms", 0) < 0
    ]
    if negative:
        worst = min(negative, key=lambda p: p["t_draft_ms"])
        out.append(
            f"{len(negative)} measured T_draft below zero (down to {worst['t_draft_ms']:.2f} ms: {worst['drafter']} at "
            f"B={worst['batch_size']}, D={worst['d']}): drafting is never cheaper than none, so these steps are timing "
            "noise and the T_draft fitted on them is too; measure on an idle machine, or with repeats="
        )
    return out


def nan_none(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 4)


def fitted_beside_line(record: dict[str, Any]) -> str:
    """What calibrate= fitted beside the three constants, and what it kept, in one line."""
    parts = []
    tax = record["k0_tax"]
    if tax is None:
        parts.append("K=0 tax not measured (an undrafted step costs a plain one)")
    else:
        per_request = f" + {tax['us_per_request']:.4g} us a request" if tax["us_per_request"] else ""
        measured = sum(p["tax_ms"] for p in tax["points"]) / len(tax["points"])
        below = f"; measured {measured:+.2f} ms on average, taken as 0" if measured < 0 else ""
        parts.append(f"K=0 tax {tax['ms']:.4g} ms a step{per_request} ({tax['form']}{below})")
    for kind, unit in (("draft_pass_overhead_ms", "ms"), ("lookup_us_per_request", "us")):
        fit = record["t_draft"][kind]
        if fit["fitted"]:
            parts.append(f"T_draft: {kind} {fit['value']:.4g} {unit} fitted")
        else:
            parts.append(f"T_draft: {kind} {fit['value']:g} {unit} kept (the GPU constant: no such drafter measured)")
    return "; ".join(parts)
