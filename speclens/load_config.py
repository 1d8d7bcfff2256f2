"""The load ladder's keys (`python -m evals.load`, issue 67) and their checks: every bad value
refused in one line naming the key and the rule, before any request is sent."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from speclens.arrivals import PROCESSES
from speclens.config import RunConfig
from speclens.errors import ConfigError

# A stage's measured requests where neither stage.requests nor stage.seconds is given.
DEFAULT_STAGE_REQUESTS = 32
# The most requests one stage may send (more is a typo, and a ladder that never ends).
MAX_STAGE_REQUESTS = 10_000
MAX_LADDER_REPEATS = 100  # evals.run's bound (evals/pipeline/compose.py MAX_REPEATS)


@dataclass
class StageConfig:
    """One rung's length: `requests` measured requests, or as many as arrive in `seconds` (neither
    given: DEFAULT_STAGE_REQUESTS); the first `warmup_requests` are sent but left out of the figures."""

    requests: int | None = None
    seconds: float | None = None
    warmup_requests: int = 2


@dataclass
class SloConfig:
    """The service-level objective goodput counts requests against (None: no bound)."""

    tpot_ms: float | None = None
    ttft_ms: float | None = None


@dataclass
class LoadConfig(RunConfig):
    """`python -m evals.load`: every evals.run key, plus the ladder's. Each arm (plain decoding, the
    drafter at each of `draft_lengths`, and with `schedule_arm` the load policy's schedule) is
    measured at every rate, `repeats` times (RunConfig.repeats; null: once)."""

    request_rates: list[float] = field(default_factory=lambda: [0.5, 1.0, 2.0, 4.0])
    arrivals: str = "poisson"
    stage: StageConfig = field(default_factory=StageConfig)
    slo: SloConfig = field(default_factory=SloConfig)
    # The drafter's arms (null: d alone).
    draft_lengths: list[int] | None = None
    # Run the schedule the static arms' crossover gives (vLLM's dynamic speculation) as an arm of
    # its own, after them; with drafter.schedule= that schedule instead.
    schedule_arm: bool = True

    @property
    def ladder_repeats(self) -> int:
        return self.repeats or 1

    @property
    def arm_lengths(self) -> list[int]:
        return list(self.draft_lengths) if self.draft_lengths else [self.d]


def _finite_positive(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def check_ladder(cfg: LoadConfig) -> None:
    """Refuse, naming the key, a ladder that could not measure what it is asked."""
    rates = check_rates(cfg.request_rates)
    _check_rest(cfg, rates)


def check_rates(given: object) -> list[float]:
    """request_rates= as a ladder takes them: at least one, each finite and > 0, increasing, once each."""
    if not isinstance(given, (list, tuple)):
        raise ConfigError(
            f"request_rates={given}: a list of rates in requests per second, e.g. request_rates=[0.5,1,2,4]."
        )
    rates = list(given)
    if not rates:
        raise ConfigError(
            "request_rates=[]: give at least one rate in requests per second, e.g. request_rates=[0.5,1,2,4]."
        )
    for rate in rates:
        if not _finite_positive(rate):
            raise ConfigError(
                f"request_rates={rates}: {rate} is not a rate; each must be a finite number > 0 (requests/s)."
            )
    if len(set(rates)) != len(rates):
        raise ConfigError(f"request_rates={rates}: each rate once (repeats= measures a rate again).")
    if rates != sorted(rates):
        raise ConfigError(f"request_rates={rates}: give the rates in increasing order, e.g. {sorted(rates)}.")
    return [float(r) for r in rates]


def _check_rest(cfg: LoadConfig, rates: list[float]) -> None:
    if cfg.arrivals not in PROCESSES:
        raise ConfigError(f"arrivals={cfg.arrivals}: one of {', '.join(PROCESSES)}.")
    stage = cfg.stage
    if stage.requests is not None and stage.seconds is not None:
        raise ConfigError(
            f"stage.requests={stage.requests} and stage.seconds={stage.seconds:g} each set a stage's length: give one of them."
        )
    if stage.requests is not None and (
        isinstance(stage.requests, bool) or not isinstance(stage.requests, int) or stage.requests < 1
    ):
        raise ConfigError(f"stage.requests={stage.requests}: must be a whole number >= 1.")
    if stage.requests is not None and stage.requests > MAX_STAGE_REQUESTS:
        raise ConfigError(f"stage.requests={stage.requests}: at most {MAX_STAGE_REQUESTS} requests a stage.")
    if stage.seconds is not None:
        if not _finite_positive(stage.seconds):
            raise ConfigError(f"stage.seconds={stage.seconds}: must be a finite number of seconds > 0.")
        expected = stage.seconds * rates[0]
        if stage.seconds * rates[-1] > MAX_STAGE_REQUESTS:
            raise ConfigError(
                f"stage.seconds={stage.seconds:g}: at request_rates' top rate ({rates[-1]:g}/s) a stage that long "
                f"sends {stage.seconds * rates[-1]:.0f} requests, above {MAX_STAGE_REQUESTS}; shorten it."
            )
        if expected < 1:
            raise ConfigError(
                f"stage.seconds={stage.seconds}: at request_rates' lowest rate ({rates[0]}/s) a stage that long "
                f"expects {expected:.2f} requests, too short for one; give stage.seconds >= {math.ceil(1 / rates[0])}."
            )
    if (
        isinstance(stage.warmup_requests, bool)
        or not isinstance(stage.warmup_requests, int)
        or stage.warmup_requests < 0
    ):
        raise ConfigError(f"stage.warmup_requests={stage.warmup_requests}: must be a whole number >= 0.")
    if stage.warmup_requests > MAX_STAGE_REQUESTS:
        raise ConfigError(
            f"stage.warmup_requests={stage.warmup_requests}: at most {MAX_STAGE_REQUESTS} requests a stage."
        )
    if cfg.repeats is not None and (
        isinstance(cfg.repeats, bool) or not isinstance(cfg.repeats, int) or cfg.repeats < 1
    ):
        raise ConfigError(f"repeats={cfg.repeats}: must be a whole number >= 1 (or null: once).")
    if cfg.repeats is not None and cfg.repeats > MAX_LADDER_REPEATS:
        raise ConfigError(
            f"repeats={cfg.repeats}: at most {MAX_LADDER_REPEATS}; each repeat runs the whole ladder again."
        )
    lengths = cfg.draft_lengths
    if lengths is not None:
        if not lengths or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in lengths):
            raise ConfigError(f"draft_lengths={list(lengths)}: whole numbers >= 1 (or null: d alone).")
        if len(set(lengths)) != len(lengths):
            raise ConfigError(f"draft_lengths={list(lengths)}: each D once.")
    for key, value, kind in (
        ("request_rate", cfg.request_rate, "one open-loop rate of evals.run; the ladder's are request_rates="),
        ("batch_sizes", cfg.batch_sizes, "closed-loop load; the ladder sends open-loop load at request_rates="),
    ):
        if value is not None:
            raise ConfigError(f"{key}={value}: {kind}; leave {key} unset.")
    if cfg.baseline:
        raise ConfigError(
            "baseline=true: the ladder always measures plain decoding as an arm of its own; leave baseline unset."
        )
    for key in ("tpot_ms", "ttft_ms"):
        bound = getattr(cfg.slo, key)
        if bound is not None and not _finite_positive(bound):
            raise ConfigError(f"slo.{key}={bound:g}: must be a finite number of milliseconds > 0 (or null: no bound).")
