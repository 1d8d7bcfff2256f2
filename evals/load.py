"""`python -m evals.load drafter=<name> d=<D> request_rates=[0.5,1,2,4] [evals.run keys ...]`: a
request-rate ladder through a server (issue 67): where speculation stops paying under load.

Every arm (plain decoding; the drafter at each D; then, with schedule_arm, the schedule the static
arms' crossover gives, as vLLM's dynamic speculation) gets its own server, and at each rate sends
open-loop load with seeded arrivals. Outputs in Hydra's run dir: load.json (a row per arm, rate and
repeat; the crossover per drafter, D and domain), load_requests.parquet (the measured requests),
serve.json (`load_policy`), engine.log. A ladder that dies keeps its finished stages (exit 3); the
same command resumes from the first unfinished one.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from drafters import drafter_name
from evals.hydra_app import end_job, run_app
from evals.pipeline.compose import CONF_DIR, register_configs, run_fingerprint, to_run_config
from evals.pipeline.ladder import Arm, Ladder, resumed, schedule_arm, static_arms
from evals.pipeline.measure import failures_logged
from evals.pipeline.plan import make_plan, planned_identity
from evals.pipeline.run_dir import claimed
from reports.load_ladder import crossover_rows, ladder_text, load_policy, schedule_gaps
from reports.wandb_log import log_ladder
from runners.registry import runner_of
from speclens.config import WandbLoggerConfig
from speclens.console import console, quiet
from speclens.errors import ConfigError, guarded
from speclens.file_formats.load_file import LoadServeFile, read_load_file
from speclens.file_formats.run_files import ENGINE_LOG
from speclens.file_formats.serve_file import SERVE_FILE
from speclens.files import write_json_atomic
from speclens.load_config import LoadConfig, check_ladder
from speclens.schema import to_plain

register_configs()


def check_load_runner(cfg: LoadConfig, speculative: bool) -> None:
    """The ladder sends open-loop load: through a server (or the fake engine); an attached server
    serves one speculative config, so its plain arm needs a second server."""
    runner = runner_of(cfg)
    if not runner.open_loop:
        raise ConfigError(
            f"runner={runner.name}: the load ladder sends requests at their arrival times through a server; use "
            "runner=server (speclens launches one per arm) or runner=server runner.url=<server> (attached)."
        )
    if runner.attached(cfg) and speculative:
        if not cfg.runner.baseline_url:
            raise ConfigError(
                "runner.url with a drafter: the ladder's plain decoding arm needs runner.baseline_url=http://host:port, "
                "a server of the same target without speculative decoding."
            )
        if cfg.arm_lengths != [cfg.d]:
            raise ConfigError(
                f"draft_lengths={cfg.arm_lengths} with runner.url: an attached server speculates at its own D alone; "
                f"leave draft_lengths unset (d={cfg.d}), or let speclens launch the servers."
            )


def run_schedule_arm(ladder: Ladder, arms: list[Arm], schedule: list[list[int]], attached: bool) -> None:
    """The schedule as an arm of its own, where it is one: not on an attached server (its config is
    its own), nor where it is one draft length at every batch size (an arm already measured)."""
    if attached:
        print(
            "speclens: the schedule arm is skipped: an attached server keeps its own speculative config.",
            file=console(),
        )
        return
    if len(schedule) == 1:
        print(
            f"speclens: the schedule arm is skipped: its schedule {schedule} is one draft length at every batch size, "
            "an arm already measured.",
            file=console(),
        )
        return
    top = max(k for _, _, k in schedule)
    ladder.run_arm(schedule_arm(next(a for a in arms if a.kind == "static" and a.d == top), schedule))


def run_load(cfg: DictConfig, out_dir: Path) -> None:
    """Plan, run every arm's stages (resuming a killed ladder), then the crossover, the policy and
    the schedule arm; print the decision first."""
    with claimed(out_dir):
        typed: LoadConfig = to_run_config(cfg)
        check_ladder(typed)
        runner = runner_of(typed)
        check_load_runner(typed, drafter_name(typed.drafter) != "none")
        # An attached pair is checked as evals.run checks a baseline pair: runner.url speculates, the other does not.
        plan = make_plan(replace(typed, baseline=True) if runner.attached(typed) else typed)
        config: LoadConfig = plan.config
        fingerprint = run_fingerprint(cfg, config, plan.fitted)
        state = resumed(out_dir, fingerprint, typed.force)
        identity = planned_identity(config, runner, plan.synthetic, plan.target, plan.draft)
        arms = static_arms(plan, config)
        ladder = Ladder(plan, config, out_dir, runner.engine_factory(config, plan.d), identity, fingerprint, state)
        if state.stages:
            print(
                f"speclens: resuming the ladder in {out_dir}: {len(state.stages)} stage(s) already measured.",
                file=sys.stderr,
            )
        with failures_logged(out_dir), quiet(out_dir / ENGINE_LOG, config.verbose):
            for arm in arms:
                ladder.run_arm(arm)
            rates = list(config.request_rates)
            rows = crossover_rows(state.stages, state.requests, rates, config.seed)
            specs = {arm.d: arm.spec for arm in arms if arm.kind == "static"}
            policy = load_policy(rows, state.stages, specs, config.engine.max_num_seqs, config.arrivals)
            if config.schedule_arm and policy is not None:
                run_schedule_arm(
                    ladder, arms, plan.schedule or policy.num_speculative_tokens_per_batch_size, runner.attached(config)
                )
            gaps = schedule_gaps(state.requests, state.stages)
            ladder.write(complete=True, crossover=rows)
            if policy is not None:
                write_json_atomic(to_plain(LoadServeFile(policy)), out_dir / SERVE_FILE)
    print(ladder_text(state.stages, rows, policy, gaps))
    print(f"results: {out_dir}")
    if isinstance(config.logger, WandbLoggerConfig):
        try:
            log_ladder(out_dir, read_load_file(out_dir), policy, config.logger)
        except Exception as exc:  # noqa: BLE001 - a dashboard hiccup must not fail a finished ladder
            print(
                f"speclens: warning: logging to wandb failed ({type(exc).__name__}: {exc}); the ladder's results "
                f"are complete in {out_dir}.",
                file=sys.stderr,
            )


@hydra.main(version_base=None, config_path=str(CONF_DIR), config_name="load")
def hydra_main(cfg: DictConfig) -> None:
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        typed = to_run_config(cfg)
        runner_of(typed).prepare_process(typed)
        run_load(cfg, out_dir)
    except Exception as exc:  # noqa: BLE001 - every failure ends the command in one line
        end_job(exc, out_dir)


@guarded
def main(argv: list[str]) -> int:
    return run_app(hydra_main, argv, "load", "python -m evals.load")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
