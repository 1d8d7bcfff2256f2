"""benchmarks/synthetic_grid.py reports through speclens's one error path: a bad argument or a
failed evals.run child is one `speclens: error:` line (no CalledProcessError traceback), and
--requests below the fixed batch sizes runs at batch sizes capped to it (issue 56)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import synthetic_grid

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def children(monkeypatch):
    """The evals.run commands synthetic_grid starts, none run: each exits with `status[0]`."""
    started: list[list[str]] = []
    status = [0]

    def fake_run(command, **kwargs):
        started.append(command)
        return subprocess.CompletedProcess(command, status[0])

    monkeypatch.setattr(synthetic_grid.subprocess, "run", fake_run)
    return started, status


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("speclens: error:")]
    assert len(errors) == 1, err
    return errors[0]


@pytest.mark.parametrize("status", [2, 3])
def test_a_failed_child_is_one_line_naming_it_with_its_status(tmp_path, capsys, children, status):
    started, exits = children
    exits[0] = status
    assert synthetic_grid.main(["--out", str(tmp_path), "runner=fake", "d=0"]) == status
    assert len(started) == 1  # the grid stops at its first failed run
    assert one_line(capsys) == (
        f"speclens: error: synthetic_grid: `evals.run drafter=eagle3 d=1 acceptance.synthetic=[0.7] baseline=true "
        f"batch_sizes=[1, 4] dataset.num_requests=8 sampling.max_tokens=48 hydra.run.dir={tmp_path}/eagle3_d1 "
        f"runner=fake d=0` exited with status {status} (its error is above)."
    )


@pytest.mark.parametrize("requests, sizes", [(1, "[1]"), (2, "[1, 2]"), (3, "[1, 3]"), (4, "[1, 4]"), (8, "[1, 4]")])
def test_fewer_requests_than_a_batch_size_run_at_batch_sizes_capped_to_them(tmp_path, children, requests, sizes):
    started, _ = children
    synthetic_grid.run_grid(tmp_path, "eagle3", requests, 48, ["runner=fake"])
    assert len(started) == len(synthetic_grid.GRID)
    for command in started:
        assert f"batch_sizes={sizes}" in command and f"dataset.num_requests={requests}" in command


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--requests", "0"], "synthetic_grid: --requests 0: must be >= 1."),
        (["--max-tokens", "-3"], "synthetic_grid: --max-tokens -3: must be >= 1."),
        (["--requests", "many"], "synthetic_grid: argument --requests: invalid int value: 'many'"),
        (["--bogus"], "synthetic_grid: unrecognized arguments: --bogus"),
    ],
)
def test_a_bad_argument_is_one_line_before_any_run(tmp_path, capsys, children, argv, said):
    started, _ = children
    assert synthetic_grid.main(["--out", str(tmp_path), *argv]) == 2
    assert one_line(capsys).startswith(f"speclens: error: {said}")
    assert started == []


def test_the_script_refused_by_its_child_ends_in_one_line_of_its_own(tmp_path):
    """As a user runs it: the child's refusal (composition, no engine), then the script's line."""
    proc = subprocess.run(
        [sys.executable, "benchmarks/synthetic_grid.py", "--out", str(tmp_path), "runner=fake", "engin.dtype=float32"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[-2].startswith("speclens: error: engin: no such key in RunConfig; did you mean engine.dtype?")
    assert lines[-1].startswith("speclens: error: synthetic_grid: `evals.run drafter=eagle3 d=1 ")
    assert lines[-1].endswith("` exited with status 2 (its error is above).")
    assert not (tmp_path / "eagle3_d1").exists()
