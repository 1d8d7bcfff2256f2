"""`python -m evals.replay drafter=<name> d_max=<N> [...]`: AL(D) for D = 1..N in one pass.

- exact drafters (ngram, suffix, draft_model serial or parallel, eagle, eagle3, mtp): one greedy
  generation of the target, continued d_max tokens past where each answer stops; then each D is
  replayed offline with the step boundaries a run at that D has (drafters/replay.py; suffix in
  lockstep over each turn's batch, its cache being shared by all requests; a head's or MTP layer's
  chains and a parallel draft's mask blocks from every position computed once:
  runners/replay_chains.py). Source `replayed`.
  n-gram's curve is drawn for the proposer of each of vLLM's model runners (`proposer` v1, v2:
  drafters/ngram.py).
- estimated drafters (medusa, dflash, dspark): one measured run at d_max; a step's accepted
  count at D is min(accepted, D). Source `estimated` (d_max itself: `measured`).

Writes curves.parquet / curves.csv (reports.curves' columns) and replay.json into the run dir.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Sequence

import hydra
import numpy as np
import pandas as pd
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from drafters.base import ReplayKind
from drafters.replay import ReplayContext
from evals.hydra_app import end_job, run_app
from evals.pipeline.compose import CONF_DIR, register_configs, run_fingerprint, to_run_config
from evals.pipeline.conversation import run_reference
from evals.pipeline.measure import ENGINE_LOG, ERROR_LOG, failures_logged, measure
from evals.pipeline.plan import make_plan, planned_identity
from evals.pipeline.run_dir import claimed, staged
from reports.curves import curve_row
from reports.runs import template_label
from reports.table import cell, text_table
from runners.registry import runner_of
from speclens.config import VLLM_MAX_SPEC_LEN, NoLoggerConfig, ReplayConfig, RunConfig
from speclens.console import console, quiet
from speclens.errors import (
    ConfigError,
    CorruptRecord,
    guarded,
)
from speclens.figures import metrics
from speclens.figures.summary import WHOLE_RUN_GROUP, Fingerprints, ReplayRecord, ReplaySummary
from speclens.file_formats.curves_file import CURVE_FILES, CURVES_CSV, read_curves_file, write_curves_files
from speclens.file_formats.records import SEGMENT_REQUEST_COLUMNS, read_parquet
from speclens.file_formats.run_files import REQUESTS_FILE, STAMP_FILE, STEPS_FILE
from speclens.file_formats.summary_file import REPLAY_FILE, REPLAY_VERSION, SUMMARY_FILE, read_replay, write_replay
from speclens.lossless import near_tie_bound
from speclens.redact import redact
from speclens.segments import passes_by_segment, step_segment

register_configs()

# What a replay writes into its dir (with measured_d<d_max>/ for estimated curves); replay.json last.
REPLAY_ARTIFACTS = (*CURVE_FILES, ERROR_LOG, ENGINE_LOG, REPLAY_FILE)
# What other commands leave in a dir: a replay there would remove or overwrite it (or be read as it).
OTHER_RESULTS = (STAMP_FILE, SUMMARY_FILE, "multirun.yaml")
# evals.run keys a replay has no use for: it replays D = 1..d_max over one generation of all the
# prompts at once, with no baseline, batch sizes, repeats, open-loop load, schedule or dashboard.
# (A curve is measured acceptance: a synthetic one, acceptance.synthetic, is refused with them.)
IGNORED_KEYS = (
    "d",
    "baseline",
    "batch_sizes",
    "repeats",
    "request_rate",
    "drafter.schedule",
    "logger",
    "acceptance.synthetic",
)
RUN_DEFAULT_D = RunConfig.__dataclass_fields__["d"].default


def _key(override: str) -> str:
    return override.lstrip("+~").partition("=")[0]


def ignored_keys(cfg: ReplayConfig, overrides: Sequence[str] = ()) -> list[str]:
    """The IGNORED_KEYS this replay was given: set away from their defaults, or named in `overrides`."""
    given = {
        "d": cfg.d != RUN_DEFAULT_D,
        "baseline": cfg.baseline,
        "batch_sizes": cfg.batch_sizes is not None,
        "repeats": cfg.repeats is not None,
        "request_rate": cfg.request_rate is not None,
        "drafter.schedule": getattr(cfg.drafter, "schedule", None) is not None,
        "logger": not isinstance(cfg.logger, NoLoggerConfig),
        "acceptance.synthetic": cfg.acceptance.synthetic is not None,
    }
    named = {_key(o) for o in overrides}
    return [
        key for key in IGNORED_KEYS if given[key] or any(name == key or name.startswith(key + ".") for name in named)
    ]


def check_keys(cfg: ReplayConfig, overrides: Sequence[str] = ()) -> None:
    ignored = ignored_keys(cfg, overrides)
    if ignored:
        raise ConfigError(
            f"evals.replay does not use {', '.join(ignored)}: it replays D = 1..d_max (d_max=, not d=) over one "
            "generation of all the prompts at once, with no baseline, batch sizes, repeats, open-loop load, draft-length "
            f"schedule, logger or synthetic acceptance; drop {'it' if len(ignored) == 1 else 'them'}, or measure with `python -m evals.run`."
        )


def check_replay_dir(out_dir: Path) -> None:
    """A replay writes only into a new dir, an empty one or an earlier replay's: never over another
    command's results (a sweep's curves.csv, a run's error.log)."""
    present = [name for name in OTHER_RESULTS if (out_dir / name).exists()]
    if not (out_dir / REPLAY_FILE).is_file():
        present += [name for name in CURVE_FILES if (out_dir / name).exists()]
    if present:
        raise ConfigError(
            f"hydra.run.dir={out_dir} holds {', '.join(present)}, which evals.replay did not write and would overwrite "
            "or be mixed with; give the replay a dir of its own (a new one, e.g. <sweep dir>/replay_<drafter> to draw "
            "it with a sweep's runs)."
        )


