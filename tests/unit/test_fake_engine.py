"""runner=fake drives every command end to end without vLLM: run (as a command and as a sweep),
replay, selfcheck, through the `speclens` front door too."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

from evals.cli import COMMANDS
from evals.cli import main as speclens_main
from evals.pipeline.compose import compose_config
from evals.pipeline.run_job import run
from evals.replay import replay
from evals.selfcheck import selfcheck
from speclens.errors import ConfigError
from speclens.file_formats.records import read_parquet, write_parquet
from speclens.file_formats.summary_file import read_replay, read_summary
from tests.unit.conftest import fake_overrides, write_checkpoint

REPO = Path(__file__).resolve().parents[2]
ROWS = [
    {"question_id": f"q{i}", "category": "coding" if i % 2 else "writing", "turns": [f"task {i}", f"more {i}"]}
    for i in range(4)
]


def speclens(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "evals.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_a_sweep_runs_every_job_and_writes_its_curves_then_resumes(tmp_path):
    sweep = tmp_path / "sweep"
    args = ["run", "-m", *fake_overrides(tmp_path, ROWS), "drafter=ngram,suffix", "d=1,3", f"hydra.sweep.dir={sweep}"]
    first = speclens(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    summaries = [read_summary(p.parent) for p in sweep.rglob("summary.json")]
    assert sorted((s.drafter, s.d) for s in summaries) == [("ngram", 1), ("ngram", 3), ("suffix", 1), ("suffix", 3)]
    assert {s.runner for s in summaries} == {"fake"}
    curves = pd.read_csv(sweep / "curves.csv")
    assert set(zip(curves.drafter, curves.d)) == {("ngram", 1), ("ngram", 3), ("suffix", 1), ("suffix", 3)}
    # the pattern [2, 0, 3, None, 1] capped at D: D=3 accepts more per drafted step than D=1
    pooled = curves[curves.domain == "all"].set_index(["drafter", "d"]).al
    assert 1 < pooled[("ngram", 1)] < pooled[("ngram", 3)] <= 4
    # the sweep's acceptance profiles: every job's, for all prompts and each domain, AL as in the curves
    profiles = json.loads((sweep / "speculation_profile.json").read_text())["profiles"]
    assert len(profiles) == 4 * 3
    for p in profiles:
        assert p["al"] == pytest.approx(
            curves.set_index(["drafter", "d", "domain"]).al[(p["drafter"], p["d"], p["domain"])]
        )
    again = speclens(*args, cwd=tmp_path)
    assert again.returncode == 0 and again.stdout.count("already holds this run; skipped") == 4


def test_replay_is_exact_for_a_draft_model_and_an_eagle3_head_and_estimated_for_medusa(tmp_path):
    draft = write_checkpoint(tmp_path / "draft")
    base = fake_overrides(tmp_path, ROWS)
    curves = replay(
        compose_config([*base, "drafter=draft_model", f"drafter.model={draft}", "d_max=4"], "replay"),
        tmp_path / "exact",
    )
    pooled = curves[curves.domain == "all"].set_index("d")
    assert list(pooled.index) == [1, 2, 3, 4] and set(pooled.source) == {"replayed"}
    # the fake's draft predicts every token but every fourth: acceptance grows with D, then saturates
    assert 1 < pooled.al[1] <= pooled.al[2] <= pooled.al[3] <= pooled.al[4] < 5
    record = read_replay(tmp_path / "exact")
    assert (record.schema_version, record.summary.drafter, record.summary.replay) == (3, "draft_model", "exact")
    assert record.summary.near_ties is None  # no head computed

    # the fake head's chains miss the same positions as the fake draft (every fourth token): the
    # same curve, replayed from the head's chains and each step's start as a run at that D has it
    head = write_checkpoint(tmp_path / "head", architectures=["LlamaForCausalLMEagle3"])
    chained = replay(
        compose_config([*base, "drafter=eagle3", f"drafter.model={head}", "d_max=4"], "replay"), tmp_path / "eagle3"
    )
    by_d = chained[chained.domain == "all"].set_index("d")
    assert set(by_d.source) == {"replayed"} and by_d.al.to_dict() == pytest.approx(pooled.al.to_dict())
    summary = read_replay(tmp_path / "eagle3").summary
    assert summary.replay == "exact" and summary.near_ties == 0  # the fake head's margins are all 1.0

    heads = write_checkpoint(tmp_path / "med", architectures=["MedusaModel"], model_type="medusa", num_heads=3)
    curves = replay(
        compose_config([*base, "drafter=medusa", f"drafter.model={heads}", "d_max=3"], "replay"),
        tmp_path / "estimated",
    )
    pooled = curves[curves.domain == "all"].set_index("d")
    steps = read_parquet(tmp_path / "estimated" / "measured_d3" / "steps.parquet")
    # D = d_max is the measured run itself; D = 1 accepts one token wherever the run accepted any
    assert pooled.al[3] == pytest.approx(read_summary(tmp_path / "estimated" / "measured_d3").al)
    assert pooled.al[1] == pytest.approx(1 + (steps.num_accepted > 0).mean())
    assert list(pooled.source) == ["estimated", "estimated", "measured"]


def test_an_exact_replay_gives_curves_per_segment(tmp_path):
    draft = write_checkpoint(tmp_path / "draft")
    base = fake_overrides(tmp_path, ROWS)
    curves = replay(
        compose_config(
            [*base, "drafter=draft_model", f"drafter.model={draft}", "d_max=3", "reasoning.end=w104"], "replay"
        ),
        tmp_path / "exact",
    )
    assert set(curves.segment) == {"all", "thinking", "answer"}
    for segment in ("thinking", "answer"):
        rows = curves[(curves.domain == "all") & (curves.segment == segment)].set_index("d")
        assert list(rows.index) == [1, 2, 3] and all(1 <= al <= 1 + d for d, al in rows.al.items())
    # the whole output's rows are those a replay without the boundary gives
    plain = replay(
        compose_config([*base, "drafter=draft_model", f"drafter.model={draft}", "d_max=3"], "replay"),
        tmp_path / "plain",
    )
    whole = curves[curves.segment == "all"].reset_index(drop=True)
    assert whole.al.tolist() == plain.al.tolist() and whole.tokens_per_step.tolist() == plain.tokens_per_step.tolist()


@pytest.mark.parametrize("pattern, outcome", [("[3]", [True, True]), ("[3,1]", [False, False])])
def test_selfcheck_passes_only_when_every_draft_is_accepted(tmp_path, pattern, outcome):
    results = selfcheck([*fake_overrides(tmp_path, ROWS), f"runner.pattern={pattern}"], tmp_path / "checks")
    assert [r.passed for r in results[:2]] == outcome
    assert "AL 4.0000 (expected exactly 4)" in results[0].detail or not outcome[0]
    # the scripted engine is deterministic: the same records twice, and no spread at its bf16
    names = [(r.name, r.verdict) for r in results[2:]]
    assert names == [
        ("same records twice (float32)", "PASS"),
        ("a launched server's records (float32)", "SKIP"),
        ("run-to-run spread at bfloat16", "PASS"),
    ]
    assert results[2].detail == "8/8 turns with the same tokens and accepted counts"
    assert (
        "; 0/8 turns part between the two; in-process, 0 output(s) part from plain decoding at near-ties and 0 "
        "beyond rounding" in results[4].detail
    )


def test_selfcheck_finds_records_that_part_between_two_runs(tmp_path, monkeypatch):
    from evals import selfcheck as module

    overrides = fake_overrides(tmp_path, ROWS)
    real_run = module.run

    def second_run_differs(cfg, out_dir):  # the repeat accepts one token less at its first step
        summary = real_run(cfg, out_dir)
        if out_dir.name == "repeat":
            steps = read_parquet(out_dir / "steps.parquet")
            steps.loc[steps.index[0], "num_accepted"] -= 1
            write_parquet(steps, out_dir / "steps.parquet")
        return summary

    monkeypatch.setattr(module, "run", second_run_differs)
    repeat = next(r for r in selfcheck(overrides, tmp_path / "checks") if r.name.startswith("same records"))
    assert repeat.verdict == "FAIL" and repeat.detail.startswith("7/8 turns with the same tokens and accepted counts")


def test_the_front_door_lists_every_command_and_reaches_each(capsys):
    assert speclens_main(["--help"]) == 0
    listed = capsys.readouterr().out
    assert all(f"  {name} " in listed and f"python -m {module}" in listed for name, (module, _) in COMMANDS.items())
    # every command module (`python -m` runs it) is behind the front door (issue 56: quantize was not)
    root = Path(__file__).resolve().parents[2]
    runnable = {
        f"{path.parent.name}.{path.stem}"
        for package in ("evals", "reports")
        for path in (root / package).glob("*.py")
        if 'if __name__ == "__main__"' in path.read_text()
    }
    assert runnable - {"evals.cli"} == {module for module, _ in COMMANDS.values()}
    assert speclens_main(["nonsense"]) == 2 and "unknown command 'nonsense'" in capsys.readouterr().err
    assert speclens_main(["drafters", "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("drafter,checkpoint,replay")


def test_the_configured_kv_cache_wins_over_the_environment(monkeypatch):
    from runners.vllm_engine import set_process_env

    for name in ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_LOGGING_LEVEL"):  # restored after the test
        monkeypatch.setenv(name, os.environ.get(name, ""))
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "9")
    set_process_env(2)
    assert os.environ["VLLM_CPU_KVCACHE_SPACE"] == "2"


def test_a_failing_sweep_job_does_not_stop_the_others(tmp_path):
    sweep = tmp_path / "sweep"
    proc = speclens(
        "run",
        "-m",
        *fake_overrides(tmp_path, ROWS),
        "drafter=ngram",
        "d=0,1,2",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert sorted(read_summary(p.parent).d for p in sweep.rglob("summary.json")) == [1, 2]
    failures = json.loads((sweep / "failures.json").read_text())
    assert [f["error"] for f in failures] == ["d=0: must be >= 1."] and failures[0]["exit_status"] == 2
    assert "sweep job" in proc.stderr and "d=0: must be >= 1." in proc.stderr
    assert set(pd.read_csv(sweep / "curves.csv").d) == {1, 2}
    # an engine that dies in every job: each job's failure is collected, the sweep exits 3
    crashed = speclens(
        "run",
        "-m",
        *fake_overrides(tmp_path, ROWS),
        "drafter=ngram",
        "d=3,4",
        "runner.fail_on=q1",
        f"hydra.sweep.dir={tmp_path / 'crashed'}",
        cwd=tmp_path,
    )
    assert crashed.returncode == 3, crashed.stderr[-2000:]
    assert len(json.loads((tmp_path / "crashed" / "failures.json").read_text())) == 2


def test_replay_keeps_a_finished_replay_refuses_another_config_and_redacts(tmp_path, capsys):
    secret = "hf_do-not-store-0815"
    base = [
        *fake_overrides(tmp_path, ROWS),
        "drafter=eagle3",
        f"drafter.model={write_checkpoint(tmp_path / 'h', architectures=['LlamaForCausalLMEagle3'])}",
        f"+engine.extra_args.hf_token={secret}",
    ]
    out = tmp_path / "replay"
    replay(compose_config([*base, "d_max=2"], "replay"), out)
    assert not [p for p in out.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    first = (out / "replay.json").read_bytes()
    replay(compose_config([*base, "d_max=2"], "replay"), out)
    assert (
        "already holds this replay; skipped" in capsys.readouterr().out and (out / "replay.json").read_bytes() == first
    )
    with pytest.raises(ConfigError, match="already holds a replay of a different configuration; force=true"):
        replay(compose_config([*base, "d_max=3"], "replay"), out)
    replay(compose_config([*base, "d_max=3", "force=true"], "replay"), out)
    assert read_replay(out).summary.d_max == 3 and not (out / "measured_d2").exists()


def test_the_replay_command_leaves_no_secret_in_its_dir(tmp_path):
    secret = "hf_cli-secret-4242"
    out = tmp_path / "replay"
    head = write_checkpoint(tmp_path / "h", architectures=["LlamaForCausalLMEagle3"])
    proc = speclens(
        "replay",
        *fake_overrides(tmp_path, ROWS),
        "drafter=eagle3",
        f"drafter.model={head}",
        "d_max=2",
        f"+engine.extra_args.hf_token={secret}",
        f"hydra.run.dir={out}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (out / "replay.json").is_file() and not (out / ".hydra").exists()
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_the_slurm_launcher_settings_run_a_sweep_through_submitit(tmp_path):
    """hydra/launcher=slurm_local: the Slurm launcher's settings with submitit's local executor, jobs
    as processes of their own; a failed job is collected from its process as from any other."""
    sweep = tmp_path / "sweep"
    proc = speclens(
        "run",
        "-m",
        "hydra/launcher=slurm_local",
        *fake_overrides(tmp_path, ROWS),
        "drafter=ngram",
        "d=0,2",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert [read_summary(p.parent).d for p in sweep.rglob("summary.json")] == [2]
    assert [f["error"] for f in json.loads((sweep / "failures.json").read_text())] == ["d=0: must be >= 1."]
    assert list((sweep / ".submitit").rglob("*_result.pkl"))  # the jobs ran through submitit


@pytest.fixture
def ray_cluster(tmp_path):
    """A one-node Ray cluster on 127.0.0.1 that the test starts (no dashboard, no GPUs) and stops:
    `ray start --block` in a session of its own, so that stopping it stops only what it started."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray = Path(sys.executable).parent / "ray"
    temp = Path(tempfile.mkdtemp(prefix="ray-"))  # short: Ray's socket paths must fit 107 bytes
    log = open(tmp_path / "ray.log", "w")
    head = subprocess.Popen(
        [
            str(ray),
            "start",
            "--head",
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            "--num-cpus=2",
            "--num-gpus=0",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={temp}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while subprocess.run([str(ray), "status", f"--address={address}"], capture_output=True).returncode != 0:
            assert head.poll() is None and time.monotonic() < deadline, (tmp_path / "ray.log").read_text()[-2000:]
            time.sleep(1)
        yield address
    finally:
        os.killpg(head.pid, signal.SIGINT)  # as Ctrl-C would: `ray start --block` stops its processes
        try:
            head.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def test_a_sweep_runs_on_a_ray_cluster(tmp_path, ray_cluster):
    """hydra/launcher=ray_cluster attaches to a running cluster (RAY_ADDRESS) and runs each job as a
    Ray task, in a worker process of the cluster's."""
    sweep = tmp_path / "sweep"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "evals.cli",
            "run",
            "-m",
            "hydra/launcher=ray_cluster",
            "hydra.launcher.ray.remote.num_gpus=0",
            "hydra.launcher.ray.remote.num_cpus=1",
            *fake_overrides(tmp_path, ROWS),
            "drafter=ngram",
            "d=1,2",
            f"hydra.sweep.dir={sweep}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO), "RAY_ADDRESS": ray_cluster},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(read_summary(p.parent).d for p in sweep.rglob("summary.json")) == [1, 2]
    assert f"Using address {ray_cluster} set in the environment variable RAY_ADDRESS" in proc.stderr
    assert proc.stdout.count("(_run_job pid=") >= 2  # printed from the cluster's worker processes
    assert (sweep / "curves.csv").is_file()


def test_each_record_granularity_gives_the_same_al_overall_and_per_domain(tmp_path):
    """The same engine behaviour reported per step, per request or only as counters (one domain at
    a time): AL is the same arithmetic at every granularity; what a coarser one cannot know is absent."""
    rows = [
        {"question_id": f"q{i}", "category": "coding" if i % 2 else "writing", "turns": [f"task {i}"]} for i in range(6)
    ]
    # Request q<i>: accepts (i % 4), an undrafted step, then accepts 1; D = 3.
    script = {f"q{i}#0": [i % 4, None, 1] for i in range(6)}
    summaries = {}
    for granularity in ("step", "request", "domain"):
        out = tmp_path / granularity
        overrides = fake_overrides(tmp_path, rows, script) + [
            "drafter=ngram",
            "d=3",
            "batch_sizes=[2]",
            f"runner.record_granularity={granularity}",
        ]
        summaries[granularity] = run(compose_config(overrides), out, progress=lambda label: None)
    # all: 12 drafted steps accepting 0+1+2+3+0+1 and six 1s = 13 -> AL 1 + 13/12
    # coding (q1, q3, q5): 1+3+1 + 3 = 8 over 6 -> 1 + 8/6; writing (q0, q2, q4): 0+2+0 + 3 = 5 over 6
    for granularity, s in summaries.items():
        assert s.record_granularity == granularity
        assert s.al == pytest.approx(1 + 13 / 12)
        assert s.by_domain["coding"].al == pytest.approx(1 + 8 / 6)
        assert s.by_domain["writing"].al == pytest.approx(1 + 5 / 6)
        assert s.operating_points[0].by_domain["coding"].al == pytest.approx(1 + 8 / 6)
        assert s.n_steps == 12 and s.vllm_counters.num_drafts == 12
    step, request, domain = summaries["step"], summaries["request"], summaries["domain"]
    assert request.al_ci95 == step.al_ci95 and request.al_request_weighted == step.al_request_weighted
    assert request.tokens_per_step == step.tokens_per_step
    # per position: the counters count it, per-request totals cannot
    assert domain.per_position_acceptance == step.per_position_acceptance == pytest.approx([10 / 12, 2 / 12, 1 / 12])
    assert request.per_position_acceptance is None and request.acceptance_histogram is None
    assert domain.al_ci95 is None and domain.tokens_per_step is None and step.al_ci95 is not None
    requests = read_parquet(tmp_path / "domain" / "requests.parquet")
    assert requests.drafted_steps.isna().all() and requests.output_tokens.sum() == 6 * 5 + 7  # prefill, a+1, 1, 2
    assert (
        read_parquet(tmp_path / "request" / "requests.parquet").set_index("request_id").loc["q3", "num_accepted"] == 4
    )
    assert read_parquet(tmp_path / "request" / "steps.parquet").empty


def test_a_request_granularity_miscount_is_caught(tmp_path):
    from speclens.errors import MeasurementError

    rows = [{"question_id": "q0", "category": "coding", "turns": ["task"]}]
    overrides = fake_overrides(tmp_path, rows, {"q0#0": [2, 1]}) + [
        "drafter=ngram",
        "d=3",
        "runner.record_granularity=request",
        "runner.counter_error=1",
    ]
    with pytest.raises(
        MeasurementError,
        match=r"per-request totals at batch size 1 do not sum to the engine's "
        r"speculative counters \(num_accepted_tokens: records 3 vs engine 4\)",
    ):
        run(compose_config(overrides), tmp_path / "run", progress=lambda label: None)


def test_each_engine_is_warmed_up_untimed_and_uncounted(tmp_path):
    """A warm-up request (drafting, as the pattern makes every request draft) runs on each engine
    before its pass: its time is recorded apart, and neither its steps nor its counters enter the
    pass (the counter check would fail if they did)."""
    rows = [{"question_id": f"q{i}", "category": "coding", "turns": [f"task {i}"]} for i in range(3)]
    overrides = fake_overrides(tmp_path, rows) + [
        "drafter=ngram",
        "d=3",
        "batch_sizes=[1]",
        "baseline=true",
        "runner.step_sleep_s=0.01",
    ]
    summary = run(compose_config(overrides), tmp_path / "run", progress=lambda label: None)
    engine_steps = read_parquet(tmp_path / "run" / "engine_steps.parquet")
    requests = read_parquet(tmp_path / "run" / "requests.parquet")
    # one request in flight: each engine step is one target pass of one of the prompts' requests
    assert len(engine_steps[engine_steps["mode"] == "speculative"]) == requests.target_steps.sum()
    # the speculative and the plain engine, each warmed up with a prefill and at least one decode step
    assert summary.timing.warmup_s >= 2 * 2 * 0.01
