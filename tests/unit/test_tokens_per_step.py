"""Speedups follow tokens per step, not AL (issue 48): the share of passes that draft, measured into
summary.json and the profiles, carried into every prediction, and the bound it puts on them."""

from __future__ import annotations

import json

import pytest

from evals.whatif import build
from speclens.errors import ConfigError, SpeclensError
from speclens.file_formats.records import read_parquet
from speclens.file_formats.whatif_file import read_whatif_file
from speclens.gpu_model.draft_cost import head_shape
from speclens.gpu_model.gpus import gpu_named
from speclens.gpu_model.model_shape import shape_of
from speclens.gpu_model.step_cost import Hardware, verify_step
from speclens.gpu_model.whatif import Drafting, point, predict
from tests.unit.conftest import compose_run, fake_overrides
from tests.unit.test_whatif import SMALL, write_config

PROMPTS = [
    {"question_id": f"q{i}", "category": "chat", "turns": [f"say something number {i} " * (i + 2)]} for i in range(4)
]
# 8 decode steps per request, 3 of them drafting (d=3): a lookup that finds a match now and then
SPARSE = [None, None, 3, None, 2, None, None, 1]
TARGET = {**SMALL, "num_hidden_layers": 32}


@pytest.fixture(scope="module")
def sparse_run(tmp_path_factory):
    from evals.pipeline.run_job import run

    tmp_path = tmp_path_factory.mktemp("sparse")
    script = {f"{r['question_id']}#0": SPARSE for r in PROMPTS}
    cfg = compose_run(*fake_overrides(tmp_path, PROMPTS, script, **TARGET), "drafter=ngram", "d=3", "batch_sizes=[2]")
    out = tmp_path / "run"
    summary = run(cfg, out, progress=lambda label: None)
    return summary, out


def test_the_share_of_passes_that_draft_gives_the_runs_tokens_per_step(sparse_run):
    summary, out = sparse_run
    requests = read_parquet(out / "requests.parquet")
    # each request: its prefill pass and 8 decode steps, 3 of them drafted
    assert list(requests.target_steps) == [9] * 4 and list(requests.drafted_steps) == [3] * 4
    assert summary.draft_share == pytest.approx(3 / 9)
    assert summary.by_domain["chat"].draft_share == pytest.approx(3 / 9)
    # AL = 1 + 6/3 = 3 over the drafted steps; tokens per step counts every pass: (9 + 6) / 9
    assert summary.al == pytest.approx(3.0) and summary.tokens_per_step == pytest.approx(15 / 9)
    assert 1 + summary.draft_share * (summary.al - 1) == pytest.approx(summary.tokens_per_step)
    profiles = json.loads((out / "speculation_profile.json").read_text())["profiles"]
    whole = next(p for p in profiles if p["domain"] == "all" and p["segment"] == "all")
    assert (whole["draft_share"], whole["tokens_per_step"]) == pytest.approx((3 / 9, 15 / 9))


def test_whatif_on_a_sparse_lookup_run_predicts_no_speedup_above_its_tokens_per_step(sparse_run, tmp_path):
    summary, out = sparse_run
    result, _ = build([str(out), "gpu=h200_sxm", "batch_sizes=[1,8,64]", "context_len=1024", f"out={tmp_path}"])
    at_measured = [p for p in result["points"] if p["d"] == 3]
    assert at_measured and all(p["tokens_per_step"] == pytest.approx(summary.tokens_per_step) for p in at_measured)
    assert max(p["speedup"] for p in result["points"]) <= summary.tokens_per_step
    # counted as AL, the same acceptance would have promised more than the drafter can give
    assert max(p["al"] for p in at_measured) == pytest.approx(3.0)
    assert result["draft_shares"]["ngram"]["draft_share"] == pytest.approx(3 / 9)
    assert any("drafts on 33% of target passes" in note for note in result["notes"])


def test_a_step_without_a_draft_costs_a_plain_step_on_v1_and_a_full_verify_on_v2():
    target, hw = shape_of(TARGET), Hardware(gpu_named("h100_sxm"))
    plain = verify_step(target, 8, 0, 2048, hw).total_ms
    verify = verify_step(target, 8, 3, 2048, hw).total_ms
    v1 = point(Drafting("ngram", {3: 2.6}, draft_share=0.35), 3, 8, 2048, target, hw)
    v2 = point(Drafting("ngram", {3: 2.6}, draft_share=0.35, undrafted="verify"), 3, 8, 2048, target, hw)
    lookup = v1["t_draft_ms"]
    assert v1["t_step_ms"] == pytest.approx(0.35 * (verify + lookup) + 0.65 * (plain + lookup))
    assert v2["t_step_ms"] == pytest.approx(verify + lookup)
    assert v1["tokens_per_step"] == v2["tokens_per_step"] == pytest.approx(1 + 0.35 * 1.6)
    assert v2["speedup"] < v1["speedup"]


