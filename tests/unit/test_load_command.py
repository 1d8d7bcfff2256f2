"""`python -m evals.load` on the fake engine (issue 67): open-loop stages on its scripted clock, the
crossover and load policy from its arms, the schedule arm, resume after a death, bad input refused
before any request."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from evals.load import main as load_main
from evals.pipeline.compose import to_run_config
from evals.pipeline.plan import make_plan
from reports.build import build
from reports.load_ladder import in_flight_at, mean_in_flight
from runners.fake_engine import FakeEngine
from speclens.errors import ConfigError
from speclens.figures.load_ladder import crossover_rate
from speclens.file_formats.load_file import LOAD_REQUESTS_FILE, read_load_file
from speclens.file_formats.schedule_file import k_at
from speclens.generation import SamplingSpec, TurnRequest
from tests.unit.conftest import compose_run, fake_overrides
from tests.wandb_offline import offline_runs

ROWS = [
    {"question_id": f"q{i}", "category": "coding" if i % 2 else "writing", "turns": [f"task {i}"]} for i in range(6)
]
RATES = [1, 4, 16, 64]
# The fake target's config: with a model's shape, so the step-cost model can be calibrated on it.
SHAPE = {"num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 64}
LADDER = ["drafter=ngram", "d=3", f"request_rates=[{','.join(map(str, RATES))}]", "stage.requests=12"]


def load(tmp_path, *overrides: str, out=None) -> int:
    out = out or tmp_path / "ladder"
    try:
        return load_main([*fake_overrides(tmp_path, ROWS, **SHAPE), *LADDER, *overrides, f"hydra.run.dir={out}"])
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
        ("stage.requests=null stage.seconds=0.5", "stage.seconds=0.5: at request_rates' lowest rate (1.0/s) a stage"),
    ],
)
def test_bad_input_is_one_line_exit_2_before_any_request(tmp_path, capsys, override, said):
    assert load(tmp_path, *override.split()) == 2
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


def test_the_report_of_a_ladder_leads_with_its_policy_and_draws_both_figures_against_the_rate(ladder):
    html_file, md_file = build(ladder)
    md = md_file.read_text()
    policy = json.loads((ladder / "serve.json").read_text())["load_policy"]
    assert "## Where speculation stops paying under load" in md
    assert (
        f"**load policy (fake, poisson arrivals): speculate with ngram d=3 below {policy['speculate_below_rate']:.2f} req/s"
        in md
    )
    for figure in ("output_tokens_per_s", "tpot_ms"):
        assert (ladder / f"report_load_{figure}.png").read_bytes()[:4] == b"\x89PNG"
    html = html_file.read_text()
    # the interactive charts mark the crossover of ngram d=3 at its rate
    overall = next(row for row in read_load_file(ladder).crossover if row.domain == "all")
    assert "ngram d=3 crossover" in html and f"{overall.throughput_rate}" in html
    # its label on the log axis at log10 of the rate (where Plotly puts annotations), beside the line
    assert f"{math.log10(overall.throughput_rate)}" in html


def test_a_ladder_logs_its_stages_crossover_and_policy_to_wandb(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "logged"
    assert load(tmp_path, "logger=wandb", "request_rates=[1,64]", "schedule_arm=false", out=out) == 0
    (run,) = offline_runs(out)
    found = read_load_file(out)
    overall = next(row for row in found.crossover if row.domain == "all")
    assert run.job_type == "load" and "source=fake" in run.tags and "drafter=ngram" in run.tags
    assert run.summary["crossover/throughput_rate/ngram_d3/all"] == pytest.approx(overall.throughput_rate)
    policy = json.loads((out / "serve.json").read_text())["load_policy"]
    assert run.summary["load_policy/speculate_below_rate"] == pytest.approx(policy["speculate_below_rate"])
    files = next(out.rglob("offline-run-*")) / "files"
    table = json.loads((files / run.history["table/stages.path"]).read_text())
    rates = table["columns"].index("output_tokens_per_s")
    assert sorted(row[rates] for row in table["data"]) == pytest.approx(
        sorted(s.output_tokens_per_s for s in found.stages)
    )


def test_a_drafter_that_never_pays_gets_a_plain_policy_and_no_schedule_arm(tmp_path, capsys):
    out = tmp_path / "never"
    # drafting costs 40 ms a token: speculation loses at the lowest rate already
    assert load(tmp_path, "runner.draft_token_ms=40", "request_rates=[1,4]", out=out) == 0
    found = read_load_file(out)
    overall = next(row for row in found.crossover if row.domain == "all")
    assert overall.below_ladder and overall.throughput_rate == 1.0
    policy = json.loads((out / "serve.json").read_text())["load_policy"]
    assert policy["below_ladder"] and policy["num_speculative_tokens_per_batch_size"] == [[1, 64, 0]]
    assert {s.arm for s in found.stages} == {"plain", "static"}  # one draft length everywhere: no arm of its own
    captured = capsys.readouterr()
    assert "the schedule arm is skipped" in captured.err
    assert captured.out.startswith("load policy (fake, poisson arrivals): serve plain decoding; ngram d=3 did not pay")


def test_the_ladder_prediction_benchmark_scores_a_simulated_ladder_against_a_measured_one(ladder, capsys):
    """benchmarks/ladder_prediction.py on the fake engine: calibrated on a fake run of the same
    prompts, it prints each stage's error and the crossover both ways."""
    import runpy

    from evals.pipeline.run_job import run

    calibration = ladder.parent / "calibration"
    overrides = [
        *fake_overrides(ladder.parent, ROWS, **SHAPE),
        "drafter=ngram",
        "d=3",
        "baseline=true",
        "batch_sizes=[1,2,4,6]",
    ]
    run(compose_run(*overrides), calibration, progress=lambda label: None)
    capsys.readouterr()
    module = runpy.run_path("benchmarks/ladder_prediction.py", run_name="ladder_prediction")
    assert module["main"]([str(ladder), str(calibration)]) == 0
    out = capsys.readouterr().out
    assert "(fake); predicted on this machine calibrated from" in out
    assert "per stage (predicted / measured - 1): median |error| output tokens/s" in out
    # every plain and static stage of the ladder is compared, 2 arms x 4 rates
    assert "over 8 stages" in out and "crossover ngram d=3 throughput_rate: measured " in out


