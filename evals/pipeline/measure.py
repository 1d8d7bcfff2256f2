"""One measurement: stamp the run dir, run the engine(s), write records and the summary."""

from __future__ import annotations

import contextlib
import json
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator

import pandas as pd

from evals.pipeline.passes import (
    IDLE_NEEDS_STEPS,
    IDLE_NOT_ON_V2,
    SERVER_LOG,
    Pass,
    ProgressFactory,
    idle_spec,
    run_passes,
    top2_margins,
    zero_cost_spec,
)
from evals.pipeline.plan import RunPlan
from evals.pipeline.reasoning import split_outputs, warn_about
from evals.pipeline.stamp import RunOrigin, run_stamp
from evals.pipeline.summarise import (
    build_summary,
    lossless,
    merge_lossless,
    mismatched_turns,
    operating_points,
    pooled_timing,
)
from reports.profile import run_profiles, write_profiles
from runners.engine import EngineFactory, EngineFailed
from speclens.errors import MeasurementError, SpeclensError
from speclens.figures import metrics
from speclens.figures.costs import PassMode
from speclens.figures.diagnostics import RunFacts, diagnose
from speclens.figures.summary import Numerics, RunSummary
from speclens.file_formats import records
from speclens.file_formats.profile_file import PROFILE_FILE
from speclens.file_formats.run_files import (
    BASELINE_OUTPUTS_FILE,
    ENGINE_LOG,
    ENGINE_STEPS_FILE,
    ERROR_LOG,
    FAILURE_FILE,
    OUTPUTS_FILE,
    REQUESTS_FILE,
    STAMP_FILE,
    STEPS_FILE,
    prompt_digest,
)
from speclens.file_formats.summary_file import SUMMARY_FILE, write_summary
from speclens.files import write_json_atomic, write_text_atomic
from speclens.generation import RecordGranularity, SpecCounters
from speclens.machine import cpu_label

# Everything a measurement writes into a run dir (evals/pipeline/run_dir.py publishes them; summary.json last).
RUN_ARTIFACTS = (
    STAMP_FILE,
    STEPS_FILE,
    REQUESTS_FILE,
    ENGINE_STEPS_FILE,
    OUTPUTS_FILE,
    BASELINE_OUTPUTS_FILE,
    SERVER_LOG,
    ENGINE_LOG,
    PROFILE_FILE,
    ERROR_LOG,
    FAILURE_FILE,
    SUMMARY_FILE,
)


def write_outputs(passes: list[Pass], path: Path) -> None:
    rows = [
        json.dumps(
            {
                "batch_size": p.batch_size,
                "request_id": r.request_id,
                "turn": r.turn,
                "token_ids": r.output_token_ids,
                "text": r.output_text,
                "finish_reason": r.finish_reason,
                "prompt_digest": prompt_digest(r.prompt_token_ids) if r.prompt_token_ids else None,
            },
            ensure_ascii=False,
        )
        + "\n"
        for p in passes
        for r in p.results
    ]
    write_text_atomic(path, "".join(rows))


def write_engine_steps(passes: list[Pass], path: Path) -> pd.DataFrame:
    frame = pd.concat(
        [records.engine_step_frame(p.engine_steps, p.mode, p.batch_size) for p in passes], ignore_index=True
    )
    records.write_parquet(frame, path)
    return frame


def _pooled_domain_counters(passes: list[Pass]) -> dict[str, SpecCounters] | None:
    """Each domain's counter deltas summed over the passes (domain granularity), else None."""
    if any(p.domain_counters is None for p in passes):
        return None
    pooled: dict[str, SpecCounters] = {}
    for p in passes:
        for domain, c in p.domain_counters.items():
            pooled[domain] = pooled.get(domain, SpecCounters()) + c
    return pooled


def served_by(passes: list[Pass]) -> dict[str, str | None] | None:
    """The serving engine and version every pass of the run ran on, as the engine named them."""
    found = {json.dumps(p.served_by, sort_keys=True): p.served_by for p in passes if p.served_by}
    if len(found) > 1:  # one server or engine kind per run (a run's factory starts one kind)
        raise MeasurementError(f"the run's passes ran on different engines ({'; '.join(sorted(found))})")
    return next(iter(found.values()), None)


def engine_numerics(plan: RunPlan, passes: list[Pass]) -> Numerics:
    """The engine's numerics; its CPU is this machine's where its threads are known here (in-process,
    a launched server), unknown otherwise (an attached server, the fake)."""
    threads = passes[0].threads if passes else None
    runners = {p.model_runner for p in passes}
    if len(runners) > 1:  # the factory runs every engine of a run on one (runners/model_runner.py)
        raise MeasurementError(
            f"the run's passes ran on different model runners ({', '.join(sorted(map(str, runners)))})"
        )
    return Numerics.of(
        plan.dtype,
        threads,
        plan.config.engine.batch_invariant,
        cpu_label() if threads is not None else None,
        passes[0].model_runner if passes else None,
        passes[0].gpu if passes else None,
        plan.config.engine.kv_cache_dtype,
    )