def curve_rows(
    plan, d: int, steps: pd.DataFrame, requests: pd.DataFrame, source: str, proposer: str = ""
) -> list[dict]:
    """The curve's rows at `d`: every domain and `all`, and with a reasoning boundary each segment's."""
    groups = {"all": (steps, requests)}
    groups |= {dom: (steps[steps.domain == dom], g) for dom, g in requests.groupby("domain", sort=True)}
    seed, temperature = plan.config.seed, plan.config.sampling.temperature
    template = template_label(dict(plan.config.chat_template_kwargs))
    found = planned_identity(plan.config, plan.runner, plan.synthetic, plan.target, plan.draft)
    setting = found.setting
    # the engine whose outputs were replayed (a fake one's: runner=fake, the record's source fake)
    identity = {k: v for k, v in found.columns().items() if k not in ("setting", "source")}
    rows = []
    for domain, (s, r) in groups.items():
        whole = metrics.group_summary(s, r, seed)
        rows.append(
            curve_row(
                plan.drafter.name,
                d,
                domain,
                whole,
                source,
                temperature,
                template=template,
                proposer=proposer,
                setting=setting,
            )
            | identity
        )
        rows += [
            curve_row(
                plan.drafter.name, d, domain, figures, source, temperature, segment, template, proposer, setting=setting
            )
            | identity
            for segment, figures in (metrics.by_segment(s, r, seed, d) or {}).items()
        ]
    return rows


def _segments(plan, turn, steps) -> tuple[list[str], tuple[int, int, int, int]] | None:
    """With a reasoning boundary: each replayed step's segment, and the turn's thinking and answer
    tokens and passes (speclens/file_formats/records.py SEGMENT_REQUEST_COLUMNS); None without one."""
    if plan.segmenter is None:
        return None
    output = list(turn.continuation[: turn.output_tokens])
    thinking = plan.segmenter.boundary(turn.prompt_token_ids, output).thinking_tokens
    prompt = len(turn.prompt_token_ids)
    passes = passes_by_segment([(s.position - prompt, s.num_accepted) for s in steps], len(output), thinking)
    return ([step_segment(s.position, prompt, thinking) for s in steps], (thinking, len(output) - thinking, *passes))


REPLAY_STEP_COLUMNS = ["request_id", "domain", "position", "num_drafted", "num_accepted"]
REPLAY_REQUEST_COLUMNS = ["request_id", "domain", "output_tokens", "target_steps", "drafted_steps"]


def head_near_ties(plan, reference, chains) -> int:
    """The chained drafts from the positions a run drafts from (prompt end to output end) whose
    top-2 margin is under the near-tie bound of the run's dtype (speclens/lossless.py)."""
    bound = near_tie_bound(plan.dtype)
    count = 0
    for t, (_, margins) in zip(reference, chains):
        first = len(t.prompt_token_ids) - 1
        count += int((margins[:, first : first + t.output_tokens] < bound).sum())
    return count


