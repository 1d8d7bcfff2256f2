"""`python -m evals.replay drafter=<name> d_max=<N> [...]`: AL(D) for D = 1..N in one pass.

- exact drafters (ngram, draft_model): one greedy generation of the target, continued
  d_max tokens past where each answer stops; then each D is replayed offline
  (drafters/replay.py). Source `replayed`.
- estimated drafters (eagle, eagle3): one measured run at d_max; a step's accepted
  count at D is min(accepted, D). Source `estimated` (d_max itself: `measured`).

Writes curves.parquet / curves.csv (reports.curves' columns) and replay.json into the run dir.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import hydra
import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from evals import metrics
from evals.config import register_configs
from evals.errors import ConfigError, SpeclensError

register_configs()


def curve_rows(drafter: str, d: int, steps: pd.DataFrame, requests: pd.DataFrame, seed: int, source: str) -> list[dict]:
    groups = {"all": (steps, requests)}
    groups |= {dom: (steps[steps.domain == dom], g) for dom, g in requests.groupby("domain", sort=True)}
    rows = []
    for domain, (s, r) in groups.items():
        figures = metrics.group_summary(s, r, seed)
        ci = figures["al_ci95"] or [None, None]
        rows.append({"drafter": drafter, "d": d, "domain": domain, "al": figures["al"], "al_ci95_lo": ci[0],
                     "al_ci95_hi": ci[1], "tokens_per_step": figures["tokens_per_step"], "source": source})
    return rows


def replay_exact(plan, d_max: int, factory) -> pd.DataFrame:
    from drafters.replay import ReplayContext, replay_turn
    from evals.conversation import run_reference

    cfg = plan.config
    engine = factory(plan, None)
    try:
        reference = run_reference(engine, plan.prompts, plan.sampling, extra=d_max)
    finally:
        engine.close()
    sequences = [list(t.prompt_token_ids) + list(t.continuation) for t in reference]
    predictions: list[Any] = [None] * len(reference)
    if plan.drafter.replay_needs_draft_predictions:
        draft_plan = replace(plan, target_dir=plan.draft_dir)
        draft_engine = factory(draft_plan, None)
        try:
            predictions = [np.asarray(p) for p in draft_engine.greedy_predictions(sequences)]
        finally:
            draft_engine.close()
    contexts = [
        ReplayContext(np.asarray(seq, dtype=np.int64), len(t.prompt_token_ids), t.output_tokens,
                      cfg.engine.max_model_len, pred)
        for t, seq, pred in zip(reference, sequences, predictions)
    ]
    by_id = {p.request_id: p for p in plan.prompts}
    rows = []
    for d in range(1, d_max + 1):
        step_rows, request_rows = [], []
        for t, ctx in zip(reference, contexts):
            prompt = by_id[t.request_id]
            steps, target_steps = replay_turn(plan.drafter, ctx, d)
            step_rows += [(t.request_id, prompt.domain, s.position, s.num_drafted, s.num_accepted) for s in steps]
            request_rows.append((t.request_id, prompt.domain, t.output_tokens, target_steps))
        steps_frame = pd.DataFrame(step_rows, columns=["request_id", "domain", "position", "num_drafted", "num_accepted"])
        requests_frame = pd.DataFrame(request_rows, columns=["request_id", "domain", "output_tokens", "target_steps"])
        rows += curve_rows(plan.drafter.name, d, steps_frame, requests_frame, cfg.seed, "replayed")
    return pd.DataFrame(rows)


def replay_estimated(plan, d_max: int, out_dir: Path, factory) -> pd.DataFrame:
    """AL(D) for D < d_max from the steps of one measured run at d_max."""
    from evals.measure import execute
    from evals.records import read_parquet

    run_dir = out_dir / f"measured_d{d_max}"
    execute(plan, run_dir, factory)
    steps, requests = read_parquet(run_dir / "steps.parquet"), read_parquet(run_dir / "requests.parquet")
    rows = []
    for d in range(1, d_max + 1):
        clipped = steps.assign(num_accepted=steps.num_accepted.clip(upper=d), num_drafted=d)
        est = requests.copy()
        if d < d_max:
            # Every decode step drafts for these drafters: passes = prefill + decoded tokens / AL(D).
            al = metrics.acceptance_length(clipped) or 1.0
            decoded = requests.output_tokens - 1
            est["target_steps"] = 1 + decoded / al
        source = "measured" if d == d_max else "estimated"
        rows += curve_rows(plan.drafter.name, d, clipped, est, plan.config.seed, source)
    return pd.DataFrame(rows)


def replay(cfg: DictConfig, out_dir: Path, factory=None) -> pd.DataFrame:
    from evals.plan import make_plan
    from evals.run import to_run_config, vllm_factory
    from evals.summary import write_json_atomic

    factory = factory or vllm_factory
    run_config = to_run_config(cfg)
    d_max = run_config.d_max
    if d_max < 1:
        raise ConfigError(f"d_max={d_max}: must be >= 1.")
    run_config.d = d_max
    plan = make_plan(run_config)
    drafter = plan.drafter
    if drafter.replay == "exact" and cfg.sampling.temperature != 0:
        raise ConfigError(
            f"drafter={drafter.name} replays exactly only under greedy verification; use "
            "sampling.temperature=0, or measure each D with `python -m evals.run -m d=...`."
        )
    if drafter.replay == "none":
        raise ConfigError(
            f"drafter={drafter.name} has no one-pass replay; measure each D with `python -m evals.run -m d=1,2,...`."
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    if drafter.replay == "exact":
        curves = replay_exact(plan, d_max, factory)
    else:
        curves = replay_estimated(plan, d_max, out_dir, factory)
    elapsed = time.perf_counter() - start
    curves.to_parquet(out_dir / "curves.parquet", index=False)
    curves.to_csv(out_dir / "curves.csv", index=False)
    stamp = {"config": OmegaConf.to_container(OmegaConf.structured(run_config), resolve=True)}
    summary = {"drafter": drafter.name, "d_max": d_max, "fingerprints": plan.fingerprints(), "replay": drafter.replay,
               "elapsed_s": elapsed}
    write_json_atomic({"summary": summary, "stamp": stamp}, out_dir / "replay.json")
    return curves


@hydra.main(version_base=None, config_path="../conf", config_name="replay")
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from runners.vllm_engine import set_process_env

    out_dir = Path(HydraConfig.get().runtime.output_dir)
    set_process_env(cfg.engine.cpu_kvcache_space_gib)
    try:
        curves = replay(cfg, out_dir)
    except SpeclensError as exc:
        print(f"speclens: error: {exc}", file=sys.stderr)
        sys.exit(2)
    table = curves[curves.domain == "all"][["drafter", "d", "al", "al_ci95_lo", "al_ci95_hi", "tokens_per_step", "source"]]
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"curves: {out_dir / 'curves.csv'}")


if __name__ == "__main__":
    main()