def run_facts(
    plan: RunPlan, summary: RunSummary, steps: pd.DataFrame, requests: pd.DataFrame, passes: list[Pass], stamp: dict
) -> RunFacts:
    """What speclens/figures/diagnostics.py reads of a run (`stamp`: its stamp.json, for the draft's build)."""
    cfg = plan.config
    window = summary.context_window
    return RunFacts(
        drafter=plan.drafter.name,
        d=plan.d,
        temperature=cfg.sampling.temperature,
        sample_method=getattr(cfg.drafter, "sample_method", None),
        max_tokens=cfg.sampling.max_tokens,
        chat_template=cfg.target.chat_template,
        per_position_acceptance=summary.per_position_acceptance,
        steps=steps,
        requests=requests,
        outputs={(r.request_id, r.turn): r.output_token_ids for p in passes for r in p.results},
        draft_budget=(stamp.get("draft_build") or {}).get("budget"),
        prompt_counts={
            (r.request_id, r.turn): (r.prompt_tokens, r.server_prompt_tokens)
            for p in passes
            for r in p.results
            if r.server_prompt_tokens is not None
        },
        by_length=summary.by_length,
        native_window=window.native if window is not None else None,
        context_extension=window.extension if window is not None else None,
        timings=[
            (p.batch_size, p.speedup, p.tokens_per_step, p.t_draft_ms, p.k0_tax, p.k0_tax_range)
            for p in summary.operating_points
        ],
    )


def request_histograms(passes: list[Pass]) -> list[tuple[int, ...]] | None:
    """Every request's accepted-draft histogram, where the engine gave one for each (SGLang)."""
    totals = [r.totals for p in passes for r in p.results]
    if not totals or any(t is None or t.accepted_histogram is None for t in totals):
        return None
    return [t.accepted_histogram for t in totals]


def _check_counters(passes: list[Pass], plan: RunPlan, out_dir: Path) -> None:
    """Each speculative pass's records against the engine's counters (speclens/figures/metrics.py); where they
    disagree, the records are written for inspection before the error goes on."""
    cfg = plan.config
    steps, requests = record_frames(passes, plan)
    try:
        for p in passes:
            if p.record_granularity == RecordGranularity.domain:
                continue  # its counters are its only acceptance record: nothing to check them against
            metrics.check_counters(
                steps[steps.batch_size == p.batch_size],
                p.counters,
                plan.d,
                f"batch size {p.batch_size}",
                enforce=plan.runner.exclusive(cfg),
                requests=requests[requests.batch_size == p.batch_size],
                counted=p.counted,
            )
    except MeasurementError:
        write_records(passes, plan, out_dir)
        raise


