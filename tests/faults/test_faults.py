"""Fault injection with runner=fake: kills, crashes, concurrent writers and a full disk. Each
checks that nothing measured is lost, nothing half-written reads as finished, and the command
says what happened."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from evals.pipeline.compose import compose_config
from evals.pipeline.run_job import run
from reports.runs import find_runs
from speclens.file_formats.summary_file import read_summary
from tests.unit.conftest import fake_overrides, write_checkpoint, write_questions

REPO = Path(__file__).resolve().parents[2]
ROWS = [
    {"question_id": f"q{i}", "category": "coding" if i % 2 else "writing", "turns": [f"task {i}", f"more {i}"]}
    for i in range(4)
]


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path / "cache"))


def speclens(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "evals.cli", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def wait_for(condition, proc: subprocess.Popen, timeout_s: float = 120.0) -> None:
    """Until ``condition()`` holds (an event the process signals with a file); fails at once if the
    process ends first."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if proc.poll() is not None:
            pytest.fail(
                f"the process ended (exit {proc.returncode}) before getting there: {proc.stderr.read()[-2000:]}"
            )
        assert time.monotonic() < deadline, "timed out waiting for the process to get there"
        time.sleep(0.02)


def test_a_sweep_killed_mid_job_then_rerun_finishes_every_job_exactly_once(tmp_path):
    sweep = tmp_path / "sweep"
    # each job's engine waits at its own gate (runner.gate): d=1 may pass, d=2 is held mid-measurement
    gates = {d: tmp_path / f"gate_d{d}" for d in (1, 2, 3)}
    gates[1].touch()
    args = [
        "run",
        "-m",
        *fake_overrides(tmp_path, ROWS),
        "drafter=ngram",
        "d=1,2,3",
        f"runner.gate={tmp_path}/gate_d${{d}}",
        f"hydra.sweep.dir={sweep}",
    ]
    proc = speclens(*args, cwd=tmp_path)
    # killed (-9: no handler runs) while the d=2 job is half-measured: its stamp written, its engine
    # waiting at its gate
    wait_for(lambda: Path(f"{gates[2]}.waiting").exists(), proc)
    assert list(sweep.glob("*/.incoming-*/stamp.json"))
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = {p.parent: p.read_bytes() for p in sweep.glob("*/summary.json")}
    assert [read_summary(run_dir).d for run_dir in finished] == [1]
    gates[2].touch()
    gates[3].touch()
    rerun = speclens(*args, cwd=tmp_path)
    out, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, err[-2000:]
    summaries = sorted(sweep.glob("*/summary.json"))
    assert sorted(read_summary(p.parent).d for p in summaries) == [1, 2, 3]
    # the job that had finished was not measured again; the killed one's leftovers are gone
    assert all(run_dir.joinpath("summary.json").read_bytes() == data for run_dir, data in finished.items())
    assert out.count("already holds this run; skipped") == 1
    assert not list(sweep.glob("*/.incoming-*"))


def _killed_while_writing_the_summary(cfg, out_dir: Path) -> None:
    """Runs in a forked child: dies (no clean-up, as with kill -9) as summary.json is renamed into place."""
    import speclens.files

    real_replace = os.replace

    def replace(src, dst):
        if Path(dst).name == "summary.json":
            os._exit(137)
        real_replace(src, dst)

    speclens.files.os.replace = replace
    run(cfg, out_dir, progress=lambda label: None)


def test_a_run_killed_while_writing_its_summary_reads_as_incomplete_and_runs_again(tmp_path, capsys):
    cfg = compose_config([*fake_overrides(tmp_path, ROWS), "drafter=ngram", "d=3"])
    out = tmp_path / "run"
    child = multiprocessing.get_context("fork").Process(target=_killed_while_writing_the_summary, args=(cfg, out))
    child.start()
    child.join(60)
    assert child.exitcode == 137
    assert not (out / "summary.json").exists() and find_runs(tmp_path) == []
    summary = run(cfg, out, progress=lambda label: None)
    assert "skipped" not in capsys.readouterr().out and read_summary(out) == summary
    assert not list(out.glob(".incoming-*")) and not list(out.rglob("*.tmp"))


def test_two_runs_into_one_dir_one_is_refused_the_other_completes(tmp_path):
    out = tmp_path / "run"
    gate = tmp_path / "gate"
    args = ["run", *fake_overrides(tmp_path, ROWS), f"runner.gate={gate}", f"hydra.run.dir={out}"]
    first = speclens(*args, cwd=tmp_path)
    # the first holds the dir (its stamp written, its engine waiting at the gate) while the second tries
    wait_for(lambda: Path(f"{gate}.waiting").exists(), first)
    second = speclens(*args, "dataset.num_requests=2", cwd=tmp_path)
    _, err = second.communicate(timeout=60)
    assert second.returncode == 2 and f"is being measured by another process (pid {first.pid})" in err
    gate.touch()
    _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err[-2000:]
    summary, stamp = read_summary(out), json.loads((out / "stamp.json").read_text())
    assert summary.config_fingerprint == stamp["config_fingerprint"] and summary.n_requests == 4
    assert summary.fingerprints.dataset == stamp["fingerprints"]["dataset"]


def test_nightlies_sharing_one_history_keep_every_night(tmp_path):
    target = write_checkpoint(tmp_path / "target")
    questions = write_questions(tmp_path / "q.jsonl", ROWS)
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        f"common: [runner=fake, target=custom, 'target.model={target}', dataset=jsonl, "
        f"'dataset.path={questions}']\njobs:\n  ngram_d3: [drafter=ngram, d=3]\n"
    )
    history = tmp_path / "history.parquet"
    nights = [f"n{i}" for i in range(3)]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "evals.nightly",
                f"suite={suite}",
                f"night={n}",
                f"out={tmp_path / n}",
                f"history={history}",
            ],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        for n in nights
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
    assert sorted(pd.read_parquet(history).night.unique()) == nights


@pytest.fixture
def small_disk(tmp_path):
    """A 384 KiB tmpfs: room for one small run, not for a large one."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=384k", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if made.returncode != 0:
        pytest.skip(
            f"this machine does not let the tests mount a tmpfs ({made.stderr.strip()}): the full-disk case "
            "cannot be made here"
        )
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def test_a_full_disk_is_a_failed_measurement_and_keeps_the_previous_result(tmp_path, small_disk):
    out = small_disk / "run"
    small = ["run", *fake_overrides(tmp_path, ROWS), "drafter=ngram", "d=3", f"hydra.run.dir={out}"]
    first = speclens(*small, cwd=tmp_path)
    _, err = first.communicate(timeout=60)
    assert first.returncode == 0, err[-2000:]
    before = (out / "summary.json").read_bytes()
    rows = [{"question_id": f"q{i}", "category": "qa", "turns": ["long " * 50]} for i in range(512)]
    large = [
        "run",
        *fake_overrides(tmp_path, rows, name="large"),
        "drafter=ngram",
        "d=3",
        "force=true",
        "runner.output_tokens=120",
        "sampling.max_tokens=128",
        f"hydra.run.dir={out}",
    ]
    second = speclens(*large, cwd=tmp_path)
    _, err = second.communicate(timeout=60)
    lines = err.strip().splitlines()
    assert second.returncode == 3, err[-2000:]
    assert any(
        line.startswith("speclens: error: the measurement failed: OSError: [Errno 28] No space left") for line in lines
    )
    assert (out / "summary.json").read_bytes() == before
