"""Every command against hostile input (issue 50, part 8): Hypothesis draws option values and
damaged input files for each command, and each must end with exit 0, or with one
`speclens: error:` line and exit 2. Never a traceback (an exception escaping `main` fails the
test with its example), never a non-finite figure in a JSON file it wrote, never a run dir left
without its summary.

Deterministic in `make test` (derandomized, no example database); `make fuzz` explores longer
(SPECLENS_FUZZ_EXAMPLES, random seeds)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evals.pipeline.run_job import run
from speclens.options import strict_json_loads
from tests.unit.conftest import compose_run, fake_overrides, write_checkpoint

EXAMPLES = int(os.environ.get("SPECLENS_FUZZ_EXAMPLES", "0")) or None
EXPLORE = os.environ.get("SPECLENS_FUZZ_EXPLORE") == "1"


def fuzz(examples: int):
    """Hypothesis settings: `examples` per command in `make test` (derandomized, no database, so
    CI draws the same cases every time); SPECLENS_FUZZ_EXAMPLES / SPECLENS_FUZZ_EXPLORE=1 for more."""
    return settings(
        max_examples=EXAMPLES or examples,
        derandomize=not EXPLORE,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )


PEERS = Path(__file__).resolve().parents[1] / "data" / "peers"
ROWS = [
    {"question_id": "q1", "category": "coding", "turns": ["write code", "now test it"]},
    {"question_id": "q2", "category": "writing", "turns": ["a short poem please"]},
]
SCRIPT = {"q1#0": [3, 1, None, 0], "q1#1": [2, (2, 1)], "q2#0": [None, 3, 3]}
SMOLLM2 = {"hidden_size": 576, "num_attention_heads": 9, "num_key_value_heads": 3, "intermediate_size": 1536}

# Values users and other tools have given: the non-finite, the negative, the empty, the wrong type,
# the huge, the malformed, escape sequences.
HOSTILE = [
    "", "NaN", "nan", "Infinity", "-Infinity", "inf", "1e309", "-1", "0", "-0.0", "0.5", "1.5", "7", "-3",
    "1000000000", "abc", "[]", "[1,", "{}", "null", "true", "[0.7, 1.5]", "[NaN]", "[-1]", "[0]", "[[1]]",
    '{"a": 1}', "☃\x1b[31m", "../x", "0x10", "1_000",
]  # fmt: skip
HOSTILE_JSON = [float("nan"), float("inf"), -float("inf"), -1, 0, 0.5, 1.5, 1e300, -1e300, "x", "", None, True,
                [], {}, [1.5], {"1": -1}, [[]]]  # fmt: skip

values = st.one_of(
    st.sampled_from(HOSTILE),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(10**12), 10**12).map(str),
    st.text(max_size=8),
)


def outcome(main: Callable[[list[str]], int], argv: list[str], capsys) -> tuple[int, str]:
    """Run a command in-process: (its exit status, its stderr). An exception escaping it is a bug,
    and fails the test."""
    capsys.readouterr()
    try:
        status = main(argv)
    except SystemExit as exc:  # a Hydra job reports its own failure, then exits with its status
        status = exc.code
    err = capsys.readouterr().err
    assert status in (0, 2), (status, argv, err[-2000:])
    assert "Traceback" not in err, err[-2000:]
    if status == 2:
        errors = [line for line in err.splitlines() if line.startswith("speclens: error: ")]
        assert len(errors) == 1 and err.rstrip().splitlines()[-1] == errors[0], err[-2000:]
    return status, err


def snapshot(*folders: Path) -> dict[Path, int]:
    """Every file under the folders, with its modification time."""
    return {p: p.stat().st_mtime_ns for f in folders if f.exists() for p in f.rglob("*") if p.is_file()}


def assert_strict_json(before: dict[Path, int], *folders: Path) -> None:
    """Every .json file written under the folders since `before` parses as strict JSON (no NaN,
    no Infinity)."""
    for path, mtime in snapshot(*folders).items():
        if path.suffix == ".json" and before.get(path) != mtime:
            strict_json_loads(path.read_text(encoding="utf-8"))  # raises on NaN and Infinity


def _leaves(data, prefix=()):
    """Every (path, value) of a JSON document's scalars and empty containers."""
    if isinstance(data, dict) and data:
        for key, value in data.items():
            yield from _leaves(value, (*prefix, key))
    elif isinstance(data, list) and data:
        for i, value in enumerate(data):
            yield from _leaves(value, (*prefix, i))
    else:
        yield prefix, data


