"""`reports.explain` on pairs whose difference is known by construction, the peers' figures by their
own formulas, and their exports read from fixtures in each tool's layout (tests/data/peers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reports import explain
from speclens.attribution import Tally, split_difference
from speclens.errors import SpeclensError
from speclens.file_formats.peer_exports import read_peer_export
from tests.unit.test_commands_fake import ROWS, SCRIPT, fake_run

PEERS = Path(__file__).resolve().parents[1] / "data" / "peers"
# The run of test_commands_fake's script: 7 drafted steps, 13 accepted.
AL = 1 + 13 / 7


def run_dir(tmp_path: Path, name: str, *overrides: str, script=SCRIPT) -> Path:
    return fake_run(tmp_path / name, *overrides, script=script)[1]


def parts_sum(report: dict) -> float:
    return sum(report["parts"].values())


def test_parts_sum_to_the_difference_and_a_group_at_the_same_rate_adds_nothing():
    groups = {
        "same": (Tally(6, 3), Tally(6, 3)),
        "added at A's rate": (Tally(), Tally(4, 2)),
        "moved": (Tally(2, 2), Tally(5, 2)),
    }
    parts = split_difference(groups)
    al_a, al_b = 1 + 8 / 5, 1 + 15 / 7
    assert sum(parts.values()) == pytest.approx(al_b - al_a, abs=1e-12)
    assert parts["same"] == pytest.approx(0.5 * (0 - 0 + 0 - 0))
    assert abs(parts["moved"]) > abs(parts["added at A's rate"])
    assert split_difference({"x": (Tally(), Tally(1, 1))}) == {}  # A drafted nothing: no AL to split


def test_another_max_tokens_is_named_with_the_share_past_it(tmp_path, capsys):
    short = run_dir(tmp_path, "short", "sampling.max_tokens=8")
    full = run_dir(tmp_path, "full")
    assert explain.main([str(short), str(full), "--out", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "explain.json").read_text())
    # short: q1#0 stops after 2 drafted steps (3+1), q2#0 keeps both (3+3), q1#1 the same (2+1): 13 over 6
    assert report["al_a"] == pytest.approx(1 + 13 / 6) and report["al_b"] == pytest.approx(AL)
    assert report["difference"] == pytest.approx(AL - (1 + 13 / 6))
    assert parts_sum(report) == pytest.approx(report["difference"], abs=1e-12)
    # all of it is q1#0's step from token 8 on (accepted 0), which only the full run has
    assert report["parts"][explain.AFTER_PARTING] == pytest.approx(report["difference"], abs=1e-12)
    # the most consequential first; the fake runner's script file is in another folder
    assert report["settings_differ"] == ["config.sampling.max_tokens", "config.runner.script"]
    assert report["outputs"]["cut_by_max_tokens"] == 2 and report["outputs"]["identical"] == 1
    assert report["outputs"]["parted_at"] == {"q1#0": 8, "q2#0": 8}
    # q1's second turn carries its first answer, which parted: its prompt differs for that reason
    assert (
        report["prompts"]["different_token_ids"] == ["q1#1"] and report["prompts"]["differ_by_an_earlier_answer"] == 1
    )
    assert report["conclusion"].startswith("the difference comes from max_tokens 8 vs ")
    assert "100% of it is in tokens past 8" in report["conclusion"]
    assert report["conclusion"] in (tmp_path / "out" / "explain.md").read_text()
    assert report["conclusion"] in capsys.readouterr().out


def test_prompts_only_in_one_run_carry_the_whole_difference(tmp_path):
    both = run_dir(tmp_path, "both")
    report = explain.explain(both, run_dir(tmp_path, "subset", "dataset.num_requests=1"))
    assert report["al_b"] == pytest.approx(1 + 7 / 5)  # q1's turns alone
    assert report["prompts"] == {
        "shared": 2,
        "only_in_a": 1,
        "only_in_b": 0,
        "same_token_ids": 2,
        "different_token_ids": [],
        "differ_by_an_earlier_answer": 0,
    }
    assert report["parts"][explain.ONLY_A] == pytest.approx(report["difference"], abs=1e-12)
    assert "prompts only in one run" in report["conclusion"]
    assert report["outputs"]["unmatched_a"] == 1 and report["outputs"]["unmatched_b"] == 0
    assert (
        "unmatched (no turn of the same id on the other side, not compared): 1 of A's, 0 of B's"
        in (explain.prompt_lines(report)[2])
    )


def test_the_same_outputs_accepted_otherwise_are_named(tmp_path):
    # q2#0 emits the same 10 tokens with other acceptance: 1 + 1 + (1+1) + (3+1) + (1+1)
    doctored = SCRIPT | {"q2#0": [None, (3, 1), 3, (3, 1)]}
    report = explain.explain(run_dir(tmp_path, "a"), run_dir(tmp_path, "b", script=doctored))
    assert report["outputs"] == {
        "identical": 3,
        "parted": 0,
        "cut_by_max_tokens": 0,
        "not_recorded": 0,
        "unmatched_a": 0,
        "unmatched_b": 0,
        "parted_at": {},
    }
    assert report["al_b"] == pytest.approx(1 + 12 / 8)
    assert report["parts"][explain.IDENTICAL] == pytest.approx(report["difference"], abs=1e-12)
    assert report["conclusion"].startswith("the same outputs were drafted or accepted differently")
    assert "config.runner.script" in report["settings_differ"]


def test_two_runs_of_one_config_explain_to_nothing(tmp_path):
    a = run_dir(tmp_path, "a")
    report = explain.explain(a, a)
    assert report["difference"] == 0 and report["settings_differ"] == []
    assert report["conclusion"] == "the two runs measure the same AL"


def test_the_peers_figures_follow_their_own_formulas(tmp_path):
    summary, _, _ = fake_run(tmp_path)
    peers = summary["peer_figures"]
    # specdec_bench: tokens over chunks per request, EOS stripped (q1#0 ends on an EOS-only chunk)
    q1, q2 = (8 + 5) / (4 + 3), 9 / 4
    assert peers["specdec_bench"]["Average_AL"] == pytest.approx((q1 + q2) / 2)
    assert peers["specdec_bench"]["Category_AL"] == pytest.approx({"coding": q1, "writing": q2})
    assert peers["vllm_bench_serve"]["spec_decode_acceptance_length"] == pytest.approx(AL)
    turns = [1 + 4 / 3, 1 + 3 / 2, 1 + 6 / 2]
    assert peers["aiperf"]["spec_decode_acceptance_length"] == pytest.approx(sum(turns) / 3)
    assert peers["aiperf"]["spec_decode_token_weighted_acceptance_length"] == pytest.approx(AL)
    assert peers["aiperf"]["speed_bench_report"] == pytest.approx(
        {"coding": 1 + 7 / 5, "writing": 4.0, "Overall": (1 + 7 / 5 + 4.0) / 2}
    )
    assert summary["al_emitted"] == pytest.approx(AL) and summary["accepted_tokens_cut"] == 0
    assert summary["al_by_output_position"] == [{"from": 0, "to": 32, "n_steps": 7, "al": pytest.approx(AL)}]


def test_accepted_tokens_cut_at_max_tokens_are_counted_beside_al(tmp_path):
    summary, _, _ = fake_run(tmp_path, "sampling.max_tokens=8")
    # q2#0's last step accepted 3 from token 6 on; the output kept 2 of them
    assert summary["accepted_tokens_cut"] == 1
    assert summary["al"] == pytest.approx(1 + 13 / 6) and summary["al_emitted"] == pytest.approx(1 + 12 / 6)


def test_peer_exports_read_from_each_tools_layout():
    serve = read_peer_export(PEERS / "vllm_bench_serve.json")
    assert (serve.tool, serve.figure, serve.al) == ("vllm bench serve", "spec_decode_acceptance_length", 2.8)
    aiperf = read_peer_export(PEERS / "profile_export.jsonl")
    # the warm-up and the failed record are left out, as aiperf does
    assert [t.request_id for t in aiperf.turns] == ["c-a", "c-b"] and aiperf.al == pytest.approx(2.875)
    assert (aiperf.turns[0].accepted, aiperf.turns[0].drafts, aiperf.turns[1].category) == (7, 4, "math")
    specdec = read_peer_export(PEERS / "acceptance_rate.json")
    assert (specdec.figure, specdec.al) == ("Average_AL", 2.0)  # the last run's entry
    assert {t.request_id: t.al for t in specdec.turns} == {"q1": 1.75, "q2": 2.25}


def test_a_peers_figure_splits_into_definition_and_measurement(tmp_path):
    a = run_dir(tmp_path, "a")
    report = explain.explain(a, PEERS / "acceptance_rate.json")
    on_a = ((8 + 5) / 7 + 9 / 4) / 2
    assert report["peer_formula_on_a"] == pytest.approx(on_a)
    assert report["parts"] == pytest.approx({explain.DEFINITION: on_a - AL, explain.MEASUREMENT: 2.0 - on_a})
    assert report["conclusion"].startswith("the difference is one of definitions")
    assert report["prompts"]["shared"] == 2  # its question ids are the prompt set's
    # Request_AL q1 1.75, q2 2.25 against the formula on A's records: q1 13/7, q2 9/4
    assert report["per_request"]["matched"] == 2
    assert report["per_request"]["largest_differences"][0] == {
        "request": "q1",
        "speclens_records": pytest.approx(13 / 7),
        "peer": 1.75,
    }
    assert report["per_request"]["mean_difference"] == pytest.approx((1.75 - 13 / 7) / 2)
    assert "per request (2 matched by id)" in explain.markdown(report)
    unmatched = explain.explain(a, PEERS / "profile_export.jsonl")
    assert unmatched["parts"][explain.MEASUREMENT] == pytest.approx(2.875 - unmatched["peer_formula_on_a"])
    assert explain.prompt_lines(unmatched) == [
        "prompts and outputs: not matched (aiperf's export names its requests its own way)"
    ]


def test_bad_input_is_one_line_naming_the_file_and_field(tmp_path, capsys):
    a = run_dir(tmp_path, "a")
    broken = tmp_path / "result.json"
    broken.write_text(json.dumps({"backend": "vllm", "num_prompts": 2}))
    assert explain.main([str(a), str(broken), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(broken) in err and "spec_decode_acceptance_length" in err
    other = fake_run(tmp_path / "other", script=SCRIPT)[1]
    target = json.loads((other / "stamp.json").read_text())
    target["fingerprints"]["target"] = "sha256:" + "0" * 64
    (other / "stamp.json").write_text(json.dumps(target))
    with pytest.raises(SpeclensError, match="--allow-different-targets"):
        explain.explain(a, other)
    assert explain.explain(a, other, allow_different_targets=True)["settings_differ"][0] == "fingerprints.target"
    assert ROWS  # the prompt rows the runs share


def test_causes_are_named_in_order_drafter_first_then_lengths(tmp_path):
    # ngram against suffix at another max_tokens: the outputs are cut at 8, but the drafter is the cause
    report = explain.explain(
        run_dir(tmp_path, "ngram"), run_dir(tmp_path, "suffix", "drafter=suffix", "sampling.max_tokens=8")
    )
    differ = report["settings_differ"]
    assert differ[0] == "speculative_config.method" and "config.sampling.max_tokens" in differ
    assert report["conclusion"].startswith(
        "the drafters differ (method ngram vs suffix): 100% of it is in the steps after the outputs part; "
        "also different: max_tokens 128 vs 8"
    )
    # a fake run against a real one: the script explains it, not the threads or dtype that differ too
    real = run_dir(tmp_path, "real", script=SCRIPT | {"q2#0": [None, (3, 1), 3, (3, 1)]})
    stamp = json.loads((real / "stamp.json").read_text())
    stamp["runner"] = "vllm"
    stamp["config"]["engine"]["dtype"] = "float32"
    (real / "stamp.json").write_text(json.dumps(stamp))
    mixed = explain.explain(run_dir(tmp_path, "fake"), real)
    assert mixed["settings_differ"][0] == "runner" and "config.engine.dtype" in mixed["settings_differ"]
    assert mixed["conclusion"].startswith("the engines differ (runner fake vs vllm): A's acceptance is the fake ")
    assert "100% of it is in identical outputs" in mixed["conclusion"]


def test_a_peers_unrecorded_settings_are_unknown_not_different(tmp_path, capsys):
    a = run_dir(tmp_path, "a")
    report = explain.explain(a, PEERS / "profile_export.jsonl")
    assert report["settings_differ"] == [] and report["settings"] == {}
    # D, the drafter and the sampling are A's settings the peer does not record
    for key in ("config.d", "speculative_config.method", "config.sampling.temperature"):
        assert key in report["settings_unknown"]
    assert report["settings_unknown"][0] == "runner"  # most consequential first
    # a vllm bench serve figure far from its formula on A's records: the peer's own measurement
    served = tmp_path / "result.json"
    served.write_text(json.dumps({"backend": "vllm", "spec_decode_acceptance_length": 3.9}))
    measured = explain.explain(a, served)
    assert abs(measured["parts"][explain.MEASUREMENT]) > abs(measured["parts"][explain.DEFINITION])
    assert measured["conclusion"].startswith("the peer measured other acceptance (")
    assert f"does not record {len(measured['settings_unknown'])} of A's settings" in measured["conclusion"]
    assert explain.main([str(a), str(PEERS / "profile_export.jsonl"), "--out", str(tmp_path / "out")]) == 0
    shown = capsys.readouterr().out
    assert "settings that differ: none" in shown
    assert "settings unknown on B's side (its export does not record them): runner, " in shown