def median_repeats(
    spec_rounds: list[list[Pass]], plain_rounds: list[list[Pass]]
) -> tuple[list[Pass], list[Pass], dict[int, list[float]]]:
    """Per batch size, the repeat whose speedup is the median (the lower middle one for an even
    count: a repeat that was measured, so its records and speedup account belong together), and
    every repeat's speedup; the first repeat where there is no baseline."""
    if not plain_rounds:
        return spec_rounds[0], [], {}
    chosen_spec, chosen_plain, spreads = [], [], {}
    for i, first in enumerate(spec_rounds[0]):
        pairs = [(spec[i], plain[i]) for spec, plain in zip(spec_rounds, plain_rounds)]
        speedups = [s.output_tokens_per_s / p.output_tokens_per_s if p.output_tokens_per_s else 0.0 for s, p in pairs]
        median = sorted(range(len(pairs)), key=speedups.__getitem__)[(len(pairs) - 1) // 2]
        chosen_spec.append(pairs[median][0])
        chosen_plain.append(pairs[median][1])
        spreads[first.batch_size] = speedups
    return chosen_spec, chosen_plain, spreads


def record_frames(passes: list[Pass], plan: RunPlan) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The steps and requests frames of these passes."""
    by_id = {p.request_id: p for p in plan.prompts}
    steps = pd.concat([records.step_frame(p.results, by_id, p.batch_size) for p in passes], ignore_index=True)
    requests = pd.concat(
        [records.request_frame(p.results, by_id, p.batch_size, p.record_granularity) for p in passes], ignore_index=True
    )
    return steps, requests


def write_records(passes: list[Pass], plan: RunPlan, out_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """steps.parquet, requests.parquet and outputs.jsonl of these passes; the two frames."""
    steps, requests = record_frames(passes, plan)
    records.write_parquet(steps, out_dir / STEPS_FILE)
    records.write_parquet(requests, out_dir / REQUESTS_FILE)
    write_outputs(passes, out_dir / OUTPUTS_FILE)
    return steps, requests


def _kept_on_failure(run: Callable[[], list[Pass]], keep: Callable[[list[Pass]], object]) -> list[Pass]:
    """`run()`; where the engine fails mid-pass, `keep` writes what finished before the error goes on."""
    try:
        return run()
    except EngineFailed as exc:
        with contextlib.suppress(OSError):
            keep(exc.passes)
        raise


def measure(
    plan: RunPlan,
    out_dir: Path,
    factory: EngineFactory,
    progress: ProgressFactory = lambda label: None,
    config_fingerprint: str | None = None,
) -> RunSummary:
    """Stamp `out_dir`, run the passes, write the records and the summary. Any failure that is not
    the user's (an engine crash, a full disk) becomes a one-line MeasurementError; its traceback
    goes to error.log beside the records."""
    with failures_logged(out_dir):
        return _execute(plan, out_dir, factory, progress, config_fingerprint)


def write_error_log(out_dir: Path, text: str) -> None:
    with contextlib.suppress(OSError):  # a full disk may refuse this too; the message still says why
        (out_dir / ERROR_LOG).write_text(text)


@contextlib.contextmanager
def failures_logged(out_dir: Path) -> Iterator[None]:
    """Every measurement failure's traceback into `out_dir`/error.log (exit status 3 promises one):
    a MeasurementError's (records that disagree with the counters, a lost engine) as it is, and
    any other failure that is not the user's (an engine crash, a full disk) as a one-line
    MeasurementError."""
    try:
        yield
    except MeasurementError:
        write_error_log(out_dir, traceback.format_exc())
        raise
    except SpeclensError:
        raise
    except Exception as exc:
        write_error_log(out_dir, traceback.format_exc())
        raise MeasurementError(
            f"the measurement failed: {type(exc).__name__}: {exc} (traceback in {ERROR_LOG})"
        ) from exc


def measured_passes(
    plan: RunPlan, factory: EngineFactory, spec, progress: ProgressFactory, out_dir: Path
) -> tuple[list[Pass], list[Pass], Any]:
    """The speculative passes and, with baseline=true, plain decoding's, interleaved repeat by
    repeat (what finished is kept where one fails), then the median repeat of each."""
    cfg = plan.config
    mode = PassMode.speculative if spec is not None else PassMode.plain
    spec_rounds: list[list[Pass]] = []
    plain_rounds: list[list[Pass]] = []
    for _ in range(cfg.repeats or 1):
        spec_rounds.append(
            _kept_on_failure(
                lambda: run_passes(plan, factory, spec, mode, progress, out_dir),
                lambda finished: write_records(finished, plan, out_dir),
            )
        )
        if spec is not None:
            _check_counters(spec_rounds[-1], plan, out_dir)
        if cfg.baseline and spec is not None:
            plain_rounds.append(
                _kept_on_failure(
                    lambda: run_passes(plan, factory, None, PassMode.plain, progress, out_dir),
                    lambda finished: write_outputs(finished, out_dir / BASELINE_OUTPUTS_FILE),
                )
            )
    return median_repeats(spec_rounds, plain_rounds)


def cost_passes(
    plan: RunPlan, factory: EngineFactory, passes: list[Pass], progress: ProgressFactory, out_dir: Path
) -> tuple[list[Pass], list[Pass], str | None]:
    """Beside a baseline: the zero-cost pass (T_verif at each D) and the idle pass (speculation on,
    nothing proposed: the K=0 tax), and why the tax could not be timed where it was not. They only
    time engine steps: useless where the engine shows none (a server)."""
    if not any(p.engine_steps for p in passes):
        return [], [], IDLE_NEEDS_STEPS
    verify_spec = zero_cost_spec(plan.config.d, passes[0].model_runner)
    verify = run_passes(plan, factory, verify_spec, PassMode.verify, progress, out_dir)
    idle_config = idle_spec(plan.config.d, passes[0].model_runner)
    if idle_config is None:
        return verify, [], IDLE_NOT_ON_V2
    return verify, run_passes(plan, factory, idle_config, PassMode.idle, progress, out_dir), None


def lossless_checks(plan: RunPlan, factory: EngineFactory, passes: list[Pass], baseline: list[Pass]) -> dict[int, Any]:
    """Per batch size, greedy speculative outputs against plain decoding's, each difference
    classified by its top-2 margin (synthetic acceptance emits drafts the target did not choose:
    its outputs are not compared)."""
    greedy = plan.sampling.temperature == 0 and plan.synthetic is None
    mismatched = (
        {b.batch_size: mismatched_turns(p.results, b.results) for p, b in zip(passes, baseline)} if greedy else {}
    )
    margins = top2_margins(plan, factory, mismatched) if any(mismatched.values()) else {}
    return {
        b.batch_size: lossless(p.results, b.results, greedy, b.batch_size, margins, plan.dtype)
        for p, b in zip(passes, baseline)
    }


def stamp_what_ran(
    stamp: dict[str, Any], summary: RunSummary, out_dir: Path, served_by: dict[str, str | None] | None = None
) -> dict[str, Any]:
    """The stamp with what computed the run (its model runner, its GPU, the serving engine and its
    version as the engine named them) beside what the config asked for (engine.*), rewritten where
    the engine said."""
    numerics = summary.numerics
    ran_on = {"model_runner": numerics.model_runner, "gpu": numerics.gpu} if numerics is not None else {}
    ran_on["served_by"] = served_by
    if any(ran_on.values()):
        stamp = stamp | {k: v for k, v in ran_on.items() if v is not None}
        write_json_atomic(stamp, out_dir / STAMP_FILE)
    return stamp


def _execute(
    plan: RunPlan,
    out_dir: Path,
    factory: EngineFactory,
    progress: ProgressFactory,
    config_fingerprint: str | None,
) -> RunSummary:
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = plan.config
    spec = plan.speculative_config()
    origin = RunOrigin.of(plan, config_fingerprint)
    stamp = run_stamp(plan, origin)
    write_json_atomic(stamp, out_dir / STAMP_FILE)
    passes, baseline, spreads = measured_passes(plan, factory, spec, progress, out_dir)
    split = None
    if plan.segmenter is not None:
        split = split_outputs(plan.segmenter, [r for p in passes for r in p.results])
        warn_about(split, cfg)
    steps, requests = write_records(passes, plan, out_dir)
    engine_steps = write_engine_steps(passes, out_dir / ENGINE_STEPS_FILE)
    verify: list[Pass] = []
    idle: list[Pass] = []
    k0_tax_note = None  # why no pass could time the K=0 tax, where the baseline ran
    if baseline:
        write_outputs(baseline, out_dir / BASELINE_OUTPUTS_FILE)
        verify, idle, k0_tax_note = cost_passes(plan, factory, passes, progress, out_dir)
        if verify:
            engine_steps = write_engine_steps(passes + baseline + verify + idle, out_dir / ENGINE_STEPS_FILE)
    counters = sum((p.counters for p in passes), SpecCounters()) if spec is not None else None
    checks = lossless_checks(plan, factory, passes, baseline)
    points = operating_points(
        passes,
        baseline,
        steps,
        requests,
        engine_steps,
        plan.d,
        cfg.seed,
        checks,
        cfg.request_rate,
        spreads,
        k0_tax_note=k0_tax_note,
    )
    granularity = passes[0].record_granularity if spec is not None else RecordGranularity.step
    timing, speedup = pooled_timing(sum(p.load_s for p in passes), passes, baseline)
    summary = build_summary(
        drafter=plan.drafter.name,
        d=plan.d,
        target=cfg.target.model,
        dataset=plan.dataset_name,
        runner=plan.runner.name,
        steps=steps,
        requests=requests,
        counters=counters,
        record_granularity=granularity,
        domain_counters=_pooled_domain_counters(passes),
        schedule=plan.schedule,
        seed=cfg.seed,
        timing=timing,
        origin=origin,
        lossless_check=merge_lossless([op.lossless for op in points]) if baseline else None,
        speedup=speedup,
        operating_points=points,
        numerics=engine_numerics(plan, passes + baseline + verify + idle),
        reasoning=split,
        request_histograms=request_histograms(passes),
        context_window=plan.context_window,
    )
    # what it is follows from its figures (set rates: synthetic) and from what ran
    summary = replace(summary, synthetic_acceptance=plan.synthetic)
    summary = replace(
        summary,
        diagnostics=diagnose(run_facts(plan, summary, steps, requests, passes, stamp)),
        provenance=summary.provenance_of(stamp_what_ran(stamp, summary, out_dir, served_by(passes))),
    )
    profiles = [] if plan.synthetic is not None else run_profiles(out_dir, summary)  # acceptance set, not measured
    if profiles:
        write_profiles(profiles, out_dir)
    write_summary(summary, out_dir)
    return summary
