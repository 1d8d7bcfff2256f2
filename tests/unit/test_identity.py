"""Issue 66: nothing is read without what it is, and every decision is taken on one identity. The
fake engine's runs under several identities (dtypes, an FP8 KV cache, synthetic acceptance, a run
rewritten as a measured vLLM one) through the public reader, the summary reader, the schedule
reader and the nightly gate."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import speclens
from evals.pipeline.run_job import run
from evals.run import main as run_main
from reports.rank import main as rank_main
from speclens.errors import CorruptRecord, SpeclensError
from speclens.file_formats.summary_file import read_summary
from speclens.provenance import Provenance
from tests.unit.conftest import compose_run, fake_overrides
from tests.unit.test_compare_nightly import ROWS, measure, night, script
from tests.unit.test_hostile_input import exit_status


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    """One sweep folder: the fake engine under bfloat16 and float32, an FP8 cache, and synthetic rates."""
    tmp = tmp_path_factory.mktemp("mixed")
    root = tmp / "sweep"
    measure(tmp, root / "bf16", {}, ROWS, "engine.dtype=bfloat16")
    measure(tmp, root / "f32", {r["question_id"]: 1 for r in ROWS}, ROWS, "engine.dtype=float32")
    measure(tmp, root / "fp8", {r["question_id"]: 0 for r in ROWS}, ROWS, "engine.kv_cache_dtype=fp8")
    measure(tmp, root / "synthetic", {}, ROWS, "acceptance.synthetic=[0.5,0.25,0.1]")
    return root


def test_a_sweeps_frames_carry_each_runs_identity_and_a_pool_of_identities_is_refused(mixed):
    sweep = speclens.read_sweep(mixed)
    steps = sweep.steps
    for name in speclens.IDENTITY_COLUMNS:
        assert name in steps.columns and name in sweep.requests.columns and steps[name].notna().all()
    by_run = {r.path.parent.name: r for r in sweep.runs}
    assert by_run["synthetic"].provenance.source == "synthetic" and by_run["bf16"].provenance.source == "fake"
    assert by_run["f32"].provenance.dtype == "float32" and by_run["fp8"].provenance.setting == "kv_cache_dtype=fp8"
    # docs/api.md's grouping without the identity: refused, naming what is pooled
    with pytest.raises(
        SpeclensError, match=r"pool runs of different identities \(source: fake, synthetic; engine.dtype"
    ):
        steps.groupby(["drafter", "d", "domain"]).apply(speclens.al)
    # with it: each group is one run's, and its AL is that run's own figure for the domain
    grouped = steps.groupby(["drafter", "d", "domain", *speclens.IDENTITY_COLUMNS]).apply(speclens.al)
    assert len(grouped) == 4 * 2  # four runs, two domains each
    for one in sweep.runs:
        identity = tuple(one.provenance.columns().values())
        for domain in ("coding", "writing"):
            assert grouped[("ngram", 3, domain, *identity)] == pytest.approx(one.summary.by_domain[domain].al)
    assert "fake (scripted engine, runner=fake)" in repr(by_run["bf16"])


def rewrite(run_dir: Path, change) -> None:
    path = run_dir / "summary.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_a_summary_that_cannot_say_what_it_is_is_refused_never_read_as_measured_vllm(mixed, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(mixed / "bf16" / "ngram", run_dir)
    rewrite(run_dir, lambda d: d.pop("provenance"))
    with pytest.raises(CorruptRecord, match=r"field provenance is required since schema version 11"):
        read_summary(run_dir)
    rewrite(run_dir, lambda d: d.pop("runner"))
    with pytest.raises(CorruptRecord, match=r"field runner is required since schema version 3"):
        speclens.read_run(run_dir)
    # written before provenance (schema 10): derived from the stamp beside it, the fake engine's
    rewrite(run_dir, lambda d: d.update(schema_version=10, runner="fake"))
    assert read_summary(run_dir).provenance == Provenance(
        source="fake", runner="fake", engine="fake", dtype="bfloat16", batch_sizes=[10]
    )
    (run_dir / "stamp.json").unlink()
    with pytest.raises(CorruptRecord, match=r"predates its `provenance` and no stamp.json lies beside it"):
        read_summary(run_dir)


@pytest.fixture(scope="module")
def ranked(tmp_path_factory) -> Path:
    """A sweep ranked under two settings: n-gram pays under the defaults (every draft accepted) and
    never under an FP8 cache (none accepted)."""
    tmp = tmp_path_factory.mktemp("ranked")
    root = tmp / "sweep"
    for name, accepted, extra in (("auto", 3, ()), ("fp8", 0, ("engine.kv_cache_dtype=fp8",))):
        overrides = fake_overrides(tmp, ROWS, script({r["question_id"]: accepted for r in ROWS}), name=name)
        cfg = compose_run(*overrides, "drafter=ngram", "d=3", "baseline=true", "batch_sizes=[1]", *extra)
        run(cfg, root / name, progress=lambda label: None)
    assert rank_main([str(root)]) == 0
    return root


def schedule_run(ranked: Path, tmp_path: Path, *extra: str) -> list[str]:
    cfg = compose_run(
        *fake_overrides(tmp_path, ROWS), "drafter=ngram", "d=3", f"drafter.schedule={ranked / 'serve.json'}", *extra
    )
    run(cfg, tmp_path / "run", progress=lambda label: None)
    return read_summary(tmp_path / "run").schedule


def test_a_schedule_is_taken_from_the_plan_measured_as_the_run_is(ranked, tmp_path, capsys):
    plans = json.loads((ranked / "serve.json").read_text())["by_temperature"]
    assert {p["setting"]: p["schedules"]["ngram"][0][2] for p in plans} == {"": 3, "kv_cache_dtype=fp8": 0}
    # the defaults' run takes the defaults' plan; the FP8 run the FP8 plan, whose n-gram never pays
    assert schedule_run(ranked, tmp_path / "auto") == [[1, 64, 3]]
    with pytest.raises(SpeclensError, match=r"its ngram schedule is k = 0 at every batch size"):
        schedule_run(ranked, tmp_path / "fp8", "engine.kv_cache_dtype=fp8")
    # a run no plan was measured as: refused, naming every plan and how it differs
    with pytest.raises(
        SpeclensError, match=r"no plan measured as this run is \(source=fake.*engine.dtype=float32\)"
    ) as no:
        schedule_run(ranked, tmp_path / "f32", "engine.dtype=float32")
    assert str(no.value).count("engine.dtype: bfloat16 vs float32") == 2 and "kv_cache_dtype=fp8 vs defaults" in str(
        no.value
    )


@pytest.mark.parametrize(
    "content, why",
    [
        ('{"by_temperature": 5}', "is neither a schedule"),
        ('{"schedules": "ngram"}', "is neither a schedule"),
        ("[5]", "5 is not a [start, end, k] range"),
        ('{"winners": [], "schedules": {}, "schedule_configs": {}, "max_num_seqs": 8}', "records no provenance"),
    ],
)
def test_a_schedule_file_of_the_wrong_shape_is_one_line(tmp_path, capsys, content, why):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    argv = [*fake_overrides(tmp_path, ROWS), "drafter=ngram", "d=3", f"drafter.schedule={bad}", "batch_sizes=[1]"]
    assert exit_status(run_main, [*argv, f"hydra.run.dir={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("speclens: error: ") and why in err
    assert not (tmp_path / "run").exists()


def as_measured_vllm(run_dir: Path) -> None:
    """A fake run's records rewritten as a measured float32 vLLM run's (the unit suite starts no engine)."""
    measured = {"source": "measured", "runner": "vllm", "engine": "vllm", "engine_version": "0.32.0"}

    def change(data: dict) -> None:
        data["runner"] = "vllm"
        data["provenance"] |= measured | {"dtype": "float32", "model_runner": "v1"}

    rewrite(run_dir, change)
    stamp = json.loads((run_dir / "stamp.json").read_text())
    stamp["runner"] = "vllm"
    (run_dir / "stamp.json").write_text(json.dumps(stamp))


def test_a_fake_night_against_a_measured_baseline_is_refused_unless_intended_and_its_verdict_says_so(tmp_path, capsys):
    assert night(tmp_path, "n1", {}) == 0
    as_measured_vllm(tmp_path / "nights" / "n1" / "ngram_d3")
    capsys.readouterr()
    # the fake engine's night against the measured baseline: refused before any job runs
    assert night(tmp_path, "n2", {r["question_id"]: 1 for r in ROWS}, "n1") == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "source: measured vs fake; runner: vllm vs fake" in err
    assert "intended=source,runner,engine.dtype" in err and not (tmp_path / "nights" / "n2").exists()
    # said as meant: it runs, and the verdict names what the pair differs in
    assert night(tmp_path, "n2", {r["question_id"]: 1 for r in ROWS}, "n1", "intended=source,runner,engine.dtype") == 1
    verdict = [line for line in capsys.readouterr().err.splitlines() if "REGRESSION" in line and "domain=all" in line]
    assert len(verdict) == 1 and "AL 3.000 -> 2.000" in verdict[0]
    assert "the night's figures are fake (scripted engine, runner=fake)" in verdict[0]
    assert (
        "(baseline vs night: source: measured vs fake; runner: vllm vs fake; engine.dtype: float32 vs bfloat16"
        in verdict[0]
    )
    assert night(tmp_path, "n3", {}, "n1", "intended=dtype") == 2
    assert "intended=dtype: name the fields" in capsys.readouterr().err


def test_python_dash_m_speclens_is_the_front_door():
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "speclens", "bogus"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 2
    assert done.stderr.startswith("speclens: error: unknown command 'bogus'; choose one of run, replay, nightly")


def test_a_reports_commands_say_where_they_measure_and_never_mix_with_the_runs_shown(mixed):
    from reports.build import rank_commands
    from reports.runs import find_runs

    # a sweep: into a new sweep dir beside it (baseline=true names other job dirs than its own)
    commands = rank_commands(mixed, find_runs(mixed))
    assert commands and all(c.endswith(f"hydra.sweep.dir={mixed}-ranked") and " -m " in c for c in commands)
    # one run in a folder of its own: measured again in the run's dir, not in a new one around it
    (one,) = rank_commands(mixed / "bf16", find_runs(mixed / "bf16"))
    assert one.endswith(f"baseline=true force=true hydra.run.dir={mixed / 'bf16' / 'ngram'}")