def reference_contexts(plan, d_max: int, factory) -> tuple[list, list, tuple[int, int], int | None]:
    """One greedy generation of the target (d_max tokens past each stop), as replay contexts,
    plus the engine's (max_num_seqs, max_num_batched_tokens) and, for a head, its near ties."""

    engine = factory(plan.target_dir, None)
    try:
        reference = run_reference(engine, plan.prompts, plan.sampling, extra=d_max)
        limits = engine.scheduler_limits
    finally:
        engine.close()
    sequences = [list(t.prompt_token_ids) + list(t.continuation) for t in reference]
    predictions: list[Any] = [None] * len(reference)
    if plan.drafter.replay_needs_draft_predictions:
        draft_engine = factory(plan.draft_dir, None)
        try:
            predictions = [np.asarray(p) for p in draft_engine.greedy_predictions(sequences)]
        finally:
            draft_engine.close()
    chains: list[Any] = [(None, None)] * len(reference)
    near_ties = None
    if plan.drafter.replay_head is not None:
        draft_dir = plan.draft_dir or plan.target_dir  # MTP's layers are the target's own
        first_starts = [len(t.prompt_token_ids) - 1 for t in reference]
        chains = plan.runner.chains(
            plan.target_dir, draft_dir, plan.drafter.replay_head, sequences, first_starts, d_max, plan.dtype
        )
        near_ties = head_near_ties(plan, reference, chains)
    contexts = [
        ReplayContext(
            np.asarray(seq, dtype=np.int64),
            len(t.prompt_token_ids),
            t.output_tokens,
            plan.config.engine.max_model_len,
            pred,
            chain,
        )
        for t, seq, pred, (chain, _) in zip(reference, sequences, predictions, chains)
    ]
    return reference, contexts, limits, near_ties


def replay_exact(plan, d_max: int, factory) -> tuple[pd.DataFrame, int | None]:
    """The curve replayed from one generation, and a head's near ties (reference_contexts)."""
    reference, contexts, (max_seqs, max_batched_tokens), near_ties = reference_contexts(plan, d_max, factory)
    domain_of = {p.request_id: p.domain for p in plan.prompts}
    # Turn batches in the order the engine received them (run_reference keeps that order).
    batches = [[i for i, t in enumerate(reference) if t.turn == turn] for turn in sorted({t.turn for t in reference})]
    source = "replayed"
    # Lockstep replay assumes every request of a turn is prefilled in the first engine step.
    if plan.drafter.replay_in_lockstep and any(
        len(b) > max_seqs or sum(len(reference[i].prompt_token_ids) for i in b) > max_batched_tokens for b in batches
    ):
        source = "estimated"
        print(
            f"speclens: a turn batch does not fit one engine step (max_num_seqs={max_seqs}, "
            f"max_num_batched_tokens={max_batched_tokens}); drafter={plan.drafter.name}'s curve is "
            "labelled estimated. Fewer requests or a larger engine.max_num_batched_tokens make it exact.",
            file=console(),
        )
    rows = []
    for proposer, d in ((p, d) for p in plan.drafter.replay_proposers for d in range(1, d_max + 1)):
        outcome = plan.drafter.replay_batches([[contexts[i] for i in batch] for batch in batches], d, proposer)
        step_rows, request_rows = [], []
        for batch, results in zip(batches, outcome):
            for i, (steps, target_steps) in zip(batch, results):
                t = reference[i]
                domain = domain_of[t.request_id]
                split = _segments(plan, t, steps)
                segments = split[0] if split else [None] * len(steps)
                step_rows += [
                    (t.request_id, domain, s.position, s.num_drafted, s.num_accepted, seg)
                    for s, seg in zip(steps, segments)
                ]
                request_rows.append(
                    (t.request_id, domain, t.output_tokens, target_steps, len(steps), *(split[1] if split else ()))
                )
        steps_frame = pd.DataFrame(step_rows, columns=REPLAY_STEP_COLUMNS + ["segment"])
        request_columns = REPLAY_REQUEST_COLUMNS + (SEGMENT_REQUEST_COLUMNS if plan.segmenter else [])
        requests_frame = pd.DataFrame(request_rows, columns=request_columns)
        if plan.segmenter is None:
            steps_frame = steps_frame.drop(columns="segment")
        rows += curve_rows(plan, d, steps_frame, requests_frame, source, proposer)
    return pd.DataFrame(rows), near_ties