def _set(data, path, value):
    if not path:
        return value
    *head, last = path
    node = data
    for key in head:
        node = node[key]
    node[last] = value
    return data


@st.composite
def damaged_json(draw, text: str) -> str:
    """A JSON file with one leaf (or a few) made hostile, or cut short, or not JSON."""
    kind = draw(st.sampled_from(["leaf", "leaf", "leaf", "leaves", "cut", "type"]))
    if kind == "cut":
        return text[: draw(st.integers(0, max(len(text) - 1, 0)))]
    if kind == "type":
        return json.dumps(draw(st.sampled_from([[], {}, None, 3, "text", [{}]])))
    data = json.loads(text)
    leaves = list(_leaves(data))
    for _ in range(1 if kind == "leaf" else draw(st.integers(2, 4))):
        path, _value = draw(st.sampled_from(leaves))
        data = _set(data, path, draw(st.sampled_from(HOSTILE_JSON)))
    return json.dumps(data)


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    """Finished fake runs to damage: a sweep of three (D = 2, 3 and 4, with plain decoding; the
    drafter at D = 4 never drafted), and a draft checkpoint."""
    root = tmp_path_factory.mktemp("fuzz-sources")
    sweep = root / "sweep"
    for d in (2, 3):
        script = {
            key: [min(step, d) if isinstance(step, int) else step for step in steps] for key, steps in SCRIPT.items()
        }
        overrides = fake_overrides(root, ROWS, script, name=f"d{d}", **SMOLLM2)
        cfg = compose_run(*overrides, "drafter=ngram", f"d={d}", "baseline=true")
        run(cfg, sweep / f"d{d}", progress=lambda label: None)
    # and a drafter that never drafted: no AL anywhere, tokens per step 1
    never = fake_overrides(root, ROWS, {key: [None] * 4 for key in SCRIPT}, name="never", **SMOLLM2)
    run(compose_run(*never, "drafter=ngram", "d=4", "baseline=true"), sweep / "never", progress=lambda label: None)
    return {"sweep": sweep, "run": sweep / "d3", "target": root / "target", "draft": write_checkpoint(root / "draft")}


def copy_of(sources: dict[str, Path], tmp: Path) -> Path:
    sweep = tmp / "sweep"
    if sweep.exists():
        shutil.rmtree(sweep)
    shutil.copytree(sources["sweep"], sweep)
    return sweep


RUN_FILES = ["summary.json", "stamp.json", "speculation_profile.json"]


@st.composite
def damaged_sweep(draw, sources: dict[str, Path], tmp: Path) -> Path:
    """A copy of the sweep with one of a run's JSON files damaged, or a record file cut short."""
    sweep = copy_of(sources, tmp)
    run_dir = sweep / draw(st.sampled_from(["d2", "d3", "never"]))
    present = [n for n in (*RUN_FILES, "steps.parquet", "requests.parquet") if (run_dir / n).is_file()]
    path = run_dir / draw(st.sampled_from(present))
    if path.suffix == ".json":
        path.write_text(draw(damaged_json(path.read_text())))
    else:
        data = path.read_bytes()
        path.write_bytes(data[: draw(st.integers(0, len(data) - 1))])
    return sweep


# -- reports ---------------------------------------------------------------------------------------


@fuzz(25)
@given(data=st.data())
def test_reports_hold_against_damaged_run_dirs(sources, tmp_path_factory, capsys, data):
    from reports import build, compare, curves, rank

    tmp = tmp_path_factory.mktemp("reports")
    sweep = data.draw(damaged_sweep(sources, tmp))
    command = data.draw(st.sampled_from(["build", "curves", "rank", "compare"]))
    out = tmp / "out"
    before = snapshot(sweep)
    if command == "build":
        outcome(build.main, [str(sweep)], capsys)
    elif command == "curves":
        outcome(curves.main, [str(sweep), "--out", str(out)], capsys)
    elif command == "rank":
        outcome(rank.main, [str(sweep), "--out", str(out)], capsys)
    else:
        pair = data.draw(st.sampled_from([("d2", "d3"), ("d3", "never")]))
        outcome(compare.main, [str(sweep / pair[0]), str(sweep / pair[1])], capsys)
    assert_strict_json(before, sweep, out)


