"""One folder of mixed runs (issue 56): the real engine's float32 n-gram run beside the fake engine's
under bfloat16, an FP8 KV cache, block verification and synthetic acceptance. Every report over
it labels each figure with what it is and each pair with every difference, and chooses nothing
across sources or settings without saying so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evals import whatif
from evals.sweep_report import gather_profiles
from reports.build import build_sections
from reports.compare import compare
from reports.runs import find_runs
from reports.settings import setting_pairs
from reports.speedup_ranking import rank
from speclens.file_formats.whatif_file import read_whatif_file
from tests.integration.conftest import measure
from tests.integration.shared_runs import SMOLLM2_NGRAM

# The shared real run's prompts, sampling and reasoning split, on the fake engine.
FAKE = [*(o for o in SMOLLM2_NGRAM if not o.startswith("engine.dtype=")), "runner=fake"]


@pytest.fixture(scope="module")
def mixed(smollm2_ngram, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mixed")
    shutil.copytree(smollm2_ngram.out, root / "real_f32")
    measure(root / "fake_bf16", *FAKE, "engine.dtype=bfloat16")
    # its own script: rates no other run of the folder has
    measure(root / "fake_f32_fp8", *FAKE, "engine.dtype=float32", "engine.kv_cache_dtype=fp8", "runner.pattern=[3,3,0]")
    measure(root / "fake_f32_block", *FAKE, "engine.dtype=float32", "verify.method=block")
    # set rates read from the real run's profile: synthetic, whatever engine drew them
    measure(root / "fake_synthetic", *FAKE, "engine.dtype=float32", f"acceptance.synthetic={root / 'real_f32'}")
    assert gather_profiles(root) == []  # the folder's speculation_profile.json, as a sweep's
    return root


def test_every_figure_of_a_mixed_folder_says_what_it_is_and_no_pair_hides_a_difference(mixed):
    runs = {run.path.name: run for run in find_runs(mixed)}
    sources = {name: run.provenance.source for name, run in runs.items()}
    assert sources == {
        "real_f32": "measured",
        "fake_bf16": "fake",
        "fake_f32_fp8": "fake",
        "fake_f32_block": "fake",
        "fake_synthetic": "synthetic",
    }
    synthetic = runs["fake_synthetic"].summary.synthetic_acceptance
    assert synthetic is not None and synthetic.source.endswith("measured (vllm 0.32.0, float32, v1)")
    assert synthetic.rates == pytest.approx(runs["real_f32"].summary.per_position_acceptance)

    # every run's line names what it differs in from the others: the runner and dtype vary here
    assert runs["real_f32"].setting == "runner=vllm, engine.dtype=float32"
    assert runs["fake_f32_fp8"].setting == "runner=fake, engine.dtype=float32, kv_cache_dtype=fp8"

    # "Settings, paired": no defaults' run shares the fake float32 runs' identity, so none is paired,
    # and each note names every difference beside the setting
    pairs, notes = setting_pairs(list(runs.values()))
    assert pairs == []
    for name in ("fake_f32_fp8", "fake_f32_block"):
        (note,) = [n for n in notes if n.startswith(name)]
        assert "differ in more than the setting" in note
        other = note.split("not paired with ", 1)[1].split(",", 1)[0]
        expected = {"fake_bf16": ["engine.dtype: bfloat16 vs float32"]}.get(
            other, ["source: measured vs fake", "runner: vllm vs fake", "engine.model_runner: v1 vs null"]
        )
        assert all(part in note for part in expected), note

    # reports.compare across folders: the label names the source, runner, engine, model runner and cache
    table, compare_notes = compare(mixed / "real_f32", mixed / "fake_f32_fp8")
    whole = table[(table.domain == "all") & (table.segment == "all")].iloc[0]
    assert whole.baseline_setting == "source=measured, runner=vllm, engine=vllm, engine.model_runner=v1"
    assert whole.setting == "source=fake, runner=fake, engine=fake, engine.model_runner=null, kv_cache_dtype=fp8"
    assert "the candidate's figures are fake (scripted engine, runner=fake), not measured" in compare_notes

    # the ranking: the synthetic run is not in it, each row says what it is, fake ones never "measured"
    ranking = rank([mixed])
    assert set(ranking.run) == {str(runs[n].path) for n in ("real_f32", "fake_bf16", "fake_f32_fp8", "fake_f32_block")}
    assert set(ranking[ranking.source == "measured"].run) == {str(runs["real_f32"].path)}
    assert not ranking[(ranking.source == "fake") & ranking.speedup_source.str.startswith("measured")].size

    # the report's headline: the measured plan alone (docs/definitions.md: a fake figure headlines
    # only where nothing was measured), saying what its speedup is; the three fake plans named as left out
    decision = build_sections(mixed)[0]
    (clause,) = decision.answer.removeprefix("Serve ").rstrip(".").split("; ")
    assert "runner=vllm" in clause and clause.endswith("measured)"), clause
    (left_out,) = [line for line in decision.text if line.startswith("Only measured plans are shown")]
    assert "3 plan(s) of figures that were not measured" in left_out and "(fake)" in left_out, left_out


def test_whatif_and_synthetic_rates_over_a_mixed_folder_choose_by_identity_and_say_so(mixed, capsys):
    # whatif: of four n-gram profiles, the one measured under the defaults, the others named
    assert whatif.main([str(mixed), "gpu=h100_sxm"]) == 0
    result = read_whatif_file(mixed)
    taken = result["provenance"]["acceptance"]["ngram"]
    assert (taken["source"], taken["runner"], taken["dtype"], taken["setting"]) == ("measured", "vllm", "float32", "")
    assert taken["own_d"] == [3] and taken["derived_d"] == [1, 2]
    (note,) = [n for n in result["notes"] if "was taken; also there" in n]
    for other in ("engine.dtype=bfloat16", "verify.method=block", "kv_cache_dtype=fp8"):
        assert other in note
    assert result["provenance"]["source"] == "predicted"
    # setting= picks another, and what it is goes with it
    assert whatif.main([str(mixed), "gpu=h100_sxm", "setting=kv_cache_dtype=fp8"]) == 0
    fp8 = read_whatif_file(mixed)["provenance"]["acceptance"]["ngram"]
    assert (fp8["source"], fp8["setting"]) == ("fake", "kv_cache_dtype=fp8")
    capsys.readouterr()

    # acceptance.synthetic=<folder>: under an FP8 cache, the folder's FP8 profile is the run's own
    fp8_rates = measure(
        mixed.parent / "synthetic_fp8",
        *FAKE,
        "engine.dtype=float32",
        "engine.kv_cache_dtype=fp8",
        f"acceptance.synthetic={mixed}",
    )
    assert fp8_rates["synthetic_acceptance"]["source"].endswith(
        "drafter=ngram d=3 domain=all, fake (scripted engine, runner=fake)"
    )
    fp8_profile = json.loads((mixed / "fake_f32_fp8" / "speculation_profile.json").read_text())["profiles"][0]
    assert fp8_rates["synthetic_acceptance"]["rates"] == pytest.approx(fp8_profile["marginal"])
    others = [json.loads((mixed / n / "speculation_profile.json").read_text()) for n in ("fake_bf16", "real_f32")]
    assert all(other["profiles"][0]["marginal"] != pytest.approx(fp8_profile["marginal"]) for other in others)
    assert fp8_rates["provenance"]["source"] == "synthetic"
    # under the defaults, the one measured profile of the defaults
    defaults_rates = measure(
        mixed.parent / "synthetic_defaults", *FAKE, "engine.dtype=bfloat16", f"acceptance.synthetic={mixed}"
    )
    assert defaults_rates["synthetic_acceptance"]["source"].endswith("measured (vllm 0.32.0, float32, v1)")


def test_issue_66_the_api_every_view_and_every_decision_over_a_mixed_folder_keep_each_identity(mixed, tmp_path, capsys):
    """Issue 66 over the same folder: the public reader hands out nothing without what it is, every
    report view keys runs by their identity, and every decision (schedule, nightly gate, calibration)
    is taken on one identity or refused naming them."""
    import speclens
    from evals.nightly import main as nightly_main
    from evals.pipeline.compose import compose_config
    from evals.pipeline.run_job import run
    from evals.whatif_calibration import calibration_runs
    from reports.build import build
    from reports.rank import main as rank_main
    from speclens.errors import ConfigError, SpeclensError
    from speclens.file_formats.serve_file import mode_plans, read_serve_file

    # the API: each row says what it is; docs/api.md's grouping without it is refused, with it each
    # group is one run's own figure
    sweep = speclens.read_sweep(mixed)
    assert {r.path.name: r.provenance.source for r in sweep.runs} == {
        "real_f32": "measured",
        "fake_bf16": "fake",
        "fake_f32_fp8": "fake",
        "fake_f32_block": "fake",
        "fake_synthetic": "synthetic",
    }
    with pytest.raises(SpeclensError, match="pool runs of different identities"):
        sweep.steps.groupby(["drafter", "d", "domain"]).apply(speclens.al)
    grouped = sweep.steps.groupby(["drafter", "d", "domain", *speclens.IDENTITY_COLUMNS]).apply(speclens.al)
    real = next(r for r in sweep.runs if r.path.name == "real_f32")
    identity = tuple(real.provenance.columns().values())
    for domain, figures in real.summary.by_domain.items():
        assert grouped[("ngram", 3, domain, *identity)] == pytest.approx(figures.al)

    # every view: the Runs table names each run apart, and each run has its own waterfall
    html, md = build(mixed)
    text = md.read_text()
    runs_table = text.split("## Runs", 1)[1].split("##", 1)[0]
    labels = [line.split("|")[1].strip() for line in runs_table.splitlines() if line.startswith("| ngram")]
    assert len(labels) == 5 and len(set(labels)) == 5, labels
    assert any("source=synthetic" in label for label in labels) and any(
        "engine.dtype=bfloat16" in label for label in labels
    )
    waterfalls = {line for line in text.splitlines() if line.startswith("![") and "account_" in line}
    assert len(waterfalls) == len({w.split("](", 1)[1] for w in waterfalls})  # no two runs share one file

    # the schedule: the folder's plans, one per identity; a run takes its own or is refused
    assert rank_main([str(mixed)]) == 0
    plans = mode_plans(read_serve_file(mixed / "serve.json"))
    assert [p["provenance"][0]["source"] for p in plans][0] == "measured"  # measured first
    fake_cfg = compose_config([*FAKE, "engine.dtype=float32", f"drafter.schedule={mixed / 'serve.json'}"])
    with pytest.raises(ConfigError, match=r"no plan measured as this run is|k = 0 at every batch size"):
        run(fake_cfg, tmp_path / "scheduled", progress=lambda label: None)

    # the nightly gate: the fake engine's night against the measured float32 baseline is refused
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"jobs:\n  ngram_d3: {json.dumps(FAKE)}\n")  # JSON is YAML
    assert nightly_main([f"suite={suite}", f"baseline={mixed / 'real_f32'}", f"out={tmp_path / 'night'}"]) == 2
    assert "source: measured vs fake; runner: vllm vs fake" in capsys.readouterr().err

    # calibration: one identity's step costs, the folder's mix refused naming them
    with pytest.raises(ConfigError, match=r"holds step costs of \d identities"):
        calibration_runs(mixed)
    assert html.is_file()
