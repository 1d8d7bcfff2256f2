"""Runners by name (`runner=<name>`): how an engine is started, and how prompts are encoded for
the pre-engine checks. The pipeline asks for these and never names an engine itself."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from runners import fake_engine, replay_chains, server_runner, vllm_runner
from runners.engine import EngineFactory
from speclens.config import RunConfig
from speclens.generation import ChatEncoder


@dataclass(frozen=True)
class Runner:
    # Its name as `runner=<name>` takes it, as stamps and provenance record it.
    name: str
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
    # Whether the engine is vLLM (in this process or a server): it loads the target's weights and
    # tokenizer, and vLLM's builds and settings apply. The fake engine computes from token ids alone.
    vllm_engine: bool = True
    # (run config) -> whether the engine is one speclens did not start (an attached server), which
    # keeps its own cache, weights and speculative config.
    attached: Callable[[RunConfig], bool] = lambda cfg: False
    # Whether it sends requests at their arrival times (Engine.generate's offsets_s: the load ladder).
    open_loop: bool = False

    def computes_here(self, cfg: RunConfig) -> bool:
        """Whether the engine computes on this machine: vLLM in this process, or a server speclens starts."""
        return self.vllm_engine and not self.attached(cfg)


def _fake_factory(cfg: RunConfig, d: int | None) -> EngineFactory:
    return fake_engine.engine_factory(cfg.runner, d, cfg.engine.max_num_seqs, cfg.engine.max_num_batched_tokens)


RUNNERS: dict[str, Runner] = {
    "vllm": Runner(
        "vllm",
        vllm_runner.VllmRunnerConfig,
        vllm_runner.engine_factory,
        vllm_runner.encoder,
        vllm_runner.prepare_process,
        vllm_runner.check_support,
    ),
    "server": Runner(
        "server",
        server_runner.ServerRunnerConfig,
        server_runner.engine_factory,
        vllm_runner.encoder,
        lambda cfg: None,
        server_runner.check_support,
        lambda cfg: bool(cfg.runner.exclusive),
        replays=False,
        attached=lambda cfg: cfg.runner.url is not None,
        open_loop=True,
    ),
    "fake": Runner(
        "fake",
        fake_engine.FakeRunnerConfig,
        _fake_factory,
        lambda cfg, target_dir: fake_engine.FakeEncoder(),
        lambda cfg: None,
        lambda cfg, speculative: vllm_runner.closed_loop_only(cfg),
        chains=fake_engine.replay_chains,
        vllm_engine=False,
        open_loop=True,
    ),
}


def runner_of(cfg: RunConfig) -> Runner:
    """The runner that `cfg` names, with its capabilities: decided once per run (evals/pipeline/plan.py
    make_plan holds it in the plan) and read from there."""
    for runner in RUNNERS.values():
        if type(cfg.runner) is runner.config_class:
            return runner
    raise TypeError(f"{type(cfg.runner).__name__} is not a registered runner config")
