"""Integration tests share engine runs (tests/integration/shared_runs.py): no test module measures
a configuration a shared fixture provides, and the run-time ledger fails a test that measures a
configuration another test measured."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.integration.shared_runs import SHARED_RUNS, Ledger, RepeatedRun, configuration_key

INTEGRATION = Path(__file__).resolve().parents[1] / "integration"


def measure_calls(source: str) -> list[tuple[int, set[str]]]:
    """Each `measure(...)` call's line and the overrides it spells out as literal text."""
    calls = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "measure":
            literals = {a.value for a in node.args[1:] if isinstance(a, ast.Constant) and isinstance(a.value, str)}
            literals |= {ast.unparse(a) for a in node.args[1:] if isinstance(a, ast.JoinedStr)}
            calls.append((node.lineno, literals))
    return calls


def shared_run_measured_by(source: str) -> list[tuple[int, str]]:
    """Where `source` measures a shared run's configuration itself: a call spelling out every one
    of its overrides."""
    return [
        (line, name)
        for line, literals in measure_calls(source)
        for name, overrides in SHARED_RUNS.items()
        if set(overrides) <= literals
    ]


def test_no_integration_module_measures_a_configuration_a_shared_fixture_provides():
    found = [
        f"{path.name}:{line} measures shared run {name!r}: take its fixture instead"
        for path in sorted(INTEGRATION.glob("test_*.py"))
        for line, name in shared_run_measured_by(path.read_text())
    ]
    assert found == []


def test_the_static_check_finds_a_planted_copy_of_a_shared_run():
    overrides = ", ".join(repr(o) for o in SHARED_RUNS["smollm2_ngram"])
    planted = f"def test_x(tmp_path):\n    measure(tmp_path / 'again', {overrides}, 'sampling.seed=0')\n"
    assert shared_run_measured_by(planted) == [(2, "smollm2_ngram")]
    assert shared_run_measured_by(planted.replace("'d=3'", "'d=4'")) == []


def test_the_ledger_fails_a_second_test_measuring_a_configuration_unless_it_says_why():
    from evals.pipeline.compose import compose_config

    key = configuration_key(compose_config(["runner=fake", "drafter=ngram", "d=3"]))
    assert key != configuration_key(compose_config(["runner=fake", "drafter=ngram", "d=2"]))
    ledger = Ledger()
    ledger.record(key, "module_a::test_one")
    ledger.record(key, "module_a::test_one")  # the same test again: its own business
    with pytest.raises(
        RepeatedRun, match=r"module_b::test_two starts an engine for the configuration .*module_a::test_one"
    ):
        ledger.record(key, "module_b::test_two")
    ledger.record(key, "module_b::test_two", repeat="the same records twice")
