"""The `integration` marker splits the suite: `-m "not integration"` is exactly the unit and
fault tests (what `make unit` runs), `-m integration` exactly the real-vLLM ones."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def collected(*args: str) -> tuple[set[str], int]:
    """The tests selected, and how many were collected before the selection (pytest -q's
    "N/M tests collected (K deselected)" line, or "M tests collected" when none is deselected)."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode in (0, 5), out.stdout + out.stderr
    total = re.search(r"^(?:\d+/)?(\d+) tests? collected", out.stdout, re.MULTILINE)
    assert total, out.stdout[-2000:]
    return {line for line in out.stdout.splitlines() if "::" in line}, int(total.group(1))


def test_not_integration_is_the_unit_and_fault_tests_and_integration_the_rest():
    # Two collections, not four: disjoint selections whose sizes add up to the whole collection
    # cover it, and with every integration-marked test under tests/integration/ and every other one
    # under tests/unit/ or tests/faults/, each folder's tests land on their own side.
    not_integration, everything = collected("tests", "-m", "not integration")
    integration, everything_again = collected("tests", "-m", "integration")
    assert everything == everything_again
    assert integration and all(test.startswith("tests/integration/") for test in integration)
    assert not_integration and all(test.startswith(("tests/unit/", "tests/faults/")) for test in not_integration)
    assert not integration & not_integration and len(integration) + len(not_integration) == everything
