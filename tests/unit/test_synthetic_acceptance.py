"""acceptance.synthetic (issue 48): drafts accepted at set rates, checked before any engine,
labelled wherever the run appears, kept out of measured acceptance and of the lossless check."""

from __future__ import annotations

import json

import pytest

from evals.pipeline.run_job import run
from speclens.errors import ConfigError
from speclens.file_formats.records import read_parquet
from tests.unit.conftest import compose_run, fake_overrides

PROMPTS = [{"question_id": f"q{i}", "category": "chat", "turns": [f"tell me about thing {i} " * 3]} for i in range(24)]
RATES = [0.8, 0.6, 0.4]


def compose(tmp_path, *more: str):
    return compose_run(
        *fake_overrides(tmp_path, PROMPTS),
        "drafter=ngram",
        "d=3",
        "runner.output_tokens=96",
        "sampling.max_tokens=96",
        *more,
    )


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("synthetic")
    out = tmp_path / "run"
    cfg = compose(tmp_path, f"acceptance.synthetic={json.dumps(RATES)}", "baseline=true", "batch_sizes=[4]")
    return run(cfg, out, progress=lambda label: None), out


def test_a_synthetic_run_accepts_at_the_set_rates_and_says_its_al_is_set(synthetic_run, capsys):
    summary, out = synthetic_run
    assert summary.synthetic_acceptance.rates == RATES and summary.synthetic_acceptance.source == "given"
    assert summary.synthetic_acceptance.expected_al == pytest.approx(2.8)
    lo, hi = summary.al_ci95
    assert lo <= 2.8 <= hi and hi - lo < 0.5
    steps = read_parquet(out / "steps.parquet")
    # every decode step drafts D under the synthetic sampler; position rates near the marginal ones
    assert (steps.num_drafted == 3).all()
    assert summary.per_position_acceptance == pytest.approx(RATES, abs=0.08)
    stamp = json.loads((out / "stamp.json").read_text())
    spec = stamp["speculative_config"]
    assert (spec["rejection_sample_method"], spec["synthetic_acceptance_rates"]) == ("synthetic", RATES)


def test_a_synthetic_run_is_timed_against_plain_decoding_without_a_lossless_check(synthetic_run):
    summary, out = synthetic_run
    (point,) = summary.operating_points
    assert point.speedup is not None and point.t_verif is not None
    assert summary.lossless is not None and summary.lossless.checked is False
    assert "not made" in summary.synthetic_acceptance.lossless_check
    # a set acceptance is no measured profile
    assert not (out / "speculation_profile.json").exists()
    written = json.loads((out / "summary.json").read_text())
    assert written["synthetic_acceptance"]["rates"] == RATES


def test_the_terminal_table_says_the_acceptance_is_synthetic(synthetic_run):
    from reports.table import result_table

    summary, _ = synthetic_run
    shown = result_table(summary)
    assert "SYNTHETIC acceptance" in shown.splitlines()[0]
    assert "drafts accepted at the marginal rates [0.8, 0.6, 0.4] (expected AL 2.80); AL is set, not measured" in shown


@pytest.mark.parametrize(
    "value, message",
    [
        ("[0.8,1.2,0.4]", r"acceptance.synthetic=\[0.8,1.2,0.4\]: 1.2 is not a rate in \[0, 1\]"),
        ("[0.8,-0.1,-0.2]", r"-0.1 is not a rate in \[0, 1\]"),
        ("[0.5,0.6,0.4]", r"never increase; position 1 has 0.6 after 0.5"),
        ("[0.8,0.6]", r"2 rates for d=3; give one per draft position"),
    ],
)
def test_bad_rates_are_one_line_before_anything_runs(tmp_path, value, message):
    with pytest.raises(ConfigError, match=message):
        run(compose(tmp_path, f"acceptance.synthetic={value}"), tmp_path / "run", progress=lambda label: None)
    assert not (tmp_path / "run").exists()


