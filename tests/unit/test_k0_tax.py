"""The K=0 tax (speclens/figures/costs.py): the idle pass (speculation on at D, nothing proposed) beside plain
decoding, against hand-computed values from the fake engine's scripted step times
(runners.fake_engine.linear_cost: 10 ms per step + 1 ms per token processed + 2 ms per drafted token
in the drafter's pass + runner.idle_ms per step of the idle pass)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.pipeline.passes import IDLE_NEEDS_STEPS, IDLE_NOT_ON_V2, idle_spec
from evals.pipeline.run_job import run
from reports.table import operating_point_line
from runners import fake_engine
from runners.zero_cost_proposer import IDLE_CLASS_PATH, IdleProposer
from speclens.figures import costs
from speclens.figures.costs import StepTiming
from speclens.file_formats.records import read_parquet
from speclens.file_formats.summary_file import SUMMARY_VERSION, read_summary
from tests.unit.conftest import compose_run, fake_overrides

PROMPTS = [
    {"question_id": f"c{i}", "category": "coding", "turns": [f"write function number {i} " * (i + 1)]} for i in range(4)
]
# Every request: 18 tokens after the prefill token, in 6 steps accepting both of D = 2 drafts.
SCRIPT = {f"c{i}#0": [2] * 6 for i in range(4)}
IDLE_MS = 3.0


def measure(tmp_path: Path, *overrides: str) -> tuple[dict, Path]:
    cfg = compose_run(
        *fake_overrides(tmp_path, PROMPTS, SCRIPT, num_attention_heads=8, num_key_value_heads=1),
        "drafter=ngram",
        "d=2",
        "batch_sizes=[1,2]",
        f"runner.idle_ms={IDLE_MS}",
        *overrides,
    )
    out = tmp_path / "run"
    summary = run(cfg, out, progress=lambda label: None)
    return summary.to_dict(), out


def test_k0_tax_is_the_idle_steps_cost_over_plain_decodings(tmp_path, engines_started):
    summary, out = measure(tmp_path, "baseline=true")
    assert summary["schema_version"] == SUMMARY_VERSION == 12
    for point in summary["operating_points"]:
        b = point["batch_size"]
        plain, idle, spec = 10 + b, 10 + b + IDLE_MS, 10 + 3 * b + 2 * 2 * b
        assert point["t_verif"]["median_ms"] == pytest.approx(plain)
        assert point["t_idle"]["median_ms"] == pytest.approx(idle)
        # the idle pass decodes as plain decoding does, one token a step: as many steady steps
        assert point["t_idle"]["n"] == point["t_verif"]["n"] == 4 * 18 // b
        assert point["k0_tax"] == pytest.approx(IDLE_MS / plain)
        assert point["k0_tax_range"] == pytest.approx([IDLE_MS / plain] * 2)  # scripted steps: no spread
        assert "k0_tax_note" not in point
        # the other passes' scripted costs are what they were without the idle pass
        assert point["t_step"]["median_ms"] == pytest.approx(spec)
        assert point["t_verif_spec"]["median_ms"] == pytest.approx(10 + 3 * b)
        account = point["speedup_account"]
        assert account["k0_tax"] == pytest.approx(IDLE_MS / plain)
        assert account["k0_tax_share"] == pytest.approx(IDLE_MS / spec)
        # beside the factors, not one of them: they still multiply to the measured speedup
        assert "k0_tax" not in account["factors"] and "k0_tax_share" not in account["factors"]
        assert account["product"] == pytest.approx(point["speedup"], rel=1e-12)
    # the idle engines: speculation on at D with the proposer that proposes nothing
    idle_specs = [s for s in engines_started if s is not None and s.get("model") == IDLE_CLASS_PATH]
    assert idle_specs == [{"method": "custom_class", "model": IDLE_CLASS_PATH, "num_speculative_tokens": 2}] * 2
    steps = read_parquet(out / "engine_steps.parquet")
    idle_steps = steps[steps["mode"] == "idle"]
    assert sorted(idle_steps.batch_size.unique()) == [1, 2]
    assert (idle_steps.num_draft_tokens == 0).all()
    # the table's line of each operating point names it
    typed = read_summary(out)
    b1, b2 = typed.operating_points
    assert f"K=0 tax +{100 * IDLE_MS / 11:.1f}%" in operating_point_line(b1)  # +27.3%
    assert f"K=0 tax +{100 * IDLE_MS / 12:.1f}%" in operating_point_line(b2)  # +25.0%


def test_no_baseline_no_idle_pass_and_no_tax(tmp_path, engines_started):
    summary, out = measure(tmp_path)
    for point in summary["operating_points"]:
        assert point["t_idle"] is None and point["k0_tax"] is None and point["k0_tax_range"] is None
        assert "k0_tax_note" not in point and point["speedup_account"] is None
    assert all(s is not None and s["method"] == "ngram" for s in engines_started)
    assert set(read_parquet(out / "engine_steps.parquet")["mode"]) == {"speculative"}
    assert "K=0 tax" not in operating_point_line(read_summary(out).operating_points[0])


def test_an_engine_without_steps_gives_a_null_tax_and_says_why(tmp_path, monkeypatch):
    """As a server does: no engine steps to time, so neither the verify nor the idle pass runs; the
    run is not an error."""
    monkeypatch.setattr(fake_engine.FakeEngine, "step_log", lambda self: [])
    summary, _ = measure(tmp_path, "baseline=true")
    for point in summary["operating_points"]:
        assert point["k0_tax"] is None and point["t_idle"] is None
        assert point["k0_tax_note"] == IDLE_NEEDS_STEPS
        assert point["speedup"] is not None  # the baseline ran


def test_model_runner_v2_runs_no_idle_pass_and_says_why(tmp_path, monkeypatch):
    original = fake_engine.fake_factory

    def on_v2(*args, **kwargs):
        inner = original(*args, **kwargs)

        def factory(model_dir, spec):
            engine = inner(model_dir, spec)
            engine.model_runner = "v2"
            return engine

        return factory

    monkeypatch.setattr(fake_engine, "fake_factory", on_v2)
    summary, out = measure(tmp_path, "baseline=true")
    assert "idle" not in set(read_parquet(out / "engine_steps.parquet")["mode"])
    for point in summary["operating_points"]:
        assert point["k0_tax"] is None and point["k0_tax_note"] == IDLE_NOT_ON_V2
    assert idle_spec(3, "v2") is None and idle_spec(3, "v1")["num_speculative_tokens"] == 3


def as_version_11(path: Path) -> None:
    """A summary.json rewritten as schema 11 wrote it: no idle pass's figures."""
    raw = json.loads(path.read_text())
    raw["schema_version"] = 11
    for point in raw["operating_points"]:
        for key in ("t_idle", "k0_tax", "k0_tax_range"):
            del point[key]
        for key in ("k0_tax", "k0_tax_share"):
            del point["speedup_account"][key]
    path.write_text(json.dumps(raw))