def clipped_at(steps: pd.DataFrame, d: int) -> pd.DataFrame:
    """The estimate's steps at D from a run at a larger D: each step's accepted count clipped at D
    (it ignores that shorter drafts move every later step's start: docs/reproducibility.md)."""
    return steps.assign(num_accepted=steps.num_accepted.clip(upper=d), num_drafted=d)


def replay_estimated(plan, d_max: int, out_dir: Path, factory) -> pd.DataFrame:
    """AL(D) for D < d_max from the steps of one measured run at d_max."""
    run_dir = out_dir / f"measured_d{d_max}"
    measure(plan, run_dir, factory)
    steps, requests = read_parquet(run_dir / STEPS_FILE), read_parquet(run_dir / REQUESTS_FILE)
    rows = []
    for d in range(1, d_max + 1):
        clipped = clipped_at(steps, d)
        est = requests.copy()
        if d < d_max:
            # Every decode step drafts for these drafters: passes = prefill + decoded tokens / AL(D).
            al = metrics.acceptance_length(clipped) or 1.0
            decoded = requests.output_tokens - 1
            est["target_steps"] = 1 + decoded / al
            est["drafted_steps"] = decoded / al
            for column in ("thinking_target_steps", "answer_target_steps"):
                if column in est.columns:  # a segment's passes are not estimated: its tokens per step is unknown
                    est[column] = pd.NA
        source = "measured" if d == d_max else "estimated"
        rows += curve_rows(plan, d, clipped, est, source)
    return pd.DataFrame(rows)


def replay_curves(plan, d_max: int, staging: Path, factory) -> tuple[pd.DataFrame, int | None]:
    """The curve, exact or estimated as the drafter allows (the engines' output quiet meanwhile),
    and a head's near ties (None where no head was computed)."""
    if plan.drafter.replay is not ReplayKind.exact:
        return replay_estimated(plan, d_max, staging, factory), None
    if plan.dtype != "float32":
        print(
            f"speclens: replaying in {plan.dtype}: the curve follows plain greedy decoding's tokens; a "
            "measured run whose outputs part from them at a numerical near-tie (its summary.json "
            "lossless.mismatches) follows other tokens from there, which moves its AL a few tenths of a "
            "percent off the curve. engine.dtype=float32 makes the two agree exactly.",
            file=console(),
        )
    return replay_exact(plan, d_max, factory)


def finished_replay(out_dir: Path, fingerprint: str, runner: str, content: dict[str, str | None]) -> bool:
    """Whether `out_dir` holds a finished replay of this configuration on this content (the rule
    evals.run applies to run dirs)."""
    if not (out_dir / REPLAY_FILE).is_file():
        return False
    try:
        record = read_replay(out_dir)
    except CorruptRecord as exc:
        print(f"speclens: {exc}; taken as an incomplete replay and run again.", file=sys.stderr)
        return False
    if record.summary.config_fingerprint != fingerprint or record.summary.runner != runner:
        raise ConfigError(
            f"{out_dir} already holds a replay of a different configuration; force=true overwrites it, or "
            "choose another hydra.run.dir."
        )
    changed = [name for name, value in content.items() if getattr(record.summary.fingerprints, name) != value]
    if changed:
        print(
            f"speclens: {out_dir} holds this replay on other content ({', '.join(changed)} changed since); "
            "running it again.",
            file=sys.stderr,
        )
    return not changed