def test_rates_are_read_from_a_measured_profile_and_a_profile_without_them_is_one_line(tmp_path):
    measured = tmp_path / "measured"
    run(compose(tmp_path, "batch_sizes=[4]"), measured, progress=lambda label: None)
    profile = json.loads((measured / "speculation_profile.json").read_text())["profiles"]
    whole = next(p for p in profile if p["domain"] == "all" and p["segment"] == "all")
    summary = run(
        compose(tmp_path, f"acceptance.synthetic={measured}"), tmp_path / "again", progress=lambda label: None
    )
    assert summary.synthetic_acceptance.rates == whole["marginal"]
    # where the rates came from, and what they are: the fake engine's
    assert summary.synthetic_acceptance.source.endswith(
        "speculation_profile.json: drafter=ngram d=3 domain=all, fake (scripted engine, runner=fake)"
    )
    for more, message in (
        (("drafter=suffix",), r"no profile of drafter=suffix over domain all; it has ngram"),
        (("d=2",), r"drafter=ngram was measured at d=3, not d=2"),
    ):
        with pytest.raises(ConfigError, match=message):
            run(compose(tmp_path, f"acceptance.synthetic={measured}", *more), tmp_path / "bad", progress=print)
    newer = tmp_path / "newer"
    newer.mkdir()
    (newer / "speculation_profile.json").write_text(json.dumps({"schema_version": 99, "profiles": []}))
    with pytest.raises(ConfigError, match=r"has no schema_version this speclens reads \(1 to 1; it has 99\)"):
        run(compose(tmp_path, f"acceptance.synthetic={newer}"), tmp_path / "bad", progress=print)
    assert not (tmp_path / "bad").exists()


def test_a_replay_refuses_synthetic_acceptance_a_curve_is_measured_acceptance(tmp_path):
    from evals.pipeline.compose import compose_config
    from evals.replay import replay

    with pytest.raises(ConfigError, match=r"evals.replay does not use acceptance.synthetic: .* synthetic acceptance"):
        replay(
            compose_config(
                [*fake_overrides(tmp_path, PROMPTS), "d_max=3", "acceptance.synthetic=[0.8,0.6,0.4]"], "replay"
            ),
            tmp_path / "replay",
        )
    assert not (tmp_path / "replay").exists()


def test_selfcheck_sets_a_synthetic_step_beside_whatifs_prediction_for_the_gpu_it_ran_on(tmp_path):
    """evals.selfcheck engine=gpu's last check (issue 48, part 6), on the fake engine: it passes
    where the AL's CI holds the rates' AL, and names the table's GPU for the device the run saw."""
    from dataclasses import replace

    from evals.selfcheck import synthetic_check, synthetic_step_check
    from speclens.file_formats.summary_file import read_summary

    # a target the step-cost model can shape: SmolLM2-135M's config
    smollm2 = {"hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9, "num_key_value_heads": 3}
    target = fake_overrides(tmp_path, PROMPTS, **smollm2, vocab_size=49152, max_position_embeddings=8192)
    # d=5 for the other checks: the synthetic one keeps its own D, one per rate
    overrides = [*target, "runner.output_tokens=96", "sampling.max_tokens=96", "d=5"]
    result = synthetic_step_check(overrides, tmp_path / "checks")
    run_dir = tmp_path / "checks" / "synthetic"
    assert result.passed and "(expected 2.80)" in result.detail
    assert "no prediction: the run saw no GPU" in result.detail  # the fake engine runs on no GPU
    summary = read_summary(run_dir)
    assert [op.batch_size for op in summary.operating_points] == [1, 8]
    on_h100 = replace(summary, numerics=replace(summary.numerics, gpu={"name": "NVIDIA H100 80GB HBM3"}))
    checked = synthetic_check(on_h100, run_dir)
    predicted = [float(part.split("predicted on h100_sxm x")[1].split()[0]) for part in checked.detail.split("; ")[1:]]
    assert len(predicted) == 2
    # no prediction above the point's tokens per step (every verify costs at least a plain step)
    assert all(1.0 < p <= op.tokens_per_step + 0.005 for p, op in zip(predicted, summary.operating_points))
    on_pcie = replace(summary, numerics=replace(summary.numerics, gpu={"name": "NVIDIA H100 PCIe"}))
    assert "NVIDIA H100 PCIe is not in evals.whatif's table" in synthetic_check(on_pcie, run_dir).detail
    missed = replace(summary, al_ci95=[summary.synthetic_acceptance.expected_al + 0.1, 4.0])
    assert not synthetic_check(missed, run_dir).passed


@pytest.mark.parametrize(
    "device, gpu",
    [
        ("NVIDIA H100 80GB HBM3", "h100_sxm"),
        ("NVIDIA H200", "h200_sxm"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA GB200", "gb200"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA A100-SXM4-80GB", "a100_sxm_80gb"),
        ("NVIDIA H100 PCIe", None),
        ("NVIDIA H100 NVL", None),
        ("NVIDIA GH200 480GB", None),
        ("NVIDIA A100-SXM4-40GB", None),
        ("NVIDIA GeForce RTX 4090", None),
    ],
)
def test_a_cuda_device_name_maps_to_the_table_s_gpu_of_that_form_only(device, gpu):
    from speclens.gpu_model.gpus import gpu_for_device

    assert gpu_for_device(device) == gpu
