"""Integration tests: real vLLM on CPU with the tiny fixture models and the real SmolLM2."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# One engine at a time, small KV cache: the suite must fit a 2-core, 24 GiB machine.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

pytest.importorskip("vllm", reason="integration tests need the CPU extra (make install)")

from evals.compose import compose_config  # noqa: E402
from evals.run import run  # noqa: E402
from speclens.records import read_parquet  # noqa: E402


def measure(out_dir: Path, *overrides: str) -> dict:
    """Run `evals.run` in-process with the real vLLM engine; returns summary.json's content."""
    cfg = compose_config(["engine.cpu_kvcache_space_gib=1", "engine.max_model_len=1024", *overrides])
    return run(cfg, out_dir, progress=lambda label: None).to_dict()


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
