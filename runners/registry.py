"""Runners by name (`runner=<name>`): how an engine is started, and how prompts are encoded for
the pre-engine checks. The pipeline asks for these and never names an engine itself."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from runners import fake_engine, replay_chains, server_runner, vllm_runner
from runners.engine import EngineFactory
from speclens.config import RunConfig
from speclens.generation import ChatEncoder


@dataclass(frozen=True)
class Runner:
    config_class: type
    # (run config, D or None without speculation) -> a factory of engines.
    engine_factory: Callable[[RunConfig, "int | None"], EngineFactory]
    # (run config, target folder) -> the chat encoding the engine will use.
    encoder: Callable[[RunConfig, Path], ChatEncoder]
    # Process-wide settings to make before any engine starts (environment variables).
    prepare_process: Callable[[RunConfig], None]
    # (run config, speculative?) -> raises ConfigError for what this engine cannot measure right.
    check_support: Callable[[RunConfig, bool], None]
    # (run config) -> whether the engine serves this run alone, so its counters must equal the records.
    exclusive: Callable[[RunConfig], bool] = lambda cfg: True
    # Whether evals.replay can use it (replay needs the target's own argmax and scheduler limits).
    replays: bool = True
    # (target folder, draft folder, kind, sequences, first starts, d_max, dtype) -> per sequence the
    # drafts from every start and their top-2 margins (runners/replay_chains.py)
    chains: Callable[..., list] = replay_chains.replay_chains


def _fake_factory(cfg: RunConfig, d: int | None) -> EngineFactory:
    return fake_engine.engine_factory(cfg.runner, d, cfg.engine.max_num_seqs, cfg.engine.max_num_batched_tokens)


RUNNERS: dict[str, Runner] = {
    "vllm": Runner(
        vllm_runner.VllmRunnerConfig,
        vllm_runner.engine_factory,
        vllm_runner.encoder,
        vllm_runner.prepare_process,
        vllm_runner.check_support,
    ),
    "server": Runner(
        server_runner.ServerRunnerConfig,
        server_runner.engine_factory,
        vllm_runner.encoder,
        lambda cfg: None,
        server_runner.check_support,
        lambda cfg: bool(cfg.runner.exclusive),
        replays=False,
    ),
    "fake": Runner(
        fake_engine.FakeRunnerConfig,
        _fake_factory,
        lambda cfg, target_dir: fake_engine.FakeEncoder(),
        lambda cfg: None,
        lambda cfg, speculative: vllm_runner.closed_loop_only(cfg),
        chains=fake_engine.replay_chains,
    ),
}


def runner_name(cfg: Any) -> str:
    """The registry name of a runner config."""
    for name, runner in RUNNERS.items():
        if type(cfg) is runner.config_class:
            return name
    raise TypeError(f"{type(cfg).__name__} is not a registered runner config")


def runner_of(cfg: RunConfig) -> Runner:
    return RUNNERS[runner_name(cfg.runner)]
