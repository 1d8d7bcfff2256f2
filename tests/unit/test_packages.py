"""speclens's generic top-level names (evals, drafters, runners, reports) resolve to this
distribution; a package of the same name earlier on the path is refused in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from speclens.packages import OWN_PACKAGES, ROOT, shadowed


def test_the_four_names_are_this_distributions():
    assert shadowed() == {}
    assert {(ROOT / name / "__init__.py").is_file() for name in OWN_PACKAGES} == {True}


def shadowing(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "__init__.py").write_text("")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    return subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True)


def test_a_shadowing_package_is_refused_by_a_command_in_one_line(tmp_path):
    out = shadowing(tmp_path, "-m", "evals.run", "--help")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("speclens: error: another package takes")
    assert f"'reports' is {tmp_path / 'reports'}, not speclens's {ROOT / 'reports'}" in out.stderr
    assert "PYTHONPATH" in out.stderr  # not an installed distribution: where to take it off


def test_a_shadowing_package_is_an_import_error_for_a_library_user(tmp_path):
    out = shadowing(tmp_path, "-c", "import evals")
    assert out.returncode == 1
    assert out.stderr.rstrip().splitlines()[-1].startswith("ImportError: speclens: error: another package takes")