def test_a_servers_gauges_are_read_through_the_stage_and_the_warmups_part_left_out(monkeypatch):
    import threading

    from evals.pipeline import ladder as ladder_module
    from runners.server_records import gauges

    page = (
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
        'vllm:num_requests_waiting{engine="0",model_name="m"} 2.0\n'
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25\n'
        "vllm:spec_decode_num_drafts_total 7.0\n"
    )
    assert gauges(page) == {"in_flight": 5.0, "kv_cache_usage": 0.25}
    assert gauges("vllm:spec_decode_num_drafts_total 7.0\n") == {}

    enough = threading.Event()

    class Reporting:
        calls = 0

        def load_gauges(self):
            self.calls += 1
            if self.calls > 4:
                enough.set()
            return {"in_flight": float(self.calls)}

    monkeypatch.setattr(ladder_module, "GAUGE_INTERVAL_S", 0.001)
    with ladder_module.GaugeSampler(Reporting()) as sampler:
        assert enough.wait(30)
    held = sampler.series("in_flight", 0.0)
    assert held[:4] == [2.0, 3.0, 4.0, 5.0]  # the first call only asks whether it reports
    assert sampler.series("in_flight", 1e9) == [] and sampler.series("kv_cache_usage", 0.0) == []

    class Silent:
        def load_gauges(self):
            return None

    with ladder_module.GaugeSampler(Silent()) as quiet_sampler:
        pass
    assert quiet_sampler.samples == [] and quiet_sampler._thread is None


def test_the_peer_benchmark_reads_guidellms_report_figures():
    import runpy

    module = runpy.run_path("benchmarks/vs_guidellm.py", run_name="vs_guidellm")

    def stat(mean, median):
        return {"successful": {"mean": mean, "median": median}, "errored": {"mean": 0.0, "median": 0.0}}

    report = {
        "benchmarks": [
            {
                "metrics": {
                    "time_per_output_token_ms": stat(70.0, 68.5),
                    "output_tokens_per_second": stat(31.25, 20.0),
                    "request_concurrency": stat(1.7, 2.0),
                }
            }
        ]
    }
    assert module["guidellm_figures"](report) == (68.5, 31.25, 1.7)


def test_the_ladders_report_opens_offline_policy_first_both_charts_drawn(ladder):
    from reports.build import main as build_main
    from tests.unit.test_report import opened

    assert build_main([str(ladder)]) == 0
    page = opened(ladder / "report.html")
    shot = ladder / "report.png"
    assert page["ready"] == "1" and page["errors"] == "", f"{page} (screenshot: {shot})"
    assert page["first-section"] == "where-speculation-stops-paying-under-load", shot
    assert page["charts"] == page["charts-rendered"] == "2", f"{page} ({shot})"
    assert int(page["scroll-width"]) <= int(page["inner-width"]) == 1280, f"overflows: {page} ({shot})"
