"""Bad input fails before any engine starts, naming the key and what to change."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evals.pipeline.run_job import run
from speclens.errors import ConfigError, SpeclensError
from tests.unit.conftest import compose_run, fake_overrides, write_checkpoint

REPO = Path(__file__).resolve().parents[2]
ROWS = [{"question_id": 1, "category": "qa", "turns": ["what is two plus two"]}]


@pytest.fixture(autouse=True)
def no_engine_starts(monkeypatch):
    """Every case here must be refused before an engine starts."""

    def never(*args, **kwargs):
        raise AssertionError("an engine was started despite invalid input")

    monkeypatch.setattr("runners.fake_engine.FakeEngine.__init__", never)


def attempt(tmp_path: Path, *overrides: str, rows=ROWS):
    cfg = compose_run(*fake_overrides(tmp_path, rows), *overrides)
    return run(cfg, tmp_path / "run", progress=lambda label: None)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["d=0"], r"d=0: must be >= 1"),
        (["seed=-1"], r"seed=-1: must be >= 0"),
        (["sampling.temperature=nan"], r"sampling.temperature=nan: must be a finite number >= 0"),
        (["sampling.temperature=inf"], r"sampling.temperature=inf: must be a finite number >= 0"),
        (["engine.max_num_seqs=0"], r"engine.max_num_seqs=0: must be >= 1"),
        (["engine.tensor_parallel_size=0"], r"engine.tensor_parallel_size=0: must be >= 1"),
        (["engine.pipeline_parallel_size=-2"], r"engine.pipeline_parallel_size=-2: must be >= 1"),
        (["drafter=suffix", "d=30"], r"d=30 is above what drafter=suffix allows \(at most 24\)"),
        (["d=129"], r"at most 128"),
        (["drafter=draft_model"], r"drafter=draft_model needs drafter.model="),
        (["drafter=eagle3", "drafter.model=/nonexistent/head"], r"drafter.model=/nonexistent/head: no such checkpoint"),
        (["dataset.num_requests=0"], r"dataset.num_requests=0: must be >= 1"),
        (["sampling.temperature=-0.5"], r"sampling.temperature=-0.5: must be a finite number >= 0"),
        (["dataset.path=/no/such.jsonl"], r"dataset.path=/no/such.jsonl: no such file"),
        (
            ["drafter=ngram", "drafter.prompt_lookup_min=4", "drafter.prompt_lookup_max=2"],
            r"prompt_lookup_min <= prompt_lookup_max",
        ),
    ],
)
def test_invalid_settings_name_the_key(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        attempt(tmp_path, *overrides)


def test_draft_vocabulary_must_match_target(tmp_path):
    draft = write_checkpoint(tmp_path / "draft", vocab_size=55)
    with pytest.raises(ConfigError, match=r"vocab_size=55 but target.model=.* has vocab_size=100"):
        attempt(tmp_path, "drafter=draft_model", f"drafter.model={draft}")


def test_eagle_head_width_must_match_target(tmp_path):
    head = write_checkpoint(tmp_path / "head", hidden_size=8, architectures=["LlamaForCausalLMEagle3"])
    with pytest.raises(ConfigError, match=r"hidden_size=8 but target.model=.* has hidden_size=16"):
        attempt(tmp_path, "drafter=eagle3", f"drafter.model={head}")


def test_max_model_len_above_the_context_window_is_refused(tmp_path):
    write_checkpoint(tmp_path / "target", max_position_embeddings=512)
    with pytest.raises(
        ConfigError,
        match=r"engine.max_model_len=4096 is above target.model's context window \(max_position_embeddings=512\)",
    ):
        attempt(tmp_path, "engine.max_model_len=4096")


def test_folder_without_config_is_not_a_checkpoint(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"has no config.json"):
        attempt(tmp_path, "drafter=draft_model", f"drafter.model={tmp_path / 'empty'}")


def test_rows_lacking_fields_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"row 1 lacks category, turns"):
        attempt(tmp_path, rows=[{"question_id": 1}])


def test_too_long_prompts_say_how_many_and_what_to_change(tmp_path):
    rows = ROWS + [{"question_id": 2, "category": "qa", "turns": ["word " * 50]}]
    with pytest.raises(
        ConfigError,
        match=r"1 of 2 prompts do not fit engine.max_model_len=40: the longest needs 62 tokens.*Raise engine.max_model_len to at least 62",
    ):
        attempt(tmp_path, "engine.max_model_len=40", "sampling.max_tokens=10", rows=rows)


def test_missing_mandatory_value_names_the_key(tmp_path):
    cfg = compose_run("runner=fake", "target=custom")
    with pytest.raises(SpeclensError, match=r"target.model has no value"):
        run(cfg, tmp_path, progress=lambda label: None)


def run_cli(module: str, *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The command failed with exit status 2 and said why in one line, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("speclens: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.mark.parametrize(
    "module, args, message",
    [
        # a drafter is chosen by its name alone: its config has no `name` to contradict it
        (
            "evals.run",
            ["drafter=ngram", "drafter.name=suffix"],
            "drafter.name: no such key in NgramConfig (its keys: schedule, prompt_lookup_min, prompt_lookup_max).",
        ),
        ("evals.run", ["logger=wandbx"], "logger=wandbx is unknown; choose one of none, wandb."),
        (
            "evals.run",
            ["dataset=long_context", "dataset.tier=lowentropy"],
            "dataset.tier='lowentropy' is unknown; choose one of low_entropy, mixed, high_entropy.",
        ),
        ("evals.run", ["drafter=eagle4"], "drafter=eagle4 is unknown; choose one of "),
        (
            "evals.run",
            ["drafter=ngram", "drafter.promt_lookup_min=3"],
            "drafter.promt_lookup_min: no such key in NgramConfig",
        ),
        ("evals.run", ["+sampling.max_tokenz=5"], "unknown key sampling.max_tokenz (not a key of SamplingConfig"),
        (
            "evals.run",
            ["engine.dtype=float64"],
            "engine.dtype: Invalid value 'float64', expected one of [auto, half, float16, bfloat16, float, float32]",
        ),
        (
            "evals.run",
            ["drafter=eagle3", "drafter.sample_method=nucleus"],
            "drafter.sample_method: Invalid value 'nucleus', expected one of [greedy, probabilistic]",
        ),
        # every job of a sweep is checked before the first one runs
        (
            "evals.run",
            ["-m", "d=1,2", "dataset=long_context", "dataset.count_with=target,o100k"],
            "dataset.count_with: Invalid value 'o100k', expected one of [target, o200k]",
        ),
        ("evals.replay", ["runner=fakes"], "runner=fakes is unknown; choose one of fake, server, vllm."),
        (
            "evals.selfcheck",
            ["drafter.sample_method=maybe"],
            "drafter.sample_method: Invalid value 'maybe', expected one of [greedy, probabilistic]",
        ),
        ("evals.nightly", ["engine.max_num_seqz=3"], "engine.max_num_seqz: no such key in EngineConfig"),
        ("evals.guidelines", ["target=nope"], "target=nope is unknown; choose one of custom, smollm2_135m."),
    ],
)
def test_cli_refuses_bad_input_in_one_line_before_any_engine(tmp_path, monkeypatch, capsys, module, args, message):
    # the command's own main(argv), as `python -m` calls it, from an empty folder: whatever it
    # writes lands under tmp_path (refusals inside a Hydra job run as a real process below)
    monkeypatch.chdir(tmp_path)
    status = importlib.import_module(module).main(list(args))
    err = capsys.readouterr().err
    line = one_line_error(subprocess.CompletedProcess(args, status, "", err))
    assert message in line
    # nothing was measured
    assert not list(tmp_path.rglob("stamp.json"))


def test_a_refusal_inside_a_hydra_job_is_one_line_too(tmp_path):
    line = one_line_error(run_cli("evals.replay", "runner=server", f"hydra.run.dir={tmp_path / 'r'}", cwd=tmp_path))
    assert "runner=server cannot replay; measure each D with" in line and not (tmp_path / "r").exists()


def test_cli_error_exits_2_with_message(tmp_path):
    line = one_line_error(run_cli("evals.run", "d=0", "runner=fake", f"hydra.run.dir={tmp_path}"))
    assert "speclens: error: d=0" in line


def test_report_commands_refuse_a_missing_dir_in_one_line(tmp_path):
    for module in ("reports.build", "reports.curves", "reports.rank"):
        assert "no such folder" in one_line_error(run_cli(module, str(tmp_path / "nothing")))


def test_no_report_command_creates_its_output_dir_before_its_input_is_valid(tmp_path, capsys):
    from reports.curves import main as curves_main
    from reports.rank import main as rank_main

    for main in (curves_main, rank_main):
        assert main([str(tmp_path / "nothing"), "--out", str(tmp_path / "new")]) == 2
        assert not (tmp_path / "new").exists()


QUIET_SCRIPT = """
import os, sys
from pathlib import Path
from speclens.console import console, quiet
log = Path(sys.argv[1])
with quiet(log, verbose=sys.argv[2] == "1"):
    print("engine says hello")
    print("FutureWarning: something", file=sys.stderr)
    os.write(2, b"native library message\\n")
    console().write("speclens progress\\n")
    if sys.argv[3] == "1":
        raise SystemExit("speclens: error: the engine failed")
print("result table")
"""


@pytest.mark.parametrize("verbose,fail", [(False, False), (True, False), (False, True)])
def test_a_quiet_run_keeps_engine_output_in_its_log(tmp_path, verbose, fail):
    log = tmp_path / "engine.log"
    proc = subprocess.run(
        [sys.executable, "-c", QUIET_SCRIPT, str(log), str(int(verbose)), str(int(fail))],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    noise = ("engine says hello", "FutureWarning: something", "native library message")
    shown = proc.stdout + proc.stderr
    assert "speclens progress" in shown
    if verbose:
        assert all(n in shown for n in noise) and not log.exists()
        return
    assert all(n in log.read_text() for n in noise)
    if fail:  # the log's tail is shown with the failure
        assert proc.stderr.startswith("speclens progress") and "the engine's log" in proc.stderr
        assert all(n in proc.stderr for n in noise) and "result table" not in proc.stdout
    else:
        assert not any(n in shown for n in noise) and proc.stdout == "result table\n"
