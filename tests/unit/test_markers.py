"""The `integration` marker splits the suite: `-m "not integration"` is exactly the unit and
fault tests (what `make unit` runs), `-m integration` exactly the real-vLLM ones."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def collected(*args: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode in (0, 5), out.stdout + out.stderr
    return {line for line in out.stdout.splitlines() if "::" in line}


def test_not_integration_is_the_unit_and_fault_tests_and_integration_the_rest():
    everything = collected("tests")
    not_integration = collected("tests", "-m", "not integration")
    integration = collected("tests", "-m", "integration")
    assert not_integration == collected("tests/unit", "tests/faults")
    assert integration and all(test.startswith("tests/integration/") for test in integration)
    assert integration | not_integration == everything and not integration & not_integration
