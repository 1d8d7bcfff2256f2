"""Run dirs written by the schema-2 speclens (tests/data/schema2, made before the reshape) pass
through every report command with the same content as that release produced
(tests/data/schema2_expected)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from reports.build import main as build_main
from reports.compare import main as compare_main
from reports.curves import main as curves_main
from reports.rank import main as rank_main

DATA = Path(__file__).resolve().parents[1] / "data"
EXPECTED = DATA / "schema2_expected"


@pytest.fixture
def schema2(tmp_path) -> Path:
    copy = tmp_path / "schema2"
    shutil.copytree(DATA / "schema2", copy)
    return copy


def same_content(produced: Path, expected_name: str, root: Path) -> None:
    text = produced.read_text().replace(str(root), "<DATA>")
    assert text == (EXPECTED / expected_name).read_text(), f"{produced.name} differs from {expected_name}"


def test_reports_of_schema2_runs_are_unchanged(schema2, capsys):
    baseline, candidate = schema2 / "baseline", schema2 / "candidate"
    assert curves_main([str(baseline)]) == 0
    assert rank_main([str(baseline)]) == 0
    assert compare_main([str(baseline), str(candidate)]) == 0
    assert build_main([str(baseline)]) == 0
    for produced, expected in [(baseline / "curves.csv", "curves.csv"), (baseline / "ranking.csv", "ranking.csv"),
                               (baseline / "ranking.md", "ranking.md"), (candidate / "compare.csv", "compare.csv"),
                               (candidate / "compare.md", "compare.md"), (baseline / "report.md", "report.md")]:
        same_content(produced, expected, schema2)
