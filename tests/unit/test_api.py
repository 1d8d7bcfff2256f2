"""The public reader (speclens.read_run, speclens.read_sweep) and the definitions over its frames:
a user's own grouping of the records gives the summary's and the curves' numbers exactly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import speclens
from evals.pipeline.run_job import run
from speclens.errors import SpeclensError
from speclens.file_formats.summary_file import SUMMARY_VERSION
from tests.unit.conftest import compose_run, fake_overrides

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
ROWS = [
    {"question_id": f"q{i}", "category": "coding" if i % 2 else "writing", "turns": [f"task {i}", f"more {i}"]}
    for i in range(6)
]


@pytest.fixture
def fake_run(tmp_path) -> Path:
    out = tmp_path / "run"
    overrides = [*fake_overrides(tmp_path, ROWS), "drafter=ngram", "d=3", "batch_sizes=[1,2]", "baseline=true"]
    run(compose_run(*overrides), out, progress=lambda label: None)
    return out


def test_a_runs_records_give_its_summarys_figures_through_the_public_definitions(fake_run):
    result = speclens.read_run(fake_run)
    summary = result.summary
    assert (summary.schema_version, result.drafter, result.d, result.temperature) == (SUMMARY_VERSION, "ngram", 3, 0.0)
    assert result.stamp["config"]["d"] == 3 and result.stamp["fingerprints"] == vars(summary.fingerprints)
    steps, requests = result.steps, result.requests
    assert set(steps.batch_size) == {1, 2} and len(requests) == 6 * 2 * 2  # prompts x turns x batch sizes
    assert speclens.al(steps) == summary.al
    assert speclens.al_ci95(steps, seed=result.stamp["config"]["seed"]) == summary.al_ci95
    assert speclens.request_weighted_al(steps) == summary.al_request_weighted
    assert speclens.tokens_per_step(requests) == summary.tokens_per_step
    assert speclens.per_position_acceptance(steps, 3) == summary.per_position_acceptance
    assert speclens.acceptance_histogram(steps, 3) == summary.acceptance_histogram
    for domain, figures in summary.by_domain.items():
        assert speclens.al(steps[steps.domain == domain]) == figures.al
    assert set(result.engine_steps["mode"]) >= {"speculative", "plain"}
    outputs = result.outputs.set_index(["batch_size", "request_id", "turn"])
    turns = requests.set_index(["batch_size", "request_id", "turn"])
    assert outputs.token_ids.map(len).sort_index().equals(turns.output_tokens.sort_index().rename("token_ids"))


def test_a_schema_2_run_reads_in_todays_layout():
    result = speclens.read_run(DATA / "schema2" / "baseline" / "drafter=ngram,d=3")
    assert result.summary.schema_version == SUMMARY_VERSION
    assert result.summary.drafter == "ngram" and result.summary.d == 3
    assert speclens.al(result.steps) == pytest.approx(result.summary.al, abs=0)


def test_a_sweep_regrouped_by_the_user_equals_its_curves_exactly():
    # the notebook-style script of docs/api.md, on a fake sweep it measures itself
    out = subprocess.run([sys.executable, "benchmarks/read_sweep.py"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.rstrip().endswith("every curve point equal: True")
    assert out.stdout.count("\n") > 12  # 4 runs x (all + 3 domains) rows printed


def test_a_sweeps_frames_carry_each_runs_settings_and_one_copy_of_the_records(tmp_path):
    sweep_dir = tmp_path / "sweep"
    for d in (1, 3):
        overrides = [*fake_overrides(tmp_path, ROWS), "drafter=ngram", f"d={d}"]
        run(compose_run(*overrides), sweep_dir / f"d{d}", progress=lambda label: None)
    sweep = speclens.read_sweep(sweep_dir)
    assert [r.d for r in sweep.runs] == [1, 3]
    steps = sweep.steps
    assert {"run", "drafter", "d", "temperature"} <= set(steps.columns)
    assert sorted(steps.groupby("run").d.first().items()) == [("d1", 1), ("d3", 3)]
    for r in sweep.runs:
        assert speclens.al(steps[steps.d == r.d]) == r.summary.al
        assert "steps" not in vars(r)  # the sweep read the files itself: no second copy cached per run
    assert len(sweep.requests) == sum(len(r.requests) for r in sweep.runs)


def test_reading_what_is_not_a_finished_run_is_one_line(tmp_path):
    with pytest.raises(SpeclensError, match="holds no finished run"):
        speclens.read_run(tmp_path)
    with pytest.raises(SpeclensError, match="holds no finished run"):
        speclens.read_sweep(tmp_path)
    with pytest.raises(AttributeError):
        speclens.not_a_name  # noqa: B018


def test_the_foundation_stays_light_to_import():
    code = "import speclens.errors, speclens.config, sys; print(sorted({'pandas', 'speclens.file_formats.reading'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
