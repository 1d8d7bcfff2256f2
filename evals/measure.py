"""One measurement: stamp the run dir, run the engine(s), write records and the summary."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from omegaconf import OmegaConf

from evals import metrics, records
from evals.conversation import run_conversations
from evals.plan import RunPlan
from evals.stamp import git_sha, package_versions
from evals.summary import SUMMARY_FILE, build_summary, lossless, write_json_atomic
from runners.engine import Engine, EngineStep, ProgressFn, TurnResult

# Called with a label once the engine is loaded; gives the per-step progress callback.
ProgressFactory = Callable[[str], "ProgressFn | None"]
# Builds an engine for the plan's target with this speculative config (None = plain decoding).
EngineFactory = Callable[[RunPlan, "dict[str, Any] | None"], Engine]


def _generate(
    plan: RunPlan, factory: EngineFactory, spec: dict[str, Any] | None, progress: ProgressFactory
) -> tuple[list[TurnResult], Any, dict[str, float], list[EngineStep]]:
    start = time.perf_counter()
    engine = factory(plan, spec)
    loaded = time.perf_counter()
    show = progress("speculative" if spec else "plain")
    try:
        results = run_conversations(engine, plan.prompts, plan.sampling, show)
        generated = time.perf_counter()
        counters = engine.counters()
        steps = engine.step_log()
    finally:
        if hasattr(show, "close"):
            show.close()
        engine.close()
    output_tokens = sum(len(r.output_token_ids) for r in results)
    generate_s = generated - loaded
    timing = {
        "load_s": loaded - start,
        "generate_s": generate_s,
        "output_tokens_per_s": output_tokens / generate_s if generate_s > 0 else 0.0,
    }
    return results, counters, timing, steps


def write_outputs(results: list[TurnResult], path: Path) -> None:
    with path.open("w", encoding="utf-8") as f:
        for r in results:
            row = {"request_id": r.request_id, "turn": r.turn, "token_ids": r.output_token_ids, "text": r.output_text}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def execute(
    plan: RunPlan,
    out_dir: Path,
    factory: EngineFactory,
    progress: ProgressFactory = lambda label: None,
    config_fingerprint: str | None = None,
) -> dict[str, Any]:
    out_dir.mkdir(parents=True, exist_ok=True)
    # The dir is being (re-)measured: until the new summary lands it is an incomplete run, even
    # if an earlier summary was there (force=true) and this run dies half-way.
    (out_dir / SUMMARY_FILE).unlink(missing_ok=True)
    cfg = plan.config
    versions = package_versions()
    fingerprints = plan.fingerprints()
    sha = git_sha()
    spec = plan.speculative_config()
    stamp = {
        "schema_version": records.SCHEMA_VERSION,
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config": OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True),
        "config_fingerprint": config_fingerprint,
        "speculative_config": spec,
        "target_dir": str(plan.target_dir),
        "versions": versions,
        "fingerprints": fingerprints,
        "git_sha": sha,
    }
    write_json_atomic(stamp, out_dir / "stamp.json")

    results, counters, timing, engine_steps = _generate(plan, factory, spec, progress)
    by_id = {p.request_id: p for p in plan.prompts}
    steps = records.step_frame(results, by_id)
    requests = records.request_frame(results, by_id)
    records.write_parquet(steps, out_dir / "steps.parquet")
    records.write_parquet(requests, out_dir / "requests.parquet")
    write_outputs(results, out_dir / "outputs.jsonl")
    records.write_parquet(records.engine_step_frame(engine_steps), out_dir / "engine_steps.parquet")
    if spec is not None:
        metrics.check_counters(steps, counters, plan.d)

    lossless_check = speedup = None
    if cfg.baseline and spec is not None:
        base_results, _, base_timing, base_steps = _generate(plan, factory, None, progress)
        write_outputs(base_results, out_dir / "baseline_outputs.jsonl")
        records.write_parquet(records.engine_step_frame(base_steps), out_dir / "baseline_engine_steps.parquet")
        lossless_check = lossless(results, base_results, greedy=plan.sampling.temperature == 0)
        timing["baseline_generate_s"] = base_timing["generate_s"]
        timing["baseline_output_tokens_per_s"] = base_timing["output_tokens_per_s"]
        if base_timing["output_tokens_per_s"] > 0:
            speedup = timing["output_tokens_per_s"] / base_timing["output_tokens_per_s"]

    summary = build_summary(
        drafter=plan.drafter.name,
        d=plan.d,
        target=cfg.target.model,
        dataset=cfg.dataset.name,
        steps=steps,
        requests=requests,
        counters=counters,
        seed=cfg.seed,
        timing=timing,
        versions=versions,
        fingerprints=fingerprints,
        git_sha=sha,
        lossless_check=lossless_check,
        speedup=speedup,
    )
    summary["config_fingerprint"] = config_fingerprint
    write_json_atomic(summary, out_dir / SUMMARY_FILE)
    return summary

