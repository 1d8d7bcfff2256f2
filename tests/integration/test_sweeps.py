"""AL-vs-D curves on real vLLM: one-pass replay against measured runs, sweeps that resume."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from evals.pipeline.compose import compose_config
from evals.replay import replay
from reports.curves import collect
from tests.fixtures.models import random_eagle3_head, tiny_draft, tiny_target
from tests.integration.conftest import measure, tiny_overrides

REPO = Path(__file__).resolve().parents[2]
# Exact: every run here is float32, where greedy outputs are plain decoding's (speclens/figures/summary.py
# Numerics), so the replay sees the measured run's tokens; only float rounding of the means differs.
TOLERANCE = 1e-12


@pytest.fixture(scope="module")
def target() -> Path:
    return tiny_target()


def replayed(out: Path, overrides: list[str], d_max: int, proposer: str = "v1") -> pd.DataFrame:
    """The whole run's curve; n-gram's for `proposer` (the CPU build's runner is V1: measured runs
    here are V1's)."""
    settings = ["engine.max_model_len=1024", *overrides, f"d_max={d_max}", "engine.cpu_kvcache_space_gib=1"]
    curves = replay(compose_config(settings, "replay"), out)
    whole = curves[(curves.domain == "all") & (curves.segment == "all")]
    return whole[whole.proposer.isin(["", proposer])].set_index("d")


def assert_replay_matches(tmp_path: Path, overrides: list[str], measured_ds: tuple[int, ...], d_max: int) -> None:
    curve = replayed(tmp_path / "replay", overrides, d_max)
    assert list(curve.index) == list(range(1, d_max + 1)) and set(curve.source) == {"replayed"}
    for d in measured_ds:
        summary = measure(tmp_path / f"d{d}", *overrides, f"d={d}")
        assert curve.loc[d, "al"] == pytest.approx(summary["al"], rel=TOLERANCE), f"d={d}"
        assert curve.loc[d, "tokens_per_step"] == pytest.approx(summary["tokens_per_step"], rel=TOLERANCE)


def test_ngram_replay_matches_measured_runs(tmp_path, target):
    overrides = tiny_overrides(target, "drafter=ngram", "drafter.prompt_lookup_min=1")
    assert_replay_matches(tmp_path, overrides, measured_ds=(2, 4), d_max=5)


def test_suffix_replay_matches_measured_runs(tmp_path, target):
    assert_replay_matches(tmp_path, tiny_overrides(target, "drafter=suffix"), measured_ds=(2, 5), d_max=5)


def test_draft_model_replay_matches_measured_runs(tmp_path, target):
    overrides = tiny_overrides(target, "drafter=draft_model", f"drafter.model={tiny_draft()}")
    # d=3 with this draft is test_tiny_models.py's run; replay checked at two other D
    assert_replay_matches(tmp_path, overrides, measured_ds=(1, 2), d_max=4)


def test_smollm2_replay_matches_the_shared_measured_run(tmp_path, smollm2_ngram):
    """The embedded target's n-gram curve, replayed from one plain generation, at the shared run's D
    (suffix and draft_model replays are checked on the tiny target above: the invariant needs no real
    target; n-gram on a real one's text is what is added here)."""
    overrides = [o for o in smollm2_ngram.overrides if o not in ("d=3", "baseline=true")]
    curve = replayed(tmp_path / "replay", overrides, d_max=4)
    assert list(curve.index) == [1, 2, 3, 4] and set(curve.source) == {"replayed"}
    assert curve.loc[3, "al"] == pytest.approx(smollm2_ngram.summary["al"], rel=TOLERANCE)
    assert curve.loc[3, "tokens_per_step"] == pytest.approx(smollm2_ngram.summary["tokens_per_step"], rel=TOLERANCE)
    assert smollm2_ngram.summary["numerics"]["model_runner"] == "v1"
    # Model Runner V2's proposer on the same outputs (the same replay: the dir is kept): another
    # occurrence followed, and D drafts at every step, the last token where nothing matches.
    v2 = replayed(tmp_path / "replay", overrides, d_max=4, proposer="v2")
    assert list(v2.index) == [1, 2, 3, 4] and set(v2.source) == {"replayed"}
    assert (v2.al != curve.al).any()


def test_a_head_that_is_never_accepted_replays_to_one_token_per_step_with_nothing_measured(tmp_path, target):
    """The tiny target's random EAGLE-3 head (its every draft a token the target never emits):
    replayed from its chains (runners/head_chain.py through transformers), AL 1 at every D."""
    overrides = tiny_overrides(target, "drafter=eagle3", f"drafter.model={random_eagle3_head()}")
    curve = replayed(tmp_path / "replay", overrides, d_max=3)
    assert set(curve.source) == {"replayed"} and list(curve.al) == [1.0, 1.0, 1.0]
    assert not (tmp_path / "replay" / "measured_d3").exists()


def multirun(sweep_dir: Path, target: Path) -> subprocess.CompletedProcess:
    args = [
        "-m",
        "hydra/launcher=local",
        "hydra.launcher.n_jobs=2",
        f"hydra.sweep.dir={sweep_dir}",
        *tiny_overrides(target, "drafter=ngram", "d=1,2", "dataset.num_requests=2", "sampling.max_tokens=16"),
        "engine.cpu_kvcache_space_gib=1",
        "engine.max_model_len=1024",
    ]
    return subprocess.run(
        [sys.executable, "-m", "evals.run", *args], cwd=REPO, capture_output=True, text=True, timeout=900
    )


def test_joblib_sweep_resumes_after_a_kill_and_aggregates(tmp_path, target):
    sweep_dir = tmp_path / "sweep"
    first = multirun(sweep_dir, target)
    assert first.returncode == 0, first.stderr[-3000:]
    jobs = sorted(p.parent for p in sweep_dir.rglob("summary.json"))
    assert [json.loads((j / "summary.json").read_text())["d"] for j in jobs] == [1, 2]
    assert all(j.parent == sweep_dir and j.name.startswith(f"d={d},") for d, j in ((1, jobs[0]), (2, jobs[1])))
    # Simulate a sweep killed while d=2 was running: its summary.json was never written.
    kept = jobs[0] / "summary.json"
    kept_bytes, kept_mtime = kept.read_bytes(), kept.stat().st_mtime_ns
    (jobs[1] / "summary.json").unlink()
    second = multirun(sweep_dir, target)
    assert second.returncode == 0, second.stderr[-3000:]
    assert kept.stat().st_mtime_ns == kept_mtime and kept.read_bytes() == kept_bytes
    assert "already holds this run; skipped" in second.stdout
    assert (jobs[1] / "summary.json").is_file()
    curves = collect(sweep_dir)
    assert sorted(curves[curves.domain == "all"].d) == [1, 2]
    assert json.loads((jobs[1] / "summary.json").read_text())["d"] == 2
