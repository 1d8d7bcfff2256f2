"""Defects an independent probe found, each driven the way a user meets it (runner=fake): refused
sweep jobs, corrupt job profiles, curves vs ranking, paths, unbounded inputs, schedules, replay's
keys and dir, the nightly's history, error.log and the report commands' options."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from evals.pipeline.compose import MAX_REPEATS, MIN_REQUEST_RATE, compose_config, to_run_config
from evals.pipeline.run_job import run
from evals.replay import replay
from reports.curves import collect, safe_name, write_curves
from reports.speedup_ranking import rank
from speclens.errors import ConfigError, MeasurementError
from speclens.file_formats.schedule_file import Mode, check_schedule, read_schedule
from speclens.provenance import Provenance
from tests.unit.conftest import compose_run, fake_overrides

REPO = Path(__file__).resolve().parents[2]
ROWS = [
    {"question_id": f"q{i}", "category": "coding" if i % 2 else "writing", "turns": [f"task {i}", f"more {i}"]}
    for i in range(4)
]
# A target the ranking's guidelines can be computed for.
RANKABLE = {"num_attention_heads": 8, "num_key_value_heads": 1}


def speclens(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "evals.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("speclens: error: ")]


def one_line(status: int, err: str) -> str:
    """A refusal: exit status 2 and one `speclens: error:` line, no traceback."""
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and lines[0].startswith("speclens: error: "), (status, err)
    return lines[0]


def job_dir(sweep: Path, d: int) -> Path:
    return next(p for p in sweep.iterdir() if p.is_dir() and f"d={d}," in f"{p.name},")


def sweep_args(tmp_path: Path, sweep: Path, *extra: str) -> list[str]:
    return [
        "run",
        "-m",
        *fake_overrides(tmp_path, ROWS, **RANKABLE),
        "drafter=ngram",
        "d=1,2",
        "baseline=true",
        f"hydra.sweep.dir={sweep}",
        *extra,
    ]


# -- 1. a refused job is a failed job, and its dir's foreign result is no part of the sweep ---------


def test_a_job_refused_beside_another_configs_result_fails_the_sweep_and_stays_out_of_it(tmp_path):
    sweep = tmp_path / "sweep"
    assert speclens(*sweep_args(tmp_path, sweep), cwd=tmp_path).returncode == 0
    # another configuration's finished run (another n-gram window) where the d=1 job keeps its results
    other = tmp_path / "other"
    assert speclens(*sweep_args(tmp_path, other, "drafter.prompt_lookup_max=7"), cwd=tmp_path).returncode == 0
    foreign = job_dir(sweep, 1)
    shutil.rmtree(foreign)
    shutil.copytree(job_dir(other, 1), foreign)

    again = speclens(*sweep_args(tmp_path, sweep), cwd=tmp_path)
    assert again.returncode == 2, again.stderr[-2000:]
    failures = json.loads((sweep / "failures.json").read_text())
    assert [f["job"] for f in failures] == [foreign.name] and failures[0]["exit_status"] == 2
    assert "already holds a finished run of a different configuration" in failures[0]["error"]
    assert json.loads((foreign / "failure.json").read_text())["error"] == failures[0]["error"]
    # the foreign run is in neither the curves, the ranking, the plan nor the profiles
    assert set(pd.read_csv(sweep / "curves.csv").d) == {2}
    ranking = pd.read_csv(sweep / "ranking.csv")
    assert str(foreign) not in set(ranking.run) and set(ranking.d.dropna()) == {2}
    assert str(foreign) not in (sweep / "serve.json").read_text()
    profiles = json.loads((sweep / "speculation_profile.json").read_text())["profiles"]
    assert {p["d"] for p in profiles} == {2}

    # once the job runs right (force=true overwrites the foreign run), the sweep is whole again
    assert speclens(*sweep_args(tmp_path, sweep, "force=true"), cwd=tmp_path).returncode == 0
    assert not (sweep / "failures.json").exists() and not (foreign / "failure.json").exists()
    assert set(pd.read_csv(sweep / "curves.csv").d) == {1, 2}


def test_a_job_holding_a_newer_speclens_summary_fails_and_the_others_are_still_drawn(tmp_path):
    sweep = tmp_path / "sweep"
    assert speclens(*sweep_args(tmp_path, sweep), cwd=tmp_path).returncode == 0
    summary = job_dir(sweep, 1) / "summary.json"
    summary.write_text(json.dumps(json.loads(summary.read_text()) | {"schema_version": 99}))

    again = speclens(*sweep_args(tmp_path, sweep), cwd=tmp_path)
    assert again.returncode == 2, again.stderr[-2000:]
    failures = json.loads((sweep / "failures.json").read_text())
    assert len(failures) == 1 and "schema version 99 is newer than this speclens reads" in failures[0]["error"]
    # the curves are made from the job that finished, not dropped for the one that cannot be read
    assert set(pd.read_csv(sweep / "curves.csv").d) == {2}


# -- 2. a corrupt job profile: the sweep's profile is rebuilt without it, and it is reported -------


def test_a_corrupt_job_profile_is_reported_and_leaves_no_stale_sweep_profile(tmp_path):
    sweep = tmp_path / "sweep"
    assert speclens(*sweep_args(tmp_path, sweep), cwd=tmp_path).returncode == 0
    corrupt = job_dir(sweep, 1) / "speculation_profile.json"
    corrupt.write_text('{"schema_version": 1, "profiles": [')

    again = speclens(*sweep_args(tmp_path, sweep), cwd=tmp_path)
    assert again.returncode == 2, again.stderr[-2000:]
    [line] = [line for line in error_lines(again.stderr) if "speculation_profile.json" in line]
    assert f"{corrupt} is unreadable" in line and "left out of the sweep's speculation_profile.json" in line
    profiles = json.loads((sweep / "speculation_profile.json").read_text())["profiles"]
    assert {p["d"] for p in profiles} == {2}  # the earlier sweep profile held d=1 too


# -- 3. reports.curves refuses what reports.rank refuses: two runs at one point -------------------


def test_runs_of_two_dtypes_at_one_point_are_two_lines_each_naming_its_dtype(tmp_path):
    """Two runs at one curve point that differ in engine.dtype are neither refused nor pooled:
    each is a line and a ranking table of its own, its setting naming its dtype (issue 56)."""
    root = tmp_path / "sweep"
    for name, dtype in (("bf16", "bfloat16"), ("fp32", "float32")):
        cfg = compose_run(
            *fake_overrides(tmp_path, ROWS, **RANKABLE),
            "drafter=ngram",
            "d=2",
            "baseline=true",
            f"engine.dtype={dtype}",
        )
        run(cfg, root / name, progress=lambda label: None)
    curves = collect(root)
    whole = curves[(curves.domain == "all") & (curves.segment == "all")]
    assert sorted(zip(whole.setting, whole.dtype)) == [
        ("engine.dtype=bfloat16", "bfloat16"),
        ("engine.dtype=float32", "float32"),
    ]
    ranking = rank([root])
    ngram = ranking[(ranking.drafter == "ngram") & (ranking.domain == "all")]
    assert sorted(ngram.setting) == ["engine.dtype=bfloat16", "engine.dtype=float32"]
    assert set(ngram["rank"]) == {1} or set(ngram["rank"]) == {2}  # each ranked in its own table


# -- 4. paths --------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode, key", [((), "hydra.run.dir"), (("-m",), "hydra.sweep.dir")])
@pytest.mark.parametrize(
    "where, said",
    [
        ("afile", "afile is a file, not a folder"),
        ("afile/run", "afile is a file, and no folder can be made under it"),
        ("x" * 300, "is 300 bytes long, and this file system takes at most 255 per name"),
    ],
)
def test_an_output_dir_that_cannot_be_made_is_one_line(tmp_path, monkeypatch, capsys, mode, key, where, said):
    from evals.run import main

    (tmp_path / "afile").write_text("not a folder")
    monkeypatch.chdir(tmp_path)
    status = main([*mode, *fake_overrides(tmp_path, ROWS), f"{key}={tmp_path / where}"])
    line = one_line(status, capsys.readouterr().err)
    assert line.startswith(f"speclens: error: {key}=") and said in line
    assert not list(tmp_path.rglob("stamp.json"))


def test_categories_that_clash_or_run_long_get_files_of_their_own(tmp_path):
    rows = [
        {"question_id": "a", "category": "a/b", "turns": ["one"]},
        {"question_id": "b", "category": "a_b", "turns": ["two"]},
        {"question_id": "c", "category": "c" * 300, "turns": ["three"]},
    ]
    cfg = compose_run(*fake_overrides(tmp_path, rows), "drafter=ngram", "d=2")
    run(cfg, tmp_path / "sweep" / "job", progress=lambda label: None)
    curves = write_curves(tmp_path / "sweep")
    names = {safe_name(domain) for domain in curves.domain.unique()}
    assert len(names) == 4 and all(len(n) <= 64 for n in names)  # all, a/b, a_b, the long one
    assert safe_name("a_b") == "a_b" and safe_name("a/b") != "a_b" and safe_name("coding") == "coding"
    drawn = {p.name for p in (tmp_path / "sweep").glob("curve_*.png")}
    assert drawn == {f"curve_{n}.png" for n in names}


@pytest.mark.parametrize("night", ["../escaped", "/tmp/elsewhere", ".."])
def test_a_night_label_cannot_leave_the_nightly_folder(tmp_path, monkeypatch, capsys, night):
    from evals.nightly import main

    monkeypatch.chdir(tmp_path)
    line = one_line(main([*fake_overrides(tmp_path, ROWS), f"night={night}"]), capsys.readouterr().err)
    assert f"night={night!r}: must name a single folder" in line
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "escaped").exists()


def test_a_nightly_out_under_a_file_is_one_line(tmp_path, capsys):
    from evals.nightly import main

    (tmp_path / "afile").write_text("")
    line = one_line(
        main([*fake_overrides(tmp_path, ROWS), f"out={tmp_path / 'afile' / 'n1'}"]), capsys.readouterr().err
    )
    assert "out=" in line and "is a file, and no folder can be made under it" in line


# -- 5. inputs that would run until killed ---------------------------------------------------------


@pytest.mark.parametrize(
    "override, message",
    [
        (f"repeats={MAX_REPEATS + 1}", f"repeats={MAX_REPEATS + 1}: must be in 1..{MAX_REPEATS}"),
        ("repeats=1000000", f"repeats=1000000: must be in 1..{MAX_REPEATS}"),
        (
            "request_rate=1e-9",
            f"request_rate=1e-09: must be a finite number of requests per second >= {MIN_REQUEST_RATE}",
        ),
    ],
)
def test_unbounded_inputs_are_refused_when_composed(override, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        to_run_config(compose_run("runner=fake", "baseline=true", override))


def test_the_bounds_themselves_are_allowed():
    assert to_run_config(compose_run("baseline=true", f"repeats={MAX_REPEATS}")).repeats == MAX_REPEATS
    assert (
        to_run_config(compose_run("runner=server", f"request_rate={MIN_REQUEST_RATE}")).request_rate == MIN_REQUEST_RATE
    )


def test_a_sweep_with_one_unbounded_job_runs_none(tmp_path, monkeypatch, capsys):
    from evals.run import main

    monkeypatch.chdir(tmp_path)
    status = main(
        [
            "-m",
            *fake_overrides(tmp_path, ROWS),
            "baseline=true",
            "repeats=2,5000",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
        ]
    )
    assert "repeats=5000: must be in 1..100" in one_line(status, capsys.readouterr().err)
    assert not (tmp_path / "sweep").exists()


# -- 6. schedules ----------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", [[1, 4, True], [1, True, 3], [False, 4, 0]])
def test_a_schedule_with_a_boolean_is_refused(entry):
    with pytest.raises(ConfigError, match="holds a boolean"):
        check_schedule([entry], "drafter.schedule=plan.json")


def test_a_plan_from_another_temperature_is_refused(tmp_path):
    plan = tmp_path / "serve.json"
    measured = Provenance(source="measured", runner="vllm", engine="vllm", dtype="float32")
    one = {"winners": [], "schedules": {"ngram": [[1, 64, 3]]}, "schedule_configs": {}, "max_num_seqs": 64}
    plan.write_text(json.dumps(one | {"temperature": 0.0, "provenance": [measured.to_dict()]}))
    assert read_schedule(str(plan), "ngram", "drafter.schedule", measured, Mode(0.0, {})) == [[1, 64, 3]]
    with pytest.raises(
        ConfigError, match=r"has no plan at sampling.temperature=0.7 \(it has plans at: sampling.temperature=0\)"
    ):
        read_schedule(str(plan), "ngram", "drafter.schedule", measured, Mode(0.7, {}))


def test_a_run_on_a_boolean_schedule_is_refused_before_any_engine(tmp_path, engines_started):
    plan = tmp_path / "plan.json"
    plan.write_text("[[1, 4, true]]")
    cfg = compose_run(*fake_overrides(tmp_path, ROWS), "d=1", f"drafter.schedule={plan}")
    with pytest.raises(ConfigError, match=r"\[1, 4, true\] holds a boolean"):
        run(cfg, tmp_path / "run", progress=lambda label: None)
    assert engines_started == []


# -- 7. replay: no key it ignores, no file it did not write ---------------------------------------


@pytest.mark.parametrize(
    "override, key",
    [
        ("baseline=true", "baseline"),
        ("batch_sizes=[1,2]", "batch_sizes"),
        ("repeats=2", "repeats"),
        ("d=5", "d"),
        ("logger=wandb", "logger"),
    ],
)
def test_replay_refuses_the_keys_it_ignores(tmp_path, engines_started, override, key):
    cfg = compose_config([*fake_overrides(tmp_path, ROWS), "d_max=2", override], "replay")
    with pytest.raises(ConfigError, match=rf"evals.replay does not use {key}: it replays D = 1..d_max"):
        replay(cfg, tmp_path / "replay")
    assert engines_started == [] and not (tmp_path / "replay").exists()


def test_replay_refuses_a_key_named_on_its_command_line_even_at_its_default(tmp_path, engines_started):
    cfg = compose_config([*fake_overrides(tmp_path, ROWS), "d_max=2", "d=3"], "replay")
    with pytest.raises(ConfigError, match="evals.replay does not use d:"):
        replay(cfg, tmp_path / "replay", ["d=3"])


def test_replay_never_writes_over_a_sweeps_curves_or_a_runs_files(tmp_path):
    sweep = tmp_path / "sweep"
    cfg = compose_run(*fake_overrides(tmp_path, ROWS), "drafter=ngram", "d=2")
    run(cfg, sweep / "d=2", progress=lambda label: None)
    write_curves(sweep)
    (sweep / "d=2" / "error.log").write_text("an earlier failure's traceback")
    before = {p: p.read_bytes() for p in sweep.rglob("*") if p.is_file()}
    for into in (sweep, sweep / "d=2"):
        with pytest.raises(ConfigError, match="which evals.replay did not write"):
            replay(compose_config([*fake_overrides(tmp_path, ROWS), "d_max=2"], "replay"), into)
    assert {p: p.read_bytes() for p in sweep.rglob("*") if p.is_file()} == before
    # a dir of its own beside the sweep's runs is drawn with them
    replay(compose_config([*fake_overrides(tmp_path, ROWS), "d_max=3"], "replay"), sweep / "replay_ngram")
    curves = write_curves(sweep)
    assert set(curves[curves.domain == "all"].source) == {"fake", "replayed"}  # the fake engine's, said so


# -- 8. the nightly's history= is checked before the suite runs -----------------------------------


@pytest.mark.parametrize(
    "history, said",
    [
        ("not_parquet.parquet", "is not a readable history file"),
        ("afile/history.parquet", "is a file, not a folder"),
        ("a_folder", "is a folder; give history=<a file path>"),
    ],
)
def test_a_bad_history_is_refused_before_any_engine_starts(tmp_path, capsys, engines_started, history, said):
    from evals.nightly import main

    (tmp_path / "not_parquet.parquet").write_text("rows, but not parquet")
    (tmp_path / "afile").write_text("")
    (tmp_path / "a_folder").mkdir()
    line = one_line(
        main([*fake_overrides(tmp_path, ROWS), f"out={tmp_path / 'n1'}", f"history={tmp_path / history}"]),
        capsys.readouterr().err,
    )
    assert said in line and engines_started == [] and not (tmp_path / "n1").exists()


# -- 9. every exit-3 failure leaves error.log; report commands refuse unknown options in one line ---


SCRIPT = {"q0#0": [3, 1, None, 0], "q1#0": [2, [2, 1]], "q2#0": [None, 3, 3]}


def test_a_counter_mismatch_leaves_its_traceback_in_error_log(tmp_path):
    cfg = compose_run(*fake_overrides(tmp_path, ROWS, SCRIPT), "drafter=ngram", "d=3", "runner.counter_error=1")
    with pytest.raises(MeasurementError, match="do not sum to the engine's speculative counters"):
        run(cfg, tmp_path / "run", progress=lambda label: None)
    log = (tmp_path / "run" / "error.log").read_text()
    assert "Traceback" in log and "num_accepted_tokens: records 13 vs engine 14" in log


def test_a_failed_lossless_check_leaves_error_log_with_the_mismatches(tmp_path):
    cfg = compose_run(
        *fake_overrides(tmp_path, ROWS, SCRIPT), "drafter=ngram", "d=3", "baseline=true", 'runner.diverge=["q1#0"]'
    )
    with pytest.raises(MeasurementError, match="lossless check failed"):
        run(cfg, tmp_path / "run", progress=lambda label: None)
    log = (tmp_path / "run" / "error.log").read_text()
    assert log.startswith("lossless check failed") and '"request_id": "q1", "turn": 0' in log
    # run again, the finished run is skipped, and still fails its check (exit 3, not 0)
    with pytest.raises(MeasurementError, match="lossless check failed"):
        run(cfg, tmp_path / "run", progress=lambda label: None)


def test_a_replay_whose_engine_dies_is_a_measurement_failure_with_error_log(tmp_path):
    cfg = compose_config([*fake_overrides(tmp_path, ROWS), "d_max=2", "runner.fail_on=q1"], "replay")
    with pytest.raises(MeasurementError, match="the measurement failed: RuntimeError: fake engine: scripted failure"):
        replay(cfg, tmp_path / "replay")
    assert "scripted failure on request q1" in (tmp_path / "replay" / "error.log").read_text()


def test_a_bug_in_a_sweep_job_keeps_its_traceback_in_the_job_dir(tmp_path):
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import open_dict

    from evals.hydra_app import end_job

    cfg = compose_config(["d=2"], with_hydra=True)
    with open_dict(cfg):
        cfg.hydra.mode = RunMode.MULTIRUN
    hydra_config = HydraConfig.instance()
    saved = hydra_config.cfg
    hydra_config.set_config(cfg)
    try:
        end_job(KeyError("no such column"), tmp_path / "job")
    finally:
        hydra_config.cfg = saved
    failure = json.loads((tmp_path / "job" / "failure.json").read_text())
    assert failure["exit_status"] == 3 and failure["error"].endswith("(traceback in error.log)")
    assert "KeyError: 'no such column'" in (tmp_path / "job" / "error.log").read_text()


@pytest.mark.parametrize(
    "module",
    ["reports.build", "reports.compare", "reports.curves", "reports.rank", "evals.drafters", "evals.embedded_target"],
)
def test_report_commands_refuse_an_unknown_option_in_one_line(tmp_path, capsys, module):
    import importlib

    argv = {"reports.compare": [str(tmp_path), str(tmp_path)], "evals.drafters": [], "evals.embedded_target": []}.get(
        module, [str(tmp_path)]
    )
    line = one_line(importlib.import_module(module).main([*argv, "--bogus"]), capsys.readouterr().err)
    assert f"python -m {module}: unrecognized arguments: --bogus" in line


def test_report_commands_refuse_an_out_dir_under_a_file(tmp_path, capsys):
    from reports.curves import main as curves_main
    from reports.rank import main as rank_main

    (tmp_path / "afile").write_text("")
    for main in (curves_main, rank_main):
        line = one_line(main([str(tmp_path), "--out", str(tmp_path / "afile" / "out")]), capsys.readouterr().err)
        assert "--out=" in line and "is a file, and no folder can be made under it" in line
