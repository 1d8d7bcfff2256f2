"""The programmatic run: plan, measure, print the table, log; `python -m evals.run` is its command
(evals/run.py), and tests and scripts call `run` directly with a composed config.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from omegaconf import DictConfig
from tqdm import tqdm

from evals.pipeline.compose import run_fingerprint, to_run_config
from evals.pipeline.measure import ENGINE_LOG, RUN_ARTIFACTS, measure, write_error_log
from evals.pipeline.plan import make_plan
from evals.pipeline.run_dir import claimed, staged
from reports.table import result_table
from reports.wandb_log import log_run
from speclens.config import WandbLoggerConfig
from speclens.console import console, quiet
from speclens.errors import ConfigError, CorruptRecord, MeasurementError
from speclens.figures.summary import RunSummary
from speclens.file_formats.run_files import read_stamp
from speclens.file_formats.summary_file import SUMMARY_FILE, read_summary
from speclens.lossless import DIVERGENCE, UNEXPLAINED


class TqdmProgress:
    """Prompt tokens prefilled (of the pass's total, with the rate and the time left) and output
    tokens generated so far, on stderr, while the engine runs; each bar appears with its first tokens."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.bar: tqdm | None = None
        self.prefill_bar: tqdm | None = None

    def _bar(self, what: str, total: int | None = None) -> tqdm:
        return tqdm(
            desc=f"{self.label} {what}",
            total=total,
            unit="tok",
            unit_scale=True,
            file=console(),
            dynamic_ncols=True,
            mininterval=1.0,
        )

    def __call__(self, tokens: int) -> None:
        if self.bar is None:
            self.bar = self._bar("generation")
        self.bar.update(tokens)

    def prefill(self, tokens: int, added_total: int) -> None:
        if self.prefill_bar is None:
            self.prefill_bar = self._bar("prefill", total=0)
        if added_total:
            self.prefill_bar.total += added_total
            self.prefill_bar.refresh()
        self.prefill_bar.update(tokens)

    def close(self) -> None:
        for bar in (self.prefill_bar, self.bar):
            if bar is not None:
                bar.close()


def check_lossless(summary: RunSummary, out_dir: Path) -> None:
    """A greedy output that diverges from plain decoding beyond rounding fails the run (its records
    and summary stay in the run dir); near-ties are reported by the result table only."""
    loss = summary.lossless
    if loss is None or not loss.n_divergences:
        return
    first = next((m for m in loss.mismatches if m.classification in (DIVERGENCE, UNEXPLAINED)), None)
    example = ""
    if first is not None:
        margin = (
            "unknown (this runner gives no top-2 log-probabilities)"
            if first.top2_margin is None
            else f"{first.top2_margin:.3g}"
        )
        example = (
            f" (e.g. {first.request_id} turn {first.turn} at output token {first.first_divergence}, top-2 margin "
            f"{margin}, bound {loss.near_tie_bound:g})"
        )
    failure = MeasurementError(
        f"lossless check failed: {loss.n_divergences} greedy output(s) diverge from plain decoding beyond a "
        f"{loss.dtype} near-tie{example}; the run is kept in {out_dir} (summary.json lossless.mismatches)."
    )
    mismatches = "".join(json.dumps(asdict(m)) + "\n" for m in loss.mismatches)
    write_error_log(out_dir, f"{failure}\n\nlossless.mismatches:\n{mismatches}")
    raise failure


def finished_summary(out_dir: Path, fingerprint: str, runner: str, content: dict[str, str | None]) -> RunSummary | None:
    """The summary of a finished run of this very configuration, on this very content (target,
    draft and prompts, by their fingerprints), in `out_dir`, if there is one."""
    if not (out_dir / SUMMARY_FILE).is_file():
        return None  # never started, or killed before it finished: (re-)run it
    try:
        summary = read_summary(out_dir)
    except CorruptRecord as exc:
        print(f"speclens: {exc}; taken as an incomplete run and measured again.", file=sys.stderr)
        return None
    if summary.config_fingerprint != fingerprint or summary.runner != runner:
        raise ConfigError(
            f"{out_dir} already holds a finished run of a different configuration; force=true overwrites "
            "it, or choose another hydra.run.dir (hydra.sweep.dir for a multirun)."
        )
    changed = [name for name, value in content.items() if getattr(summary.fingerprints, name) != value]
    if changed:
        print(
            f"speclens: {out_dir} holds this configuration measured on other content ({', '.join(changed)} "
            "changed since); measuring again.",
            file=sys.stderr,
        )
        return None
    return summary


def run(cfg: DictConfig, out_dir: Path, progress=TqdmProgress, group: str | None = None) -> RunSummary:
    """Plan, measure, print the table, log (logger=wandb, in `group`); skips a run dir that already
    holds this run unless force=true. The dir is held by this process throughout (evals/pipeline/run_dir.py)."""
    with claimed(out_dir):
        plan = make_plan(to_run_config(cfg))
        run_config = plan.config  # with the values fitted to the target
        fingerprint = run_fingerprint(cfg, run_config, plan.fitted)
        for key, fit in plan.fitted.items():
            if fit["value"] != fit["default"]:
                print(f"speclens: {key}={fit['value']}: {fit['why']} (set {key}= to choose).", file=sys.stderr)
        done = None if run_config.force else finished_summary(out_dir, fingerprint, plan.runner.name, plan.fingerprints)
        if done is not None:
            print(f"speclens: {out_dir} already holds this run; skipped (force=true re-runs it)")
            check_lossless(done, out_dir)  # a run that failed it fails again, not exit 0 on a re-run
            return done
        factory = plan.runner.engine_factory(run_config, plan.d)
        with staged(out_dir, RUN_ARTIFACTS, SUMMARY_FILE) as staging:
            with quiet(staging / ENGINE_LOG, run_config.verbose):
                summary = measure(plan, staging, factory, progress, fingerprint)
    print(result_table(summary))
    print(f"results: {out_dir}")
    if isinstance(run_config.logger, WandbLoggerConfig):
        stamp = read_stamp(out_dir)
        try:
            log_run(out_dir, summary, stamp, run_config.logger, group)
        except Exception as exc:  # noqa: BLE001 - a dashboard hiccup must not stop a sweep
            print(
                f"speclens: warning: logging to wandb failed ({type(exc).__name__}: {exc}); the run's "
                f"results are complete in {out_dir}.",
                file=sys.stderr,
            )
    check_lossless(summary, out_dir)  # after the results are written and logged
    return summary
