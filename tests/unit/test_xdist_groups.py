"""`make test` runs on pytest-xdist workers with `--dist loadgroup`: the tests marked with one
xdist_group share a worker, and with it a built drafter or an attached server. A pytest that moved
node ids where pytest-xdist cannot suffix them (9.2 with xdist 3.8) ignored every group in silence:
both workers then built or started the same thing."""

from __future__ import annotations

import subprocess
import sys

GROUPED = """
import os
import pytest

@pytest.mark.xdist_group("built")
@pytest.mark.parametrize("n", range(4))
def test_grouped(n):
    assert os.environ["PYTEST_CURRENT_TEST"].split(" ")[0].endswith("@built")

@pytest.mark.parametrize("n", range(4))
def test_alone(n):
    assert "@" not in os.environ["PYTEST_CURRENT_TEST"]
"""


def test_tests_marked_with_one_xdist_group_are_scheduled_as_that_group(tmp_path):
    (tmp_path / "test_groups.py").write_text(GROUPED)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider", "-q"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "8 passed" in proc.stdout
