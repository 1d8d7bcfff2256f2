"""Engine runs the integration tests share, and the guard that keeps them shared.

A test that only reads what an engine produced reads a shared run: the session fixtures in
tests/integration/conftest.py produce each run of SHARED_RUNS once per session (once for all
pytest-xdist workers: the first worker to need it measures it under a lock, the others read it),
and every test that asserts on it takes the fixture. A second engine run of a configuration is
caught twice over:

- at run time, by `Ledger.record`, which `measure` calls with every configuration it composes: a
  test measuring a configuration another test measured already fails, naming that test (pass
  `repeat=` with the reason where measuring it again is the point, as a determinism check's is);
- before anything runs, by tests/unit/test_shared_runs.py, which reads the integration modules
  and fails on a `measure` call with a shared run's overrides.

Imports neither vLLM nor the project's engines: the unit test reads it too.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The embedded target's n-gram run several modules read: records, lossless check, per-domain figures,
# the thinking/answer split (reasoning.end="."), a replay's measured point.
SMOLLM2_NGRAM = (
    "drafter=ngram",
    "d=3",
    "dataset.num_requests=9",
    "sampling.max_tokens=64",
    "baseline=true",
    "engine.dtype=float32",
    "reasoning.end='.'",
)

SHARED_RUNS: dict[str, tuple[str, ...]] = {"smollm2_ngram": SMOLLM2_NGRAM}


def configuration_key(config: Any) -> str:
    """What makes two engine runs the same run: the composed config, as plain data."""
    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(config, resolve=False) if not isinstance(config, dict) else config
    return hashlib.sha256(json.dumps(plain, sort_keys=True, default=str).encode()).hexdigest()


def current_test() -> str:
    """The running test's node id (pytest sets PYTEST_CURRENT_TEST to '<nodeid> (<phase>)')."""
    return os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]


@dataclass
class Ledger:
    """Which test measured each configuration first, in this process."""

    first: dict[str, str] = field(default_factory=dict)

    def record(self, key: str, test: str, repeat: str | None = None) -> None:
        earlier = self.first.setdefault(key, test)
        if earlier != test and repeat is None:
            raise RepeatedRun(
                f"{test} starts an engine for the configuration {earlier} already measured: read that run "
                "through a shared fixture (tests/integration/shared_runs.py), or pass repeat=<why> to measure "
                "where measuring it again is what the test checks."
            )


class RepeatedRun(AssertionError):
    """A test measured a configuration another test had measured."""


LEDGER = Ledger()


def shared_dir(root: Path, name: str, produce: Callable[[Path], Any]) -> Path:
    """The run dir of shared run `name` under `root` (the session's, or all xdist workers' common
    basetemp), produced by `produce(run_dir)` by whichever process gets there first."""
    from speclens.file_formats.summary_file import SUMMARY_FILE
    from speclens.files import exclusive

    run_dir = root / f"shared-{name}"
    root.mkdir(parents=True, exist_ok=True)
    with exclusive(root / f"shared-{name}.lock", wait=True):
        if not (run_dir / SUMMARY_FILE).is_file():
            produce(run_dir)
    return run_dir