@pytest.mark.parametrize("gpu", ["h100_sxm", "h200_sxm", "l40s"])
def test_no_predicted_speedup_exceeds_its_tokens_per_step_where_verifying_costs_at_least_a_plain_step(gpu):
    target, hw = shape_of(TARGET), Hardware(gpu_named(gpu))
    head = head_shape("eagle3", target, None)
    checked = 0
    for drafter, draft in (("ngram", None), ("eagle3", head), ("mtp", None)):
        for share in (0.2, 0.35, 0.9, 1.0):
            for undrafted in ("plain", "verify"):
                drafting = Drafting(drafter, {1: 1.9, 3: 3.4, 7: 5.5}, draft, draft_share=share, undrafted=undrafted)
                for p in predict([drafting], target, hw, [1, 8, 64, 256], [512, 8192]):
                    assert p["tokens_per_step"] == pytest.approx(1 + share * (p["al"] - 1))
                    if p["t_verify_ms"] >= p["t_plain_ms"]:
                        assert p["speedup"] <= p["tokens_per_step"]
                        checked += 1
    assert checked == 3 * 4 * 2 * 3 * 4 * 2


def test_a_given_acceptance_takes_a_draft_share_and_a_bad_one_is_one_line(tmp_path):
    target = write_config(tmp_path / "target", TARGET)
    args = [f"target.model={target}", "gpu=h200_sxm", "drafter=ngram", "al=2.6", "d=3", "batch_sizes=[1]"]
    result, _ = build([*args, "draft_share=0.35"])
    (p,) = result["points"]
    assert (p["draft_share"], p["tokens_per_step"]) == pytest.approx((0.35, 1.56))
    full, _ = build(args)
    assert full["points"][0]["tokens_per_step"] == pytest.approx(2.6)
    for bad, shown in (("0", "0"), ("1.5", "1.5"), ("true", "true"), ("abc", '"abc"')):
        with pytest.raises(ConfigError, match=f"^draft_share={shown}: the share of target passes"):
            build([*args, f"draft_share={bad}"])
    # model_runner= says what the 65 % of steps without a draft cost: a plain step (V1), a verify (V2)
    v1, _ = build([*args, "draft_share=0.35", "model_runner=v1"])
    v2, _ = build([*args, "draft_share=0.35", "model_runner=v2"])
    assert v1["points"][0]["speedup"] == pytest.approx(p["speedup"])  # V1 is the default
    assert v2["points"][0]["speedup"] < v1["points"][0]["speedup"]
    assert v2["draft_shares"]["ngram"]["undrafted_step"] == "verify"
    with pytest.raises(ConfigError, match="^model_runner=v3: one of v1, v2"):
        build([*args, "model_runner=v3"])


def test_a_profile_without_a_draft_share_is_taken_as_drafting_every_step_and_said(tmp_path):
    target = write_config(tmp_path / "target", TARGET)
    old = {"drafter": "ngram", "d": 3, "domain": "all", "segment": "all", "al": 2.6, "marginal": [0.8, 0.5, 0.3]}
    (tmp_path / "speculation_profile.json").write_text(json.dumps({"schema_version": 1, "profiles": [old]}))
    result, _ = build([str(tmp_path), f"target.model={target}", "gpu=h200_sxm", "batch_sizes=[1]", "d=3"])
    assert result["points"][0]["tokens_per_step"] == pytest.approx(2.6)
    assert any("speedups are upper bounds" in note for note in result["notes"])
    for given in ("draft_share=0.5", "model_runner=v2"):
        with pytest.raises(ConfigError, match=f"{given.split('=')[0]}= goes with drafter="):
            build([str(tmp_path), f"target.model={target}", "gpu=h200_sxm", given])


def test_v1_and_v2_n_gram_replays_give_each_runners_own_share_of_drafting_passes(tmp_path):
    from evals.pipeline.compose import compose_config
    from evals.replay import replay

    rows = [{"question_id": f"q{i}", "category": "chat", "turns": [f"task {i}"]} for i in range(4)]
    settings = ["drafter=ngram", "d_max=3", "runner.output_tokens=120", "sampling.max_tokens=120"]
    curves = replay(compose_config([*fake_overrides(tmp_path, rows), *settings], "replay"), tmp_path / "replay")
    whole = curves[(curves.domain == "all") & (curves.segment == "all")]
    v1, v2 = (whole[whole.proposer == p].set_index("d") for p in ("v1", "v2"))
    for d in (1, 2, 3):
        # V1 proposes only where it finds a match: a high AL over few passes; V2 proposes D on every
        # decode step (padding where it finds none): a low AL over all of them but the prefill's
        assert v1.draft_share[d] < 0.5 < 0.95 < v2.draft_share[d] < 1
        assert v1.al[d] > v2.al[d]
        for curve in (v1, v2):
            assert 1 + curve.draft_share[d] * (curve.al[d] - 1) == pytest.approx(curve.tokens_per_step[d], abs=0.02)


