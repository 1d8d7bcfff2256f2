"""`python -m evals.load` on the fake engine (issue 67): open-loop stages on its scripted clock, the
crossover and load policy from its arms, the schedule arm, resume after a death, bad input refused
before any request."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from evals.load import main as load_main
from evals.pipeline.compose import to_run_config
from evals.pipeline.ladder import LOAD_REQUESTS_FILE
from evals.pipeline.plan import make_plan
from reports.load_ladder import in_flight_at, mean_in_flight
from runners.fake_engine import FakeEngine
from speclens.errors import ConfigError
from speclens.figures.load_ladder import crossover_rate
from speclens.file_formats.load_file import read_load_file
from speclens.file_formats.schedule_file import k_at
from speclens.generation import SamplingSpec, TurnRequest
from tests.unit.conftest import compose_run, fake_overrides

ROWS = [
    {"question_id": f"q{i}", "category": "coding" if i % 2 else "writing", "turns": [f"task {i}"]} for i in range(6)
]
RATES = [1, 4, 16, 64]
LADDER = ["drafter=ngram", "d=3", f"request_rates=[{','.join(map(str, RATES))}]", "stage.requests=12"]


def load(tmp_path, *overrides: str, out=None) -> int:
    out = out or tmp_path / "ladder"
    try:
        return load_main([*fake_overrides(tmp_path, ROWS), *LADDER, *overrides, f"hydra.run.dir={out}"])
    except SystemExit as ended:  # a Hydra job reports its failure, then exits with its status
        return int(ended.code)


@pytest.fixture(scope="module")
def ladder(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("load")
    import os

    os.environ["SPECLENS_CACHE"] = str(tmp_path / "cache")
    assert load(tmp_path) == 0
    return tmp_path / "ladder"


def stage_rows(found, arm: str) -> dict[float, object]:
    return {s.request_rate: s for s in found.stages if s.arm == arm}


def test_the_crossover_is_where_plain_decodings_output_overtakes_the_drafters(ladder):
    found = read_load_file(ladder)
    assert found.complete and len(found.stages) == 3 * len(RATES)  # plain, ngram d=3, the schedule arm
    plain, spec = stage_rows(found, "plain"), stage_rows(found, "static")
    lead = [spec[r].output_tokens_per_s - plain[r].output_tokens_per_s for r in RATES]
    # the fake's verification costs 1 + D tokens a step: speculation pays at 1/s and loses under load
    assert lead[0] > 0 and lead[-1] < 0
    overall = next(row for row in found.crossover if row.domain == "all")
    expected, below = crossover_rate(RATES, lead)
    assert overall.reached and not below and overall.throughput_rate == pytest.approx(expected)
    lo, hi = overall.throughput_interval
    assert RATES[0] <= lo <= hi <= RATES[-1]
    tpot_lead = [plain[r].tpot_ms.p50 - spec[r].tpot_ms.p50 for r in RATES]
    assert tpot_lead[0] > 0 and overall.tpot_rate is not None
    # per domain too: the prompts span coding and writing
    assert {row.domain for row in found.crossover} == {"all", "coding", "writing"}
    # every row says what it is: fake figures, poisson arrivals
    assert {s.provenance.source for s in found.stages} == {"fake"} and {s.arrivals for s in found.stages} == {"poisson"}
    assert all(s.al is not None for s in spec.values()) and all(s.al is None for s in plain.values())


def test_the_load_policy_maps_the_crossover_onto_the_requests_in_flight(ladder):
    found = read_load_file(ladder)
    policy = json.loads((ladder / "serve.json").read_text())["load_policy"]
    overall = next(row for row in found.crossover if row.domain == "all")
    rate = min(r for r in (overall.throughput_rate, overall.tpot_rate) if r is not None)
    assert policy["speculate_below_rate"] == pytest.approx(rate)
    held = mean_in_flight(found.stages, "ngram", 3)
    switch = max(1, round(in_flight_at(held, rate)))
    assert policy["switch_at_in_flight"] == switch
    schedule = [[1, switch, 3], [switch + 1, 64, 0]]  # engine.max_num_seqs's default on the fake
    assert policy["num_speculative_tokens_per_batch_size"] == schedule
    assert policy["speculative_config"]["num_speculative_tokens_per_batch_size"] == schedule


def test_the_schedule_arm_runs_the_policy_and_serves_like_the_better_static_arm(ladder):
    found = read_load_file(ladder)
    plain, spec, sched = (stage_rows(found, arm) for arm in ("plain", "static", "schedule"))
    for rate in RATES:
        better = max(plain[rate].output_tokens_per_s, spec[rate].output_tokens_per_s)
        assert sched[rate].output_tokens_per_s >= 0.95 * better
    # at the top rate it drafts only in the few steps holding one request (the stage's first and
    # last): within 1 % of plain decoding, and far above the static arm
    top = RATES[-1]
    assert sched[top].output_tokens_per_s == pytest.approx(plain[top].output_tokens_per_s, rel=0.01)
    assert sched[top].output_tokens_per_s > 1.3 * spec[top].output_tokens_per_s


def test_the_ladder_prints_its_decision_first(ladder, capsys):
    # the finished ladder again (the same target and prompt files): nothing runs, its text is printed
    assert load(ladder.parent, out=ladder) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("load policy (fake, poisson arrivals): speculate with ngram d=3 below ")
    assert any(line.startswith("  ngram d=3 [all]: throughput crossover ") for line in out)


def test_a_ladder_that_dies_keeps_its_stages_and_resumes_from_the_first_unfinished(tmp_path, capsys, ladder):
    # stage.seconds sizes the stages by rate: the 9th request (index 8) exists from the second rung on
    seconds = ["stage.requests=null", "stage.seconds=4", "stage.warmup_requests=1"]
    out = tmp_path / "dying"
    assert load(tmp_path, *seconds, "runner.fail_on=q2.8", out=out) == 3
    err = capsys.readouterr().err
    assert "the ladder stopped in arm plain decoding" in err and "resumes from the first unfinished" in err
    kept = read_load_file(out)
    assert not kept.complete and [(s.arm, s.request_rate) for s in kept.stages] == [("plain", 1.0)]
    assert load(tmp_path, *seconds, out=out) == 0
    assert "resuming the ladder" in capsys.readouterr().err
    resumed = read_load_file(out)
    assert resumed.complete and resumed.stages[0] == kept.stages[0]
    # the same ladder measured whole in one go gives the same figures (the fake's clock is scripted)
    whole = tmp_path / "whole"
    assert load(tmp_path, *seconds, out=whole) == 0
    assert read_load_file(whole).stages == resumed.stages
    requests = pd.read_parquet(out / LOAD_REQUESTS_FILE)
    assert len(requests) == sum(s.n_requests for s in resumed.stages)


@pytest.mark.parametrize(
    "override, said",
    [
        ("request_rates=[4,1]", "give the rates in increasing order"),
        ("request_rates=[0,1]", "0 is not a rate"),
        ("slo.tpot_ms=0", "slo.tpot_ms=0: must be a finite number of milliseconds > 0"),
        ("runner=vllm", "runner=vllm: the load ladder sends requests at their arrival times through a server"),
        ("baseline=true", "baseline=true: the ladder always measures plain decoding"),
        ("stage.seconds=0.5", "give one of them"),
    ],
)
def test_bad_input_is_one_line_exit_2_before_any_request(tmp_path, capsys, override, said):
    assert load(tmp_path, override) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("speclens: error: ") and said in err[-1]
    assert not (tmp_path / "ladder").exists()


def test_an_attached_ladder_needs_a_plain_server_for_its_plain_arm(tmp_path, capsys):
    assert load(tmp_path, "runner=server", "runner.url=http://127.0.0.1:9") == 2
    assert "runner.baseline_url=http://host:port" in capsys.readouterr().err


def test_a_ladder_of_another_configuration_in_the_dir_is_refused(capsys, ladder):
    assert load(ladder.parent, "stage.requests=8", out=ladder) == 2
    assert "holds a load ladder of another configuration" in capsys.readouterr().err
    assert read_load_file(ladder).complete  # untouched


def test_the_fakes_open_loop_counts_the_queue_and_its_schedule_drafts_k_of_each_batch():
    script = {f"r{i}#0": [3, 3, 3] for i in range(3)}
    sampling = SamplingSpec(0.0, 1.0, 64, 0)
    requests = [TurnRequest(f"r{i}", 0, (1, 2, 3)) for i in range(3)]
    one_at_a_time = FakeEngine(3, script, limits=(1, 8192))
    results = one_at_a_time.generate(requests, sampling, offsets_s=[0.0, 0.0, 10.0])
    # r1 arrives with r0 but waits for r0's four steps; r2 arrives after both finished
    walls = [s.wall_s for s in one_at_a_time.step_log()]
    assert results[0].latency_s == pytest.approx(sum(walls[:4]))
    assert results[1].latency_s == pytest.approx(sum(walls[:8]))
    assert results[2].latency_s == pytest.approx(sum(walls[8:]))
    # under [[1,1,3],[2,8,0]] two in flight draft nothing: the same answer in plain steps
    scheduled = FakeEngine(3, script, schedule=[[1, 1, 3], [2, 8, 0]])
    both = scheduled.generate(requests[:2], sampling, offsets_s=[0.0, 0.0])
    alone = FakeEngine(3, script).generate(requests[:1], sampling)
    assert [r.output_token_ids for r in both] == [alone[0].output_token_ids] * 2
    assert all(not r.steps for r in both) and both[0].target_steps == 1 + 12
    assert [k_at([[1, 1, 3], [4, 8, 1]], b) for b in (1, 2, 4, 9)] == [3, 3, 1, 1]
    assert np.isclose(alone[0].target_steps, 4)


def test_a_run_takes_the_ladders_policy_as_its_schedule(ladder):
    policy = json.loads((ladder / "serve.json").read_text())["load_policy"]
    overrides = [
        *fake_overrides(ladder.parent, ROWS),
        "drafter=ngram",
        "d=3",
        f"drafter.schedule={ladder / 'serve.json'}",
    ]
    plan = make_plan(to_run_config(compose_run(*overrides)))
    assert plan.schedule == policy["num_speculative_tokens_per_batch_size"]
    with pytest.raises(ConfigError, match="its load policy speculates with ngram, not drafter=suffix"):
        make_plan(to_run_config(compose_run(*overrides, "drafter=suffix")))
