"""Integration tests: real vLLM on CPU with the tiny fixture models and the real SmolLM2."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

# One engine at a time, small KV cache: the suite must fit a 2-core, 24 GiB machine.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

pytest.importorskip("vllm", reason="integration tests need the CPU extra (make install)")

from evals.pipeline.compose import compose_config  # noqa: E402
from evals.pipeline.run_job import run  # noqa: E402
from speclens.file_formats.records import read_parquet  # noqa: E402
from tests.integration.shared_runs import LEDGER, SHARED_RUNS, configuration_key, current_test, shared_dir  # noqa: E402

# The engine keys every measured run starts from; an override of the same key replaces it.
MEASURE_DEFAULTS = {"engine.cpu_kvcache_space_gib": "1", "engine.max_model_len": "1024"}
# The GPU-marked tests' run: n-gram on MT-Bench in bf16 with batch-invariant kernels, so outputs do
# not move with batch shapes and two runs can be held to the same tokens.
GPU_INVARIANT_NGRAM = [
    "drafter=ngram",
    "d=3",
    "dataset=mt_bench",
    "dataset.num_requests=8",
    "sampling.max_tokens=64",
    "engine.max_model_len=2048",
    "engine.dtype=bfloat16",
    "engine.batch_invariant=true",
]


def measure(out_dir: Path, *overrides: str, repeat: str | None = None, progress=lambda label: None) -> dict:
    """Run `evals.run` in-process with the real vLLM engine; returns summary.json's content. A
    configuration another test measured already fails the test (shared_runs.py) unless `repeat`
    says why measuring it again is the point."""
    given = {o.split("=", 1)[0] for o in overrides}
    defaults = [f"{k}={v}" for k, v in MEASURE_DEFAULTS.items() if k not in given]
    cfg = compose_config([*defaults, *overrides])
    LEDGER.record(configuration_key(cfg), current_test(), repeat)
    return run(cfg, out_dir, progress=progress).to_dict()


def shared_root(tmp_path_factory) -> Path:
    """Where shared runs live: the session's basetemp, or, under pytest-xdist, the one all workers share."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@dataclass(frozen=True)
class SharedRun:
    out: Path
    summary: dict
    overrides: tuple[str, ...]


def _shared(tmp_path_factory, name: str) -> SharedRun:
    overrides = SHARED_RUNS[name]
    out = shared_dir(shared_root(tmp_path_factory), name, lambda run_dir: measure(run_dir, *overrides))
    return SharedRun(out, json.loads((out / "summary.json").read_text()), overrides)


@pytest.fixture(scope="session")
def smollm2_ngram(tmp_path_factory) -> SharedRun:
    """The embedded target, n-gram d=3 on 9 sample prompts (one per source category), float32,
    with plain decoding beside it and the thinking split at the first full stop."""
    return _shared(tmp_path_factory, "smollm2_ngram")


def tiny_overrides(target: Path, *more: str) -> list[str]:
    return [
        "target=custom",
        f"target.model={target}",
        "dataset=mt_bench",
        "dataset.num_requests=6",
        "sampling.max_tokens=48",
        "engine.dtype=float32",
        *more,
    ]


def steps_of(out_dir: Path):
    return read_parquet(out_dir / "steps.parquet")


def requests_of(out_dir: Path):
    return read_parquet(out_dir / "requests.parquet")
