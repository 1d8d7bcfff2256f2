"""logger=wandb in offline mode: the logged keys and values, read back from the offline run files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from evals.sweep_report import SweepReport
from speclens.config import WandbLoggerConfig
from tests.unit.test_step_costs import measure
from tests.wandb_offline import offline_runs

SECRET = "sk-do-not-log-4711"


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")


def _table(run_dir: Path, run, key: str) -> dict:
    files = next(run_dir.rglob("offline-run-*")) / "files"
    return json.loads((files / run.history[f"{key}.path"]).read_text())


def test_a_run_logs_its_figures_tables_and_tags_without_secrets(tmp_path):
    summary, out = measure(
        tmp_path, 2, "logger=wandb", "logger.tags=[nightly]", f"+engine.extra_args.hf_token={SECRET}"
    )
    (run,) = offline_runs(out)
    assert run.name == "ngram-d2" and run.job_type == "run"
    fingerprint = summary["fingerprints"]["target"].split(":")[-1][:16]
    assert run.tags == ["source=fake", "drafter=ngram", "d=2", "domains=coding", f"target={fingerprint}", "nightly"]
    assert run.summary["al"] == pytest.approx(summary["al"]) == pytest.approx(3.0)
    assert run.summary["al/coding"] == pytest.approx(summary["by_domain"]["coding"]["al"])
    assert run.summary["acceptance/pos2"] == pytest.approx(summary["per_position_acceptance"][1])
    assert run.summary["speedup/B2"] == pytest.approx(summary["operating_points"][1]["speedup"])
    assert run.summary["t_draft_ms/B1"] == pytest.approx(4.0)
    histogram = _table(out, run, "table/acceptance_histogram")
    assert histogram["columns"] == ["accepted", "steps"]
    assert [row[1] for row in histogram["data"]] == summary["acceptance_histogram"]
    by_position = _table(out, run, "table/al_by_position")
    assert [row[3] for row in by_position["data"]] == pytest.approx([b["al"] for b in summary["al_by_position"]])
    assert {"plot/per_position_acceptance_table.path", "plot/al_by_position_table.path"} <= set(run.history)
    by_output = _table(out, run, "table/al_by_output_position")
    assert [row[3] for row in by_output["data"]] == pytest.approx([b["al"] for b in summary["al_by_output_position"]])
    assert run.summary["al_emitted"] == pytest.approx(summary["al_emitted"])
    assert run.summary["al_per_request/p90"] == pytest.approx(summary["al_per_request"]["p90"])
    assert run.summary["peer/specdec_bench/Average_AL"] == pytest.approx(
        summary["peer_figures"]["specdec_bench"]["Average_AL"]
    )
    assert run.config["drafter"] == "ngram" and run.config["config"]["d"] == 2 and run.config["runner"] == "fake"
    assert run.config["config"]["engine"]["extra_args"]["hf_token"] == "***redacted***"
    # nowhere in the run dir: not in the wandb files, stamp.json or any log
    leaked = [p for p in out.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert leaked == []


def test_a_sweep_logs_its_curves_and_ranking_in_its_group(tmp_path):
    measure(tmp_path, 2)
    measure(tmp_path, 1)
    sweep_dir = tmp_path / "sweep"
    config = OmegaConf.create(
        {"hydra": {"sweep": {"dir": str(sweep_dir)}}, "logger": OmegaConf.structured(WandbLoggerConfig())}
    )
    SweepReport().on_multirun_end(config)
    assert (sweep_dir / "curves.csv").is_file() and (sweep_dir / "ranking.csv").is_file()
    (run,) = offline_runs(sweep_dir / "wandb")
    assert run.group == "sweep" and run.job_type == "sweep" and run.name == "sweep sweep"
    # the fake engine's points say so in their keys: a dashboard never reads them as measured
    assert run.summary["al/ngram/d1/fake"] == pytest.approx(2.0) and run.summary["al/ngram/d2/fake"] == pytest.approx(
        3.0
    )
    assert not any(key.startswith("al/") and not key.endswith("/fake") for key in run.summary.keys())
    curves = _table(sweep_dir, run, "table/al_vs_d")
    assert {(row[0], row[1]) for row in curves["data"]} == {("ngram", 1), ("ngram", 2)}
    ranking = _table(sweep_dir, run, "table/ranking")
    assert "speedup_source" in ranking["columns"] and len(ranking["data"]) == 12
    assert {"plot/al_vs_d/all_table.path", "plot/al_vs_d/coding_table.path"} <= set(run.history)


@pytest.mark.parametrize(
    "key, secret",
    [
        ("hf_token", True),
        ("HF-TOKEN", True),
        ("wandb_api_key", True),
        ("client_secret", True),
        ("aws_secret_access_key", True),
        ("password", True),
        ("max_tokens", False),
        ("tokenizer", False),
        ("stop_token_ids", False),
        ("num_draft_tokens", False),
        ("author", False),
    ],
)
def test_secret_keys_are_told_apart_from_token_counts(key, secret):
    from speclens.redact import REDACTED, redact

    assert (redact({"a": [{key: "x"}]})["a"][0][key] == REDACTED) is secret


def test_secrets_stay_out_of_job_dir_names_and_the_saved_sweep_config(tmp_path):
    from evals.pipeline.compose import job_dirname
    from evals.sweep_report import redact_saved_config
    from speclens.redact import REDACTED, redact_overrides

    overrides = f"batch_sizes=[1,4],d=3,+engine.extra_args.hf_token={SECRET},sampling.max_tokens=64"
    assert (
        redact_overrides(overrides)
        == f"batch_sizes=[1,4],d=3,+engine.extra_args.hf_token={REDACTED},sampling.max_tokens=64"
    )
    assert SECRET not in job_dirname(overrides)
    saved = tmp_path / "multirun.yaml"
    saved.write_text(
        OmegaConf.to_yaml(
            {
                "hydra": {
                    "overrides": {"task": ["d=3", f"engine.extra_args.api_key={SECRET}"]},
                    "job": {"override_dirname": f"d=3,engine.extra_args.api_key={SECRET}"},
                },
                "engine": {"extra_args": {"api_key": SECRET}},
                "d": 3,
            }
        )
    )
    redact_saved_config(saved)
    text = saved.read_text()
    assert SECRET not in text and f"engine.extra_args.api_key={REDACTED}" in text and "d=3" in text


def test_a_wandb_failure_warns_and_keeps_the_run(tmp_path, monkeypatch, capsys):
    import evals.pipeline.run_job

    def unreachable(*args, **kwargs):
        raise ConnectionError("api.wandb.ai unreachable")

    monkeypatch.setattr(evals.pipeline.run_job, "log_run", unreachable)
    summary, out = measure(tmp_path, 2, "logger=wandb")
    assert json.loads((out / "summary.json").read_text())["al"] == summary["al"] == pytest.approx(3.0)
    assert "logging to wandb failed (ConnectionError: api.wandb.ai unreachable)" in capsys.readouterr().err


def test_the_command_line_with_a_secret_is_not_stored_by_wandb(tmp_path, monkeypatch):
    """wandb records the process's command line and environment metadata in its run file."""
    override = f"+engine.extra_args.api_key={SECRET}"
    monkeypatch.setattr(sys, "argv", ["speclens", "run", "logger=wandb", override])
    _, out = measure(tmp_path, 2, "logger=wandb", override)
    assert offline_runs(out)
    leaked = [p for p in out.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert leaked == []


@pytest.mark.parametrize(
    "override",
    [
        f"+engine.extra_args={{hf_token: {SECRET}}}",
        f"+engine.extra_args={{dtype: half, 'api_key': '{SECRET}'}}",
        f'+engine.extra_args={{"password": "{SECRET}"}}',
    ],
)
def test_a_dict_valued_override_is_redacted_too(override):
    from evals.pipeline.compose import job_dirname
    from speclens.redact import redact

    assert SECRET not in job_dirname(override)
    assert SECRET not in json.dumps(redact({"hydra": {"overrides": {"task": [override, "d=3"]}}}))
    assert "d=3" in json.dumps(redact({"task": [override, "d=3"]}))