# -- profiles NVIDIA's planners read, both ways ----------------------------------------------------


def test_a_runs_profile_carries_what_the_planners_ask_and_round_trips(sparse_run, tmp_path):
    from speclens.file_formats.profile_file import read_profiles

    _, out = sparse_run
    written = json.loads((out / "speculation_profile.json").read_text())["profiles"]
    whole = next(p for p in written if p["domain"] == "all" and p["segment"] == "all")
    assert whole["method"] == "ngram" and whole["max_num_speculative_tokens"] == 3
    marginal = whole["marginal"]
    assert whole["acceptance_length_by_k"] == pytest.approx({str(k): 1 + sum(marginal[:k]) for k in (1, 2, 3)})
    conditions = whole["measurement_conditions"]
    assert (conditions["drafter"], conditions["runner"], conditions["temperature"]) == ("ngram", "fake", 0.0)
    assert conditions["dataset"] == "jsonl" and conditions["n_requests"] == 4
    # read back by speclens: the same profiles
    assert read_profiles(out) == written


def test_a_model_optimizer_layout_profile_is_read_as_acceptance_and_given_to_dynamo(tmp_path, capsys):
    from evals.whatif import main
    from speclens.file_formats.profile_file import dynamo_flags, read_profiles

    theirs = {
        "method": "eagle3",
        "num_speculative_tokens": 3,
        "conditional_accept_rates": [0.8, 0.75, 0.5],
        "mean_accept_length": 2.85,
        "measurement_conditions": {"dataset": "mt_bench"},
    }
    folder = tmp_path / "theirs"
    folder.mkdir()
    (folder / "speculation_profile.json").write_text(json.dumps(theirs))
    (read,) = read_profiles(folder)
    assert read["drafter"] == "eagle3" and read["d"] == 3
    assert read["marginal"] == pytest.approx([0.8, 0.6, 0.3]) and read["al"] == pytest.approx(2.7)
    target = write_config(tmp_path / "target", TARGET)
    assert main([str(folder), f"target.model={target}", "gpu=h200_sxm", "batch_sizes=[1]", f"out={tmp_path}"]) == 0
    result = read_whatif_file(tmp_path)
    assert [p["al"] for p in result["points"]] == pytest.approx([1.8, 2.4, 2.7])
    flags = "--aic-nextn 3 --aic-nextn-accept-rates 0.8,0.75,0.5,0,0"
    assert result["dynamo_flags"] == {"eagle3": flags} and flags in capsys.readouterr().out
    # the flags carry the conditional rates back: their running product is the marginal again
    rates = [float(r) for r in flags.split()[-1].split(",")][:3]
    assert [rates[0], rates[0] * rates[1], rates[0] * rates[1] * rates[2]] == pytest.approx(read["marginal"])
    assert dynamo_flags([0.9, None], 7).startswith("--aic-nextn 5 --aic-nextn-accept-rates 0.9,0,0,0,0")
    # and as synthetic acceptance for a run of that drafter and d
    from evals.pipeline.synthetic import profile_rates

    assert profile_rates(folder, "eagle3", 3)[0] == pytest.approx([0.8, 0.6, 0.3])


@pytest.mark.parametrize(
    "theirs, said",
    [
        ({"num_speculative_tokens": 0, "marginal_accept_rates": []}, "num_speculative_tokens=0 is not a draft length"),
        ({"num_speculative_tokens": 2, "marginal_accept_rates": [0.5, 0.7]}, "not 2 non-increasing rates in"),
        ({"num_speculative_tokens": 2, "marginal_accept_rates": [0.5]}, "not 2 non-increasing rates in"),
        ({"num_speculative_tokens": 2}, "neither marginal_accept_rates nor conditional_accept_rates"),
    ],
)
def test_a_broken_foreign_profile_is_one_line_naming_the_file_and_the_rule(tmp_path, theirs, said):
    folder = tmp_path / "theirs"
    folder.mkdir()
    (folder / "speculation_profile.json").write_text(json.dumps(theirs))
    target = write_config(tmp_path / "target", TARGET)
    with pytest.raises(SpeclensError, match=said) as caught:
        build([str(folder), f"target.model={target}", "gpu=h200_sxm"])
    assert "speculation_profile.json" in str(caught.value)