def test_a_version_11_summary_reads_with_no_k0_tax(tmp_path):
    _, out = measure(tmp_path, "baseline=true")
    as_version_11(out / "summary.json")
    summary = read_summary(out)
    assert summary.schema_version == 12
    for point in summary.operating_points:
        assert point.k0_tax is None and point.t_idle is None and point.k0_tax_range is None
        assert point.k0_tax_note is None
        assert point.speedup_account.k0_tax is None and point.speedup_account.k0_tax_share is None
        assert point.t_verif is not None  # the rest read as written
        assert "K=0 tax" not in operating_point_line(point)


def test_k0_tax_range_puts_the_two_steps_at_opposite_quartiles():
    idle = StepTiming(median_ms=12.0, p25_ms=11.0, p75_ms=14.0, n=9)
    plain = StepTiming(median_ms=10.0, p25_ms=9.0, p75_ms=11.0, n=9)
    tax, (low, high) = costs.k0_tax(idle, plain)
    assert tax == pytest.approx(0.2)
    assert low == pytest.approx(11 / 11 - 1) and high == pytest.approx(14 / 9 - 1)
    assert costs.k0_tax(None, plain) == (None, None) and costs.k0_tax(idle, None) == (None, None)


def test_the_idle_proposer_proposes_nothing_for_every_request():
    class Config:
        class speculative_config:  # noqa: N801 (vLLM's attribute name)
            num_speculative_tokens = 3

    assert IdleProposer(Config()).propose([[5], [6, 7], []]) == [[], [], []]