@fuzz(25)
@given(data=st.data())
def test_report_options_hold_against_hostile_values(sources, tmp_path_factory, capsys, data):
    from reports import curves, explain, rank

    tmp = tmp_path_factory.mktemp("report-options")
    sweep = copy_of(sources, tmp)
    command = data.draw(st.sampled_from(["curves", "rank", "explain"]))
    flag = data.draw(st.sampled_from(["--out", "--domain", "--batch-size", "--temperature", "--unknown", "--seed"]))
    value = data.draw(values)
    args = {
        "curves": [str(sweep)],
        "rank": [str(sweep)],
        "explain": [str(sweep / "d2"), str(sweep / "d3")],
    }[command]
    main = {"curves": curves.main, "rank": rank.main, "explain": explain.main}[command]
    before = snapshot(tmp)
    with contextlib.chdir(tmp):  # what a command writes into the current folder unasked lands here
        outcome(main, [*args, flag, value], capsys)
    assert_strict_json(before, tmp)


# -- reports.explain against peer exports ----------------------------------------------------------


@fuzz(40)
@given(data=st.data())
def test_explain_holds_against_damaged_peer_exports(sources, tmp_path_factory, capsys, data):
    from reports import explain

    tmp = tmp_path_factory.mktemp("peers")
    name = data.draw(st.sampled_from(sorted(p.name for p in PEERS.iterdir())))
    text = (PEERS / name).read_text()
    if name.endswith(".jsonl"):
        lines = text.splitlines()
        i = data.draw(st.integers(0, len(lines) - 1))
        lines[i] = data.draw(damaged_json(lines[i]))
        damaged = "\n".join(lines) + "\n"
    else:
        damaged = data.draw(damaged_json(text))
    peer = tmp / name
    peer.write_text(damaged)
    out = tmp / "out"
    outcome(explain.main, [str(sources["run"]), str(peer), "--out", str(out)], capsys)
    assert_strict_json({}, out)


# -- evals.whatif and evals.guidelines --------------------------------------------------------------

WHATIF_KEYS = [
    "gpu", "tp", "weights", "batch_sizes", "context_len", "d", "al", "acceptance", "drafter", "domain", "out",
    "cost_model", "engine", "expert_weights", "draft_share", "model_runner", "slo.tokens_per_s_per_user",
    "gpu.hbm_tb_s", "gpu.tflops_bf16", "eff.token_us", "eff.hbm", "arch.num_key_value_heads",
    "arch.hidden_size", "arch.num_hidden_layers", "arch.bogus", "calibrate", "drafter.model", "nonsense",
]  # fmt: skip


@fuzz(60)
@given(data=st.data())
def test_whatif_holds_against_hostile_settings_and_profiles(sources, tmp_path_factory, capsys, data):
    from evals import whatif

    tmp = tmp_path_factory.mktemp("whatif")
    source = data.draw(st.sampled_from(["run", "profile", "none"]))
    argv = []
    if source == "run":
        sweep = data.draw(st.one_of(st.just(copy_of(sources, tmp)), damaged_sweep(sources, tmp)))
        argv.append(str(sweep / "d3"))
    elif source == "profile":
        profile = tmp / "speculation_profile.json"
        text = (sources["run"] / "speculation_profile.json").read_text()
        profile.write_text(data.draw(st.one_of(st.just(text), damaged_json(text))))
        argv += [str(profile), f"target.model={sources['target']}"]
    else:
        argv += ["drafter=eagle3", "d=3", "al=2.5", f"target.model={sources['target']}"]
    argv += ["gpu=h100_sxm", f"out={tmp / 'out'}"]
    for _ in range(data.draw(st.integers(1, 2))):
        key = data.draw(st.sampled_from(WHATIF_KEYS))
        value = data.draw(st.one_of(values, st.sampled_from(WHATIF_VALID.get(key, ["1"]))))
        # the sources' own folders: a sweep measured with baseline=true, a draft checkpoint
        argv.append(f"{key}={value.replace('SWEEP', str(sources['sweep'])).replace('DRAFT', str(sources['draft']))}")
    before = snapshot(tmp)
    with contextlib.chdir(tmp):  # what a command writes into the current folder unasked lands here
        outcome(whatif.main, argv, capsys)
    assert_strict_json(before, tmp)


