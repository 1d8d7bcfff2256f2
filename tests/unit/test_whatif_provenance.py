"""Issue 56 in evals.whatif and speculation profiles: every profile says what it is (provenance), a
sweep's gathered file keeps it, whatif chooses a drafter's profile by its whole identity (or refuses
naming the differences and `setting=`), uses a figure measured at one D at that D only, marks every
AL that is not measured, and refuses stubs, self-failed, duplicate and out-of-range input in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.pipeline.run_job import run
from evals.sweep_report import gather_profiles
from evals.whatif import build, main
from speclens.file_formats.profile_file import read_profiles
from speclens.file_formats.whatif_file import read_whatif_file
from speclens.provenance import Provenance
from tests.unit.conftest import compose_run, fake_overrides
from tests.unit.test_kv_cache_dtype import AUTO_SCRIPT, FP8_SCRIPT, ROWS, SMOLLM2
from tests.unit.test_whatif import SMALL, write_config
from tests.unit.test_whatif_by_length import LENGTHS

GPU = ["gpu=h200_sxm", "batch_sizes=[1]", "context_len=1024"]


def measured(setting: str = "", runner: str = "vllm", dtype: str = "bfloat16", source: str = "measured") -> dict:
    return Provenance(
        source=source, runner=runner, engine="vllm", engine_version="0.32.0", dtype=dtype, setting=setting
    ).to_dict()


def entry(marginal: list[float], drafter: str = "ngram", what: dict | None = None, **more) -> dict:
    """A profile as speclens writes it (the keys whatif reads), with its provenance."""
    found = {"drafter": drafter, "d": len(marginal), "domain": "all", "segment": "all"}
    found |= {"al": 1 + sum(marginal), "marginal": marginal, "measured_per_k": False, "draft_share": 1.0}
    return found | ({} if what is None else {"provenance": what}) | more


def folder_with(tmp_path: Path, profiles, name: str = "sweep") -> Path:
    """A folder holding speculation_profile.json: speclens's layout for a list of speclens entries,
    else the JSON given as it is (another tool's file)."""
    folder = tmp_path / name
    folder.mkdir(parents=True, exist_ok=True)
    speclens = isinstance(profiles, list) and all("drafter" in p for p in profiles)
    data = {"schema_version": 1, "profiles": profiles} if speclens else profiles
    (folder / "speculation_profile.json").write_text(json.dumps(data))
    return folder


def args(tmp_path: Path, *more: str) -> list[str]:
    return [f"target.model={write_config(tmp_path / 'target', SMALL)}", *GPU, f"out={tmp_path / 'out'}", *more]


def refused(tmp_path: Path, capsys, *argv: str) -> str:
    """The one error line of a whatif refused with exit status 2 (and nothing written)."""
    written = tmp_path / "out" / "whatif.json"
    before = written.stat().st_mtime_ns if written.exists() else None
    assert main(list(argv)) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("speclens: error: ")
    assert (written.stat().st_mtime_ns if written.exists() else None) == before
    return line


def at_d(result: dict) -> dict[int, dict]:
    return {p["d"]: p for p in result["points"]}


# The sweep: n-gram under the defaults (AL 2.475 at D=3) and under block verification (2.81).
DEFAULTS = [0.7, 0.5, 0.275]
BLOCK = [0.8, 0.6, 0.41]


# -- 1. profiles carry provenance; a sweep's gathered file keeps it ------------------------------


def test_each_profile_says_what_it_is_and_a_sweeps_gathered_file_keeps_it_apart(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    for name, script, more in (("auto", AUTO_SCRIPT, []), ("fp8", FP8_SCRIPT, ["engine.kv_cache_dtype=fp8"])):
        overrides = fake_overrides(tmp_path / name, ROWS, script, **SMOLLM2)
        run(compose_run(*overrides, "drafter=ngram", "d=3", *more), sweep / name, progress=lambda label: None)
    written = json.loads((sweep / "fp8" / "speculation_profile.json").read_text())["profiles"]
    assert {(p["provenance"]["source"], p["provenance"]["runner"], p["provenance"]["setting"]) for p in written} == {
        ("fake", "fake", "kv_cache_dtype=fp8")
    }
    assert all(p["measurement_conditions"]["runner"] == "fake" for p in written)  # kept for other tools
    assert gather_profiles(sweep) == []
    gathered = [p for p in read_profiles(sweep) if p["domain"] == "all" and "input_tokens" not in p]
    assert sorted(p["provenance"]["setting"] for p in gathered) == ["", "kv_cache_dtype=fp8"]
    # both fake, so neither is the one measured under the defaults: refused, naming the difference
    line = refused(tmp_path, capsys, str(sweep), *args(tmp_path))
    assert "2 profiles of drafter=ngram that are not the same kind of figure" in line
    assert "setting: defaults vs kv_cache_dtype=fp8" in line
    assert line.endswith("pick one with setting=<defaults|kv_cache_dtype=fp8>.")
    fp8, _ = build([str(sweep), *args(tmp_path, "setting=kv_cache_dtype=fp8", "d=3")])
    auto, _ = build([str(sweep), *args(tmp_path, "setting=defaults", "d=3")])
    assert at_d(fp8)[3]["al"] == pytest.approx(2.0) and at_d(auto)[3]["al"] == pytest.approx(1 + 19 / 9)
    assert fp8["provenance"]["acceptance"]["ngram"]["setting"] == "kv_cache_dtype=fp8"
    assert at_d(fp8)[3]["al_source"] == "fake" and at_d(fp8)[3]["source"] == "predicted"
    assert any(n.startswith("ngram: its acceptance is the scripted engine's (runner=fake)") for n in fp8["notes"])


def test_a_profile_written_before_provenance_gets_its_runs_on_reading(tmp_path):
    overrides = fake_overrides(tmp_path, ROWS, AUTO_SCRIPT, **SMOLLM2)
    out = tmp_path / "run"
    run(compose_run(*overrides, "drafter=ngram", "d=3"), out, progress=lambda label: None)
    path = out / "speculation_profile.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps(data | {"profiles": [p | {"provenance": None} for p in data["profiles"]]}))
    path.write_text(path.read_text().replace(', "provenance": null', ""))
    assert all(p["provenance"]["source"] == "fake" for p in read_profiles(out))


# -- 2. the choice of profile uses the whole identity ----------------------------------------------


def test_the_one_measured_under_the_defaults_is_taken_and_the_others_named(tmp_path, capsys):
    profiles = [
        entry(BLOCK, what=measured("verify.method=block")),
        entry([0.9, 0.9, 0.9], what=measured(runner="fake", source="fake", dtype="float32")),
        entry(DEFAULTS, what=measured()),
        entry([0.6, 0.4, 0.2], what=measured("kv_cache_dtype=fp8")),
    ]
    sweep = folder_with(tmp_path, profiles)
    assert main([str(sweep), *args(tmp_path)]) == 0
    result = read_whatif_file(tmp_path / "out")
    assert at_d(result)[3]["al"] == pytest.approx(2.475)  # not the block run's 2.81
    (note,) = [n for n in result["notes"] if "was taken" in n]
    # labelled as the report labels runs: every field the profiles differ in, then the setting
    assert note.startswith(
        "ngram: the profile under source=measured, runner=vllm, engine.dtype=bfloat16 (measured (vllm 0.32.0, "
        "bfloat16)) was taken; also there: "
    )
    assert "verify.method=block (setting: defaults vs verify.method=block)" in note
    assert "source: measured vs fake, runner: vllm vs fake, engine.dtype: bfloat16 vs float32" in note
    assert note in capsys.readouterr().out
    block, _ = build([str(sweep), *args(tmp_path, "setting=verify.method=block")])
    assert at_d(block)[3]["al"] == pytest.approx(2.81)
    assert (
        block["provenance"]["acceptance"]["ngram"]["label"] == "measured (vllm 0.32.0, bfloat16, verify.method=block)"
    )
    assert (
        "ngram: its profile was measured under verify.method=block: the predictions are of that setting"
        in block["notes"]
    )
    line = refused(tmp_path, capsys, str(sweep), *args(tmp_path, "setting=kv_cache_dtype=fp8_e5m2"))
    assert (
        line.startswith("speclens: error: setting=kv_cache_dtype=fp8_e5m2: ")
        and "holds no profile of drafter=ngram" in line
    )


def test_two_measured_under_the_defaults_are_refused_until_setting_picks_one(tmp_path, capsys):
    sweep = folder_with(tmp_path, [entry(DEFAULTS, what=measured()), entry(BLOCK, what=measured(dtype="float32"))])
    line = refused(tmp_path, capsys, str(sweep), *args(tmp_path))
    assert "engine.dtype=bfloat16: measured (vllm 0.32.0, bfloat16)" in line
    assert "(engine.dtype=bfloat16 against engine.dtype=float32: engine.dtype: bfloat16 vs float32)" in line
    assert line.endswith("pick one with setting=<engine.dtype=bfloat16|engine.dtype=float32>.")
    chosen, _ = build([str(sweep), *args(tmp_path, "setting=engine.dtype=float32")])
    assert (
        at_d(chosen)[3]["al"] == pytest.approx(2.81)
        and chosen["provenance"]["acceptance"]["ngram"]["dtype"] == "float32"
    )


def test_two_runs_of_one_identity_that_disagree_at_one_d_are_refused(tmp_path, capsys):
    a = entry(DEFAULTS, what=measured(), measurement_conditions={"dataset": "mt_bench"})
    b = entry(BLOCK, what=measured(), measurement_conditions={"dataset": "humaneval"})
    line = refused(tmp_path, capsys, str(folder_with(tmp_path, [a, b])), *args(tmp_path))
    assert (
        "two profiles of drafter=ngram at d=3 under one setting disagree (AL 2.475 and 2.81; dataset: mt_bench vs humaneval)"
        in line
    )


# -- 3. a figure measured at one D is used at that D only; derived ones are said ------------------


def test_a_parallel_drafters_profile_gives_its_measured_d_only(tmp_path, capsys):
    parallel = entry([0.8, 0.5, 0.3], drafter="ngram", what=measured("drafter.parallel_drafting=true"))
    parallel |= {"measured_per_k": True, "acceptance_length_by_k": {"3": 2.6}}
    sweep = folder_with(tmp_path, [parallel])
    result, _ = build([str(sweep), *args(tmp_path)])
    assert sorted(at_d(result)) == [3] and {b["d"] for b in result["best"]} <= {0, 3}
    assert result["provenance"]["acceptance"]["ngram"]["derived_d"] == []
    line = refused(tmp_path, capsys, str(sweep), *args(tmp_path, "d=2"))
    assert "drafter=ngram was measured at D=3 only (measured_per_k: it drafts in parallel" in line
    assert line.endswith("D=2 was not measured: give d=3.")


def test_a_serial_profiles_smaller_d_are_derived_and_marked_everywhere(tmp_path, capsys):
    sweep = folder_with(tmp_path, [entry(DEFAULTS, what=measured())])
    assert main([str(sweep), *args(tmp_path, "d=[1,2,3]")]) == 0
    result = read_whatif_file(tmp_path / "out")
    assert {d: p["al_source"] for d, p in at_d(result).items()} == {1: "derived", 2: "derived", 3: "measured"}
    assert {p["source"] for p in result["points"]} == {"predicted"}
    what = result["provenance"]["acceptance"]["ngram"]
    assert (what["own_d"], what["derived_d"], result["provenance"]["source"]) == ([3], [1, 2], "predicted")
    out = capsys.readouterr().out
    assert (
        "ngram acceptance: measured (vllm 0.32.0, bfloat16); AL at D=3; at D=1, 2 derived from its rates [derived]"
        in out
    )
    page = (tmp_path / "out" / "whatif.html").read_text()
    assert "predicted from measured and derived [derived] acceptance" in page
    best = result["best"][0]
    if best["d"] in (1, 2):  # a derived D may be best, and says so in the table
        assert best["al_source"] == "derived" and f"{best['al']:.2f} [derived]" in out


def test_al_measured_there_lists_the_measured_d_only(tmp_path, capsys):
    per_length = []
    for tokens, marginal in ((1000, [0.8, 0.6, 0.4]), (32000, [0.5, 0.2, 0.1])):
        per_length.append(entry(marginal, "eagle3", measured(), length=LENGTHS[tokens], input_tokens=tokens))
    sweep = folder_with(tmp_path, [entry([0.8, 0.6, 0.4], "eagle3", measured()), *per_length])
    assert main([str(sweep), *args(tmp_path)[:1], "gpu=h200_sxm", "batch_sizes=[1]", f"out={tmp_path / 'out'}"]) == 0
    result = read_whatif_file(tmp_path / "out")
    at_32k = next(s for s in result["by_length"] if s["context_len"] == 32000)
    assert at_32k["al_measured"] == {"eagle3": {"3": pytest.approx(1.8)}}
    assert at_32k["al_derived"]["eagle3"] == {"1": pytest.approx(1.5), "2": pytest.approx(1.7)}
    assert "AL measured there: eagle3 D=3: 1.80 (D=1, 2 derived from its rates [derived])" in capsys.readouterr().out


# -- 4. given, fake and calibrated figures say what they are -------------------------------------


def test_a_given_al_is_marked_given_and_a_lookup_drafter_is_told_what_it_assumes(tmp_path, capsys):
    assert main(args(tmp_path, "drafter=ngram", "al=1.9", "d=3")) == 0
    result = read_whatif_file(tmp_path / "out")
    assert at_d(result)[3]["al_source"] == "given"
    assert result["provenance"]["acceptance"]["ngram"]["label"] == "given (al=1.9 at d=3)"
    note = (
        "ngram: the prediction assumes every step drafts (draft_share=1), but ngram drafts only where its lookup "
        "finds a match; give draft_share=<share of target passes that draft> (a run's summary.json draft_share) "
        "to set it"
    )
    out = capsys.readouterr().out
    assert note in result["notes"] and note in out and "1.90 [given]" in out
    for more in (["drafter=ngram", "draft_share=0.5"], ["drafter=eagle3"]):
        quiet, _ = build(args(tmp_path, "al=1.9", "d=3", *more))
        assert not any("assumes every step drafts" in n for n in quiet["notes"])


def test_calibrate_on_scripted_runs_says_its_machine_is_a_script(tmp_path, capsys):
    from tests.unit.test_step_costs import measure

    measure(tmp_path, 2)  # the fake engine's step costs
    assert main([f"calibrate={tmp_path / 'sweep'}", "drafter=ngram", "al=1.8", "d=2", f"out={tmp_path / 'out'}"]) == 0
    result = read_whatif_file(tmp_path / "out")
    assert result["calibration"]["provenance"]["fake"] is True and result["calibration"]["provenance"]["sources"] == [
        "fake"
    ]
    assert result["provenance"]["step_costs"].endswith("(runner=fake: a script's step times, not a machine's)")
    out = capsys.readouterr().out
    assert f"calibrated on {tmp_path / 'sweep'} [fake]: " in out
    assert "calibration: fitted on runs of the scripted engine (runner=fake)" in out


# -- 5. another tool's profiles -------------------------------------------------------------------


def model_optimizer(marginal: list[float], method: str = "eagle3", **more) -> dict:
    """A profile as Model-Optimizer's specdec_bench writes it (schema 1.0, self-checked)."""
    mean = 1 + sum(marginal)
    check = {"implied_mean_accept_length": mean, "reported_mean_accept_length": mean, "abs_delta": 0.0}
    return {
        "schema_version": "1.0",
        "measured": True,
        "method": method,
        "num_speculative_tokens": len(marginal),
        "verification_method": "longest_prefix",
        "marginal_accept_rates": marginal,
        "mean_accept_length": mean,
        "accept_length_model": "chain_analytic",
        "accept_length_by_k": {str(len(marginal)): mean},
        "validation": {
            "mean_consistency": check | {"tolerance": 0.02, "passed": True},
            "marginal_monotonicity": {"passed": True},
        },
    } | more


def test_model_optimizers_one_dict_is_read_as_its_list_is(tmp_path):
    theirs = model_optimizer([0.8, 0.6, 0.4])
    one, _ = build([str(folder_with(tmp_path, theirs, "one")), *args(tmp_path)])
    listed, _ = build([str(folder_with(tmp_path, [theirs], "list")), *args(tmp_path)])
    assert [p["al"] for p in one["points"]] == [p["al"] for p in listed["points"]] == pytest.approx([1.8, 2.4, 2.8])
    what = one["provenance"]["acceptance"]["eagle3"]
    assert (what["source"], what["runner"], what["own_d"]) == ("measured", "specdec_bench", [3])


@pytest.mark.parametrize(
    "theirs, said",
    [
        (
            model_optimizer([0.0, 0.0, 0.0], measured=False, mean_accept_length=None, validation=None),
            "measured: false, a placeholder written before any acceptance was measured",
        ),
        (
            model_optimizer(
                [0.8, 0.6, 0.4],
                mean_accept_length=3.9,
                validation={
                    "mean_consistency": {"passed": False, "abs_delta": 1.1},
                    "marginal_monotonicity": {"passed": True},
                },
            ),
            "its own validation failed (mean_consistency): mean_accept_length 3.9 against 2.8 from its acceptance rates",
        ),
        (
            {k: v for k, v in model_optimizer([0.8, 0.6, 0.4], mean_accept_length=3.9).items() if k != "validation"},
            "mean_accept_length 3.9 against 2.8 from its acceptance rates (Model-Optimizer's own check allows 0.02)",
        ),
    ],
)
def test_a_stub_or_a_profile_that_failed_its_own_checks_is_refused_naming_the_file(tmp_path, capsys, theirs, said):
    folder = folder_with(tmp_path, theirs)
    line = refused(tmp_path, capsys, str(folder), *args(tmp_path))
    assert line.startswith(f"speclens: error: {folder / 'speculation_profile.json'}: ") and said in line


def test_model_optimizers_measured_per_k_gives_the_k_it_measured_only(tmp_path, capsys):
    theirs = model_optimizer([0.7, 0.5, 0.3, 0.2, 0.1], method="dflash", accept_length_model="measured_per_k")
    theirs["accept_length_by_k"] = {"3": 2.1, "5": 2.8}
    folder = folder_with(tmp_path, theirs)
    draft = write_config(
        tmp_path / "draft", SMALL | {"architectures": ["DFlashDraftModel"], "num_hidden_layers": 2, "dflash_config": {}}
    )
    result, _ = build([str(folder), *args(tmp_path, f"drafter.model={draft}")])
    assert {d: p["al"] for d, p in at_d(result).items()} == {3: pytest.approx(2.1), 5: pytest.approx(2.8)}
    assert {p["al_source"] for p in result["points"]} == {"measured"}
    line = refused(tmp_path, capsys, str(folder), *args(tmp_path, f"drafter.model={draft}", "d=2"))
    assert "drafter=dflash was measured at D=3, 5 only" in line


def test_a_block_verification_profile_is_its_own_setting_never_the_default(tmp_path, capsys):
    block = model_optimizer([0.8, 0.6, 0.41], verification_method="block")
    standard = model_optimizer(DEFAULTS)
    result, _ = build([str(folder_with(tmp_path, [block], "block")), *args(tmp_path)])
    assert result["provenance"]["acceptance"]["eagle3"]["setting"] == "verify.method=block"
    assert (
        "eagle3: its profile was measured under verify.method=block: the predictions are of that setting"
        in result["notes"]
    )
    # beside one under the defaults: two files of one drafter from another tool, both named
    sweep = tmp_path / "sweep"
    for name, theirs in (("a", block), ("b", standard), ("c", model_optimizer([0.6, 0.4, 0.2]))):
        folder_with(tmp_path, theirs, f"sweep/{name}")
    gathered = [p for name in ("a", "b") for p in read_profiles(sweep / name)]
    folder_with(tmp_path, gathered, "sweep")
    chosen, _ = build([str(sweep), *args(tmp_path)])
    assert (
        at_d(chosen)[3]["al"] == pytest.approx(2.475) and chosen["provenance"]["acceptance"]["eagle3"]["setting"] == ""
    )
    folder_with(tmp_path, gathered + read_profiles(sweep / "c"), "sweep")
    line = refused(tmp_path, capsys, str(sweep), *args(tmp_path))
    assert "2 profiles of drafter=eagle3 from other tools under one setting: " in line
    assert f"{sweep / 'b' / 'speculation_profile.json'} and {sweep / 'c' / 'speculation_profile.json'}" in line


def test_two_profiles_of_one_drafter_in_one_foreign_list_are_refused_naming_both(tmp_path, capsys):
    folder = folder_with(tmp_path, [model_optimizer([0.8, 0.6, 0.4]), model_optimizer([0.6, 0.4, 0.2])])
    line = refused(tmp_path, capsys, str(folder), *args(tmp_path))
    path = folder / "speculation_profile.json"
    assert f"{path} (profile 1) and {path} (profile 2); give one of those files." in line


# -- 6. 7. 8. D up to vLLM's limit; Dynamo's five slots ------------------------------------------


def test_d_above_vllms_limit_is_refused_and_no_grid_passes_it(tmp_path, capsys):
    line = refused(tmp_path, capsys, *args(tmp_path, "drafter=eagle3", "acceptance=[0.9]", "d=[3,200]"))
    assert line == (
        "speclens: error: d=[3, 200]: D=200 is above 128, vLLM's limit on num_speculative_tokens (no engine serves "
        "it); give D from 1 to 128."
    )
    result, _ = build(args(tmp_path, "drafter=eagle3", f"acceptance={json.dumps([0.99] * 130)}"))
    assert max(p["d"] for p in result["points"]) == 128 and max(b["d"] for b in result["best"]) <= 128


def test_dynamos_five_slots_say_what_they_cut(tmp_path, capsys):
    assert main(args(tmp_path, "drafter=eagle3", f"acceptance={json.dumps([0.9] * 7)}")) == 0
    result = read_whatif_file(tmp_path / "out")
    note = result["dynamo_flags_notes"]["eagle3"]
    assert note.startswith(
        "Dynamo's flags hold 5 positions: positions 6 to 7 were cut, so Dynamo models this drafter at D=5 at most"
    )
    marginal = [0.9 ** (k + 1) for k in range(7)]
    assert f"AL {1 + sum(marginal[:5]):.2f} (this profile: {1 + sum(marginal):.2f} at D=7)" in note
    out = capsys.readouterr().out
    assert f"eagle3 for Dynamo's planner and mocker: {result['dynamo_flags']['eagle3']}\n  {note}" in out
    short, _ = build(args(tmp_path, "drafter=eagle3", "acceptance=[0.9,0.8]"))
    assert short["dynamo_flags_notes"] == {}


def test_a_d_the_sweep_measured_keeps_its_own_al_and_a_derivation_keeps_what_it_came_from(tmp_path):
    """A sweep over d=2,3: D=2 is its own run's figure (not the D=3 rates' derivation), D=1 is derived;
    from a fake run, the derivation says it is derived from fake figures."""
    fake = measured(runner="fake", source="fake")
    at_2 = entry([0.8, 0.3], what=fake, al=2.2)  # its own AL, not the D=3 rates' 1 + 0.7 + 0.5
    result, _ = build([str(folder_with(tmp_path, [at_2, entry(DEFAULTS, what=fake)])), *args(tmp_path)])
    acceptance = result["provenance"]["acceptance"]["ngram"]
    assert (acceptance["own_d"], acceptance["derived_d"]) == ([2, 3], [1])
    points = at_d(result)
    assert (points[2]["al"], points[2]["al_source"]) == (pytest.approx(2.2), "fake")
    assert (points[1]["al"], points[1]["al_source"]) == (pytest.approx(1.7), "derived from fake")