def replay(cfg: DictConfig, out_dir: Path, overrides: Sequence[str] = ()) -> pd.DataFrame:
    """The curve for D = 1..d_max into `out_dir` (held by this process throughout; published whole
    when complete; a finished replay of the same configuration and content is kept unless force=true).
    `overrides`: the command line's, so that a key it names and a replay ignores is refused."""
    run_config = to_run_config(cfg)
    d_max = run_config.d_max
    if not 1 <= d_max <= VLLM_MAX_SPEC_LEN:
        raise ConfigError(
            f"d_max={d_max}: must be in 1..{VLLM_MAX_SPEC_LEN} (vLLM drafts at most "
            f"{VLLM_MAX_SPEC_LEN} tokens per step)."
        )
    check_keys(run_config, overrides)
    check_replay_dir(out_dir)
    run_config.d = d_max
    runner = runner_of(run_config)  # refused before the plan builds anything
    if not runner.replays:
        raise ConfigError(
            f"runner={runner.name} cannot replay; measure each D with `python -m evals.run -m d=1,2,...`, "
            "or replay with runner=vllm."
        )
    with claimed(out_dir):
        plan = make_plan(run_config)
        run_config = plan.config  # with the values fitted to the target
        fingerprint = run_fingerprint(cfg, run_config, plan.fitted)
        drafter = plan.drafter
        if drafter.replay is ReplayKind.exact and run_config.sampling.temperature != 0:
            raise ConfigError(
                f"drafter={drafter.name} replays exactly only under greedy verification; use "
                "sampling.temperature=0, or measure each D with `python -m evals.run -m d=...`."
            )
        if getattr(drafter, "parallel", False) and drafter.replay_head is None:
            raise ConfigError(
                f"drafter={drafter.name} drafter.parallel_drafting=true (P-EAGLE): its first k drafts do not depend "
                "on D >= k (causal over its mask tokens), but the one-pass replay computes parallel draft models "
                "only; measure each D with "
                f"`python -m evals.run -m drafter={drafter.name} drafter.parallel_drafting=true d=1,3,5`."
            )
        if drafter.replay is ReplayKind.none:
            raise ConfigError(
                f"drafter={drafter.name} has no one-pass replay; measure each D with `python -m evals.run -m d=1,2,...`."
            )
        if not run_config.force and finished_replay(out_dir, fingerprint, plan.runner.name, plan.fingerprints):
            kept = read_curves_file(out_dir)
            if set(kept.get("proposer", pd.Series([""]))) >= set(drafter.replay_proposers):
                print(f"speclens: {out_dir} already holds this replay; skipped (force=true runs it again)")
                return kept
            print(
                f"speclens: {out_dir} holds this replay for one n-gram proposer; running it for both.", file=sys.stderr
            )
        factory = plan.runner.engine_factory(run_config, plan.d)
        artifacts = [*REPLAY_ARTIFACTS, *(p.name for p in out_dir.glob("measured_d*"))]
        with staged(out_dir, artifacts, REPLAY_FILE) as staging:
            start = time.perf_counter()
            with failures_logged(staging), quiet(staging / ENGINE_LOG, run_config.verbose):
                curves, near_ties = replay_curves(plan, d_max, staging, factory)
            elapsed = time.perf_counter() - start
            write_curves_files(curves, staging)
            config = OmegaConf.to_container(OmegaConf.structured(run_config), resolve=True, enum_to_str=True)
            summary = ReplaySummary(
                drafter=drafter.name,
                d_max=d_max,
                fingerprints=Fingerprints(**plan.fingerprints),
                replay=str(drafter.replay),
                elapsed_s=elapsed,
                config_fingerprint=fingerprint,
                runner=plan.runner.name,
                near_ties=near_ties,
            )
            write_replay(ReplayRecord(REPLAY_VERSION, summary, {"config": redact(config)}), staging)
    return curves


@hydra.main(version_base=None, config_path=str(CONF_DIR), config_name="replay")
def hydra_main(cfg: DictConfig) -> None:
    hydra_cfg = HydraConfig.get()
    out_dir = Path(hydra_cfg.runtime.output_dir)
    try:
        run_config = to_run_config(cfg)
        runner_of(run_config).prepare_process(run_config)
        curves = replay(cfg, out_dir, list(hydra_cfg.overrides.task))
    except Exception as exc:  # noqa: BLE001 - every failure ends this job in one line (a sweep goes on)
        end_job(exc, out_dir)
        return
    print(replay_table(curves))
    print(f"curves: {out_dir / CURVES_CSV}")


def replay_table(curves: pd.DataFrame) -> str:
    """The terminal table: the whole run's curve, a row per D (and per segment where thinking was split)."""
    overall = curves[curves.domain == WHOLE_RUN_GROUP]
    proposer, segment = (
        [c] if c in overall.columns and overall[c].nunique() > 1 else [] for c in ("proposer", "segment")
    )
    varying = proposer + segment
    columns = ["drafter", *proposer, "d", *segment, "al", "al_ci95_lo", "al_ci95_hi", "tokens_per_step"]
    rows = [
        [cell(v, 3) for v in row] + [source]
        for row, source in zip(overall[columns].itertuples(index=False), overall.source)
    ]
    return text_table([*columns, "source"], rows, left_columns=2 + len(varying))


@guarded
def main(argv: list[str]) -> int:
    return run_app(hydra_main, argv, "replay", "python -m evals.replay")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