WHATIF_VALID = {
    "tp": ["1", "2", "8"], "weights": ["bf16", "fp8"], "batch_sizes": ["[1,8]", "4"], "context_len": ["4096", "[1024,32768]"],
    "d": ["1", "3", "[1,3,5]"], "al": ["2.5", "1"], "acceptance": ["[0.8,0.6,0.4]", "0.7"], "drafter": ["eagle3", "ngram", "mtp"],
    "engine": ["vllm", "sglang", "trtllm"], "model_runner": ["v1", "v2"], "draft_share": ["0.2"], "gpu": ["b200", "custom"],
    "gpu.hbm_tb_s": ["abc", "3.35"], "eff.token_us": ["NaN", "0"], "arch.num_key_value_heads": ["-3", "1"],
    "calibrate": ["SWEEP"], "drafter.model": ["DRAFT"],
}  # fmt: skip
# DeepSeek-V3's attention (MLA), laid over the target's config in some guideline cases
MLA = {"num_attention_heads": 128, "num_key_value_heads": 128, "kv_lora_rank": 512, "qk_rope_head_dim": 64}
MLA |= {"qk_nope_head_dim": 128, "v_head_dim": 128}

GUIDELINE_KEYS = ["gpu", "tp", "weights", "expert_weights", "batch_sizes", "context_len", "drafter.model", "d"]


@fuzz(30)
@given(data=st.data())
def test_guidelines_hold_against_hostile_settings_and_configs(sources, tmp_path_factory, capsys, data):
    from evals import guidelines

    tmp = tmp_path_factory.mktemp("guidelines")
    target = tmp / "target"
    shutil.copytree(sources["target"], target)
    config = target / "config.json"
    if data.draw(st.booleans()):
        config.write_text(json.dumps(json.loads(config.read_text()) | MLA))
    if data.draw(st.booleans()):
        config.write_text(data.draw(damaged_json(config.read_text())))
    argv = ["target=custom", f"target.model={target}"]
    if data.draw(st.booleans()):  # a draft checkpoint, whole or damaged
        draft = tmp / "draft"
        shutil.copytree(sources["draft"], draft)
        if data.draw(st.booleans()):
            (draft / "config.json").write_text(data.draw(damaged_json((draft / "config.json").read_text())))
        argv.append(f"drafter.model={draft}")
    for _ in range(data.draw(st.integers(0, 3))):
        argv.append(f"{data.draw(st.sampled_from(GUIDELINE_KEYS))}={data.draw(values)}")
    with contextlib.chdir(tmp):  # what a command writes into the current folder unasked lands here
        outcome(guidelines.main, argv, capsys)


# -- evals.run on the fake runner ------------------------------------------------------------------

RUN_KEYS = [
    "d", "seed", "sampling.temperature", "sampling.max_tokens", "dataset.num_requests", "batch_sizes",
    "engine.kv_cache_dtype", "engine.max_model_len", "verify.method", "verify.draft_sampling",
    "drafter.parallel_drafting", "acceptance.synthetic", "repeats", "request_rate", "engine.model_runner",
    "drafter.prompt_lookup_min", "chat_template_kwargs",
]  # fmt: skip


@fuzz(30)
@given(data=st.data())
def test_run_on_the_fake_runner_holds_against_hostile_overrides(sources, tmp_path_factory, capsys, data):
    from evals.run import main

    tmp = tmp_path_factory.mktemp("run")
    out = tmp / "out"
    argv = [*fake_overrides(tmp, ROWS, SCRIPT), "drafter=ngram", "d=3", f"hydra.run.dir={out}"]
    for _ in range(data.draw(st.integers(1, 2))):
        key = data.draw(st.sampled_from(RUN_KEYS))
        value = data.draw(values.filter(lambda v: "\n" not in v and "=" not in v))
        argv.append(f"{key}={json.dumps(value) if value[:1] in ' ,' or value == '' else value}")
    with contextlib.chdir(tmp):  # what a command writes into the current folder unasked lands here
        status, _ = outcome(main, argv, capsys)
    # a run dir is whole or absent
    assert (out / "summary.json").is_file() if status == 0 else not out.exists()
    assert_strict_json({}, out)


# -- evals.load on the fake runner -----------------------------------------------------------------

LOAD_KEYS = [
    "request_rates", "arrivals", "stage.requests", "stage.seconds", "stage.warmup_requests", "repeats",
    "slo.tpot_ms", "slo.ttft_ms", "draft_lengths", "schedule_arm", "sampling.ignore_eos", "d",
]  # fmt: skip


@fuzz(30)
@given(data=st.data())
def test_load_on_the_fake_runner_holds_against_hostile_overrides(sources, tmp_path_factory, capsys, data):
    from evals.load import main

    tmp = tmp_path_factory.mktemp("load")
    out = tmp / "out"
    argv = [*fake_overrides(tmp, ROWS, SCRIPT), "drafter=ngram", "d=3", "request_rates=[1,8]", "stage.requests=3"]
    argv.append(f"hydra.run.dir={out}")
    for _ in range(data.draw(st.integers(1, 2))):
        key = data.draw(st.sampled_from(LOAD_KEYS))
        value = data.draw(values.filter(lambda v: "\n" not in v and "=" not in v))
        argv.append(f"{key}={json.dumps(value) if value[:1] in ' ,' or value == '' else value}")
    with contextlib.chdir(tmp):
        status, _ = outcome(main, argv, capsys)
    # a ladder is whole, or refused before it made its dir
    assert (out / "load.json").is_file() if status == 0 else not out.exists()
    assert_strict_json({}, out)


# -- provenance through pairings and headlines (issue 56) -----------------------------------------

# What a drawn run differs in: its engine, dtype, KV cache, verification and acceptance source.
IDENTITY_DRAWS = {
    "runner": ["fake", "vllm"],
    "dtype": ["bfloat16", "float32"],
    "kv_cache_dtype": ["auto", "fp8"],
    "verify": ["standard", "block"],
    "synthetic": [False, True],
}


def relabelled(source: Path, into: Path, runner: str, dtype: str, kv_cache_dtype: str, verify: str, synthetic: bool):
    """A copy of a finished fake run, its stamp and summary saying it ran under these (its figures
    stay the script's): what a folder of mixed runs holds, without an engine."""
    from speclens.provenance import of_stamp

    shutil.copytree(source, into)
    stamp = json.loads((into / "stamp.json").read_text())
    stamp["runner"] = runner
    stamp["config"]["engine"] |= {"dtype": dtype, "kv_cache_dtype": kv_cache_dtype}
    stamp["config"]["verify"]["method"] = verify
    summary = json.loads((into / "summary.json").read_text())
    summary["runner"] = runner
    summary["numerics"] |= {"dtype": dtype, "model_runner": "v1" if runner == "vllm" else None}
    if synthetic:
        stamp["config"]["acceptance"]["synthetic"] = [0.9, 0.9]
        summary["synthetic_acceptance"] = {"rates": [0.9, 0.9], "expected_al": 2.8, "source": "given"}
    found = of_stamp(
        stamp, runner=runner, synthetic=synthetic, dtype=dtype, model_runner=summary["numerics"]["model_runner"]
    )
    summary["provenance"] = found.to_dict()
    (into / "stamp.json").write_text(json.dumps(stamp))
    (into / "summary.json").write_text(json.dumps(summary))
    return found


@st.composite
def mixed_runs(draw, sources: dict[str, Path], tmp: Path) -> tuple[Path, dict[str, object]]:
    """A folder of two to four copies of one run, each under a drawn identity (all distinct)."""
    folder = tmp / "mixed"
    if folder.exists():
        shutil.rmtree(folder)
    identities = draw(
        st.lists(st.tuples(*(st.sampled_from(v) for v in IDENTITY_DRAWS.values())), min_size=2, max_size=4, unique=True)
    )
    found = {}
    for i, identity in enumerate(identities):
        found[f"r{i}"] = relabelled(sources["run"], folder / f"r{i}", *identity)
    return folder, found


@fuzz(25)
@given(data=st.data())
def test_no_pairing_names_fewer_differences_than_there_are_and_no_headline_is_unmeasured(
    sources, tmp_path_factory, data
):
    """For runs drawn with differing runner, dtype, setting or source: every pair the report's
    "Settings, paired" and reports.compare make is labelled with every difference (or not made,
    its note naming each), and no synthetic or fake figure headlines or decides as measured."""
    from reports.build import decision_section, headline_runs
    from reports.compare import compare
    from reports.runs import find_runs, measured_runs
    from reports.settings import setting_pairs
    from reports.speedup_ranking import rank_runs
    from speclens.errors import SpeclensError
    from speclens.provenance import FIELD_NAMES, IDENTITY_FIELDS, differences

    folder, found = data.draw(mixed_runs(sources, tmp_path_factory.mktemp("provenance")))
    runs = find_runs(folder)
    pairs, notes = setting_pairs(runs)
    for base, cand in pairs:  # paired: the setting is all they differ in, and the label is it
        assert differences(base.provenance, cand.provenance) == [f"setting: defaults vs {cand.axis_setting}"], (
            base.path,
            cand.path,
        )
    for note in notes:
        if "differ in more than the setting" in note:
            cand, base = (next(r for r in runs if r.path.name == note.split(" ", 1)[0]),) * 2
            other = next(r for r in runs if f"not paired with {r.path.name}," in note)
            for field in IDENTITY_FIELDS[:-1]:
                if getattr(other.provenance, field) != getattr(cand.provenance, field):
                    assert FIELD_NAMES[field] in note, note

    # reports.compare of the first two runs: each side's label names every field they differ in
    speculative = [r for r in runs if r.summary.synthetic_acceptance is None]
    if len(speculative) >= 2:
        a, b = speculative[0], speculative[1]
        table, pair_notes = compare(a.path, b.path)
        row = table.iloc[0]
        for field in ("runner", "dtype", "model_runner"):
            if getattr(a.provenance, field) != getattr(b.provenance, field):
                assert FIELD_NAMES[field] in row.setting and FIELD_NAMES[field] in row.baseline_setting, row
        if a.axis_setting != b.axis_setting:
            assert row.setting != row.baseline_setting
        for side in (a, b):
            if not side.provenance.measured:
                assert any(side.provenance.source in n and "not measured" in n for n in pair_notes), pair_notes

    # issue 66: the API hands out each run's identity, and refuses to pool several
    import speclens
    from evals.whatif_calibration import calibration_runs
    from speclens.errors import ConfigError

    sweep = speclens.read_sweep(folder)
    identities = {tuple(r.provenance.columns().values()) for r in sweep.runs}
    assert set(map(tuple, sweep.steps[list(speclens.IDENTITY_COLUMNS)].drop_duplicates().values)) <= identities
    if len(identities) > 1:
        with pytest.raises(SpeclensError, match="pool runs of different identities"):
            speclens.al(sweep.steps)
    else:
        assert speclens.al(sweep.steps) == pytest.approx(sweep.runs[0].summary.al)
    # every view names each run apart
    assert len({r.label for r in runs}) == len(runs), [r.label for r in runs]
    # a calibration fits one identity's step costs: refused where the folder holds several
    if len({r.provenance.identity() for r in runs}) > 1:
        with pytest.raises(ConfigError, match="holds step costs of"):
            calibration_runs(folder)
    else:
        assert len(calibration_runs(folder)) == len(runs)

    # headlines: never a synthetic figure, and a fake one only where nothing was measured, said so
    named, what = headline_runs(runs)
    assert all(r.provenance.source != "synthetic" for r in named)
    if any(r.provenance.measured for r in runs if r.summary.synthetic_acceptance is None):
        assert all(r.provenance.measured for r in named) and what == ""
    else:
        assert all(r.provenance.source in what for r in named)
    try:
        ranking = rank_runs(measured_runs(runs))
    except SpeclensError:
        return
    answer = decision_section(folder, runs, ranking).answer or ""
    # the schedule reader: a run takes the plan of its own identity, or is refused
    from reports.serve import serve_plan
    from speclens.file_formats.schedule_file import Mode, read_schedule
    from speclens.file_formats.serve_file import mode_plans, write_serve_file
    from speclens.provenance import from_dict

    plan = serve_plan(ranking, measured_runs(runs))
    write_serve_file(plan, folder)
    for one_run in measured_runs(runs):
        own = one_run.provenance
        mine = [
            one
            for one in mode_plans(plan)
            if all(from_dict(p).identity() == own.identity() for p in one.get("provenance") or [])
        ]
        try:
            got = read_schedule(str(folder / "serve.json"), "ngram", "drafter.schedule", own, Mode(0.0, {}))
        except ConfigError:
            assert not any("ngram" in one["schedules"] for one in mine), (own, mine)
            continue
        assert any(one["schedules"].get("ngram") == got for one in mine), (own, got)
    for row in ranking.itertuples():
        if row.source != "measured":
            assert row.speedup_source != "measured", row
    if all(r.provenance.source == "fake" for r in measured_runs(runs)):
        assert "measured" not in answer and "fake" in answer, answer
