"""Issue 67's ladder logic on scripted arms: the crossover where speculation stops paying (its
point, interval and the cases it is not reached or gone already), saturation, Little's law,
goodput, the arrival processes, the ladder's keys refused in one line, and load.json's record."""

from __future__ import annotations

import json
import statistics

import pytest

from speclens.arrivals import arrival_offsets
from speclens.errors import ConfigError, CorruptRecord
from speclens.figures.load_ladder import (
    ServedRequest,
    crossover,
    crossover_rate,
    goodput,
    littles_law_gap,
    saturated,
    stage_figures,
)
from speclens.file_formats.load_file import (
    LOAD_FILE,
    CrossoverRow,
    LoadStage,
    Spread,
    read_load_file,
    write_load_file,
)
from speclens.load_config import LoadConfig, SloConfig, StageConfig, check_ladder
from speclens.provenance import Provenance

RATES = [0.5, 1.0, 2.0, 4.0]
SERVED = Provenance(
    source="measured", runner="server", engine="vllm", engine_version="0.32.0", dtype="float32", model_runner="v1"
)


def test_the_crossover_is_where_the_lead_changes_sign_interpolated_between_rungs():
    # the drafter leads by 30, 20, 10 tok/s, then trails by 30: the lead reaches 0 a quarter of the way from 2 to 4
    assert crossover_rate(RATES, [30.0, 20.0, 10.0, -30.0]) == (pytest.approx(2.5), False)
    # exactly zero at a rung: that rung
    assert crossover_rate(RATES, [5.0, 0.0, -1.0, -2.0]) == (1.0, False)
    # never overtaken up to the top rate, or gone at the lowest already (an upper bound)
    assert crossover_rate(RATES, [5.0, 4.0, 3.0, 2.0]) == (None, False)
    assert crossover_rate(RATES, [-1.0, 4.0, 3.0, 2.0]) == (0.5, True)


def test_scripted_arms_give_the_throughput_and_tpot_crossovers_with_intervals():
    # output tokens/s per repeat: speculation's lead shrinks with load and turns at 3/s (halfway 2..4)
    spec = [[130, 132, 128], [150, 152, 148], [170, 171, 169], [190, 191, 189]]
    plain = [[100, 101, 99], [130, 131, 129], [160, 161, 159], [200, 201, 199]]
    found = crossover(RATES, spec, plain, higher_is_better=True, seed=1)
    assert found.rate == pytest.approx(2.0 + 2.0 * 10 / (10 + 10))
    assert found.reached and not found.below_ladder and found.advantage_at_top == pytest.approx(-10.0)
    lo, hi = found.interval
    assert 2.0 < lo <= found.rate <= hi < 4.0 and found.reached_share == 1.0
    # the same samples and seed: the same interval; TPOT (lower is better) never turns here
    assert crossover(RATES, spec, plain, True, seed=1).interval == found.interval
    tpot_spec, tpot_plain = [[20, 21], [22, 23], [25, 26], [28, 29]], [[30, 31], [31, 32], [33, 34], [36, 37]]
    tpot = crossover(RATES, tpot_spec, tpot_plain, higher_is_better=False, seed=1)
    assert (tpot.rate, tpot.interval, tpot.reached_share) == (None, None, 0.0)
    assert tpot.advantage_at_top == pytest.approx(8.0)  # the drafter is still 8 ms faster per token at 4/s


def test_a_noisy_crossover_says_how_often_the_resamples_reach_it():
    # at the top rate the drafter's repeats scatter widely: its mean still leads (195 vs 190), and
    # about a third of the resamples see plain decoding overtake it there
    spec = [[130], [150], [170], [195, 215, 175, 235, 155]]
    plain = [[100], [130], [160], [190, 192, 188, 191, 189]]
    found = crossover(RATES, spec, plain, higher_is_better=True, seed=3)
    assert found.rate is None and found.advantage_at_top == pytest.approx(5.0)
    assert 0.2 < found.reached_share < 0.5


def test_a_stage_short_of_its_rate_or_with_a_growing_queue_is_saturated():
    # against what a server keeping up with the stage's arrivals would achieve: 5 % short is the bound
    assert not saturated(4.0, 3.85) and saturated(4.0, 3.75)
    steady, growing = [3, 4, 3, 4, 3, 4, 3, 4, 3], [1, 2, 2, 4, 5, 6, 8, 9, 11]
    assert not saturated(4.0, 4.0, steady) and saturated(4.0, 4.0, growing)


def test_littles_law_and_goodput():
    # 2 requests/s for 1.5 s each hold 3 in flight
    assert littles_law_gap(2.0, 1.5, 3.0) == pytest.approx(0.0)
    assert littles_law_gap(2.0, 1.5, 2.5) == pytest.approx(0.2)
    assert littles_law_gap(2.0, 1.5, 0.0) is None
    ttft, tpot = [100, 300, 120, 90], [20, 25, None, 40]
    # TTFT <= 200 and TPOT <= 30: the first and third (one output token: no TPOT), over 2 s
    assert goodput(ttft, tpot, 2.0, 200, 30) == pytest.approx(1.0)
    assert goodput(ttft, tpot, 2.0, None, None) == pytest.approx(2.0)


def test_arrivals_are_seeded_poisson_or_evenly_spaced():
    assert arrival_offsets(4.0, 4, "constant") == [0.25, 0.5, 0.75, 1.0]
    times = arrival_offsets(2.0, 4000, "poisson", seed=7)
    assert times == arrival_offsets(2.0, 4000, "poisson", seed=7) != arrival_offsets(2.0, 4000, "poisson", seed=8)
    gaps = [b - a for a, b in zip([0.0, *times], times)]
    # exponential gaps of mean 1/rate: their mean and standard deviation both 0.5 (within 5 % over 4,000)
    assert statistics.mean(gaps) == pytest.approx(0.5, rel=0.05)
    assert statistics.stdev(gaps) == pytest.approx(0.5, rel=0.05)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"request_rates": [1, 0.5]}, r"request_rates=\[1, 0.5\]: give the rates in increasing order, e.g. \[0.5, 1\]"),
        ({"request_rates": [0.5, 0.5]}, r"each rate once"),
        ({"request_rates": [0, 1]}, r"0 is not a rate; each must be a finite number > 0"),
        ({"request_rates": []}, r"request_rates=\[\]: give at least one rate"),
        ({"arrivals": "bursty"}, r"arrivals=bursty: one of poisson, constant"),
        ({"repeats": 0}, r"repeats=0: must be a whole number >= 1"),
        ({"stage": StageConfig(seconds=1.0)}, r"stage.seconds=1.0: .* expects 0.50 requests, too short"),
        ({"stage": StageConfig(requests=8, seconds=10.0)}, r"give one of them"),
        ({"stage": StageConfig(requests=0)}, r"stage.requests=0: must be a whole number >= 1"),
        ({"stage": StageConfig(requests=10**6)}, r"stage.requests=1000000: at most 10000 requests a stage"),
        ({"stage": StageConfig(seconds=1e9)}, r"stage.seconds=1e\+09: at request_rates' top rate \(4/s\)"),
        ({"stage": StageConfig(warmup_requests=-1)}, r"stage.warmup_requests=-1"),
        # (an unbounded warm-up held the fuzz test's worker past 20 GiB and CI's machine killed it)
        ({"stage": StageConfig(warmup_requests=93164613360)}, r"stage.warmup_requests=93164613360: at most 10000"),
        ({"repeats": 10**6}, r"repeats=1000000: at most 100; each repeat runs the whole ladder again"),
        ({"slo": SloConfig(tpot_ms=0)}, r"slo.tpot_ms=0: must be a finite number of milliseconds > 0"),
        ({"slo": SloConfig(ttft_ms=float("nan"))}, r"slo.ttft_ms=nan"),
    ],
)
def test_a_ladder_that_cannot_measure_what_it_asks_is_refused_naming_the_key(change, message):
    check_ladder(LoadConfig())  # the defaults measure
    with pytest.raises(ConfigError, match=message):
        check_ladder(LoadConfig(**change))


def stage(**change) -> LoadStage:
    row = dict(
        drafter="ngram",
        d=3,
        arm="static",
        request_rate=2.0,
        arrivals="poisson",
        n_requests=32,
        achieved_rate=1.96,
        ttft_ms=Spread(80.0, 120.0, 200.0),
        tpot_ms=Spread(20.0, 25.0, 30.0),
        itl_ms=Spread(18.0, 40.0, 60.0),
        latency_s=Spread(1.1, 1.4, 1.9),
        output_tokens_per_s=150.0,
        mean_in_flight=2.3,
        saturated=False,
        seconds=16.3,
        provenance=SERVED,
    )
    return LoadStage(**(row | change))


def test_load_json_round_trips_and_a_damaged_one_is_refused_in_one_line(tmp_path):
    crossing = CrossoverRow(
        drafter="ngram",
        d=3,
        domain="all",
        throughput_rate=3.0,
        throughput_interval=[2.6, 3.4],
        tpot_rate=None,
        reached=True,
        throughput_lead_at_top=-10.0,
        tpot_lead_at_top_ms=8.0,
        provenance=SERVED,
    )
    write_load_file([stage(), stage(drafter="none", d=None, arm="plain")], [crossing], tmp_path)
    back = read_load_file(tmp_path)
    assert back.stages[0] == stage() and back.crossover == [crossing]
    data = json.loads((tmp_path / LOAD_FILE).read_text())
    data["stages"][1]["achieved_rate"] = -1.0
    (tmp_path / LOAD_FILE).write_text(json.dumps(data))
    with pytest.raises(CorruptRecord, match=r"load.json: field stages\[1\].achieved_rate=-1.0: must be >= 0"):
        read_load_file(tmp_path)
    del data["stages"][1]["achieved_rate"]
    data["stages"][1].pop("provenance")  # a row that cannot say what it is
    (tmp_path / LOAD_FILE).write_text(json.dumps(data))
    with pytest.raises(CorruptRecord, match=r"does not have the layout of a load ladder"):
        read_load_file(tmp_path)


def test_a_steady_stage_achieves_its_rate_and_its_figures_leave_the_warmup_out():
    # constant arrivals at 2/s, each request 1.5 s end to end (first token at 0.2 s, 14 tokens)
    served = [ServedRequest(i * 0.5, 1.5, 0.2, 14, (0.1,) * 13) for i in range(40)]
    # the two warm-up requests: ten times slower, left out of every figure
    served[:2] = [ServedRequest(i * 0.5, 15.0, 2.0, 14) for i in range(2)]
    stage = stage_figures(served, warmup_requests=2, slo_ttft_ms=250.0)
    assert stage.n_requests == 38 and stage.seconds == pytest.approx(37 * 0.5 + 1.5)
    # 38 completions over the 20 s from the first sent to the last finished
    assert stage.achieved_rate == pytest.approx(38 / 20.0) and not stage.saturated
    assert stage.output_tokens_per_s == pytest.approx(38 * 14 / 20.0)
    assert max(stage.latency_s) == 1.5 and stage.tpot_s == pytest.approx((1.3 / 13,) * 38)
    # the client's time average in flight (57 request-seconds over 20 s) is lambda W by construction
    assert stage.mean_in_flight == pytest.approx(2.85)
    assert stage.littles_law_gap == pytest.approx(0.0)
    # the server's gauge, where it reports one, is what Little's law holds: 1.9/s x 1.5 s against 3
    assert stage_figures(served, 2, server_in_flight=[3, 3, 3]).littles_law_gap == pytest.approx((2.85 - 3) / 3)
    assert stage.goodput_rps == pytest.approx(38 / 20.0)  # every measured request met TTFT <= 250 ms


def test_a_server_that_cannot_keep_up_is_a_saturated_stage():
    # offered 4/s, served one at a time in 0.5 s: completions at 2/s and the queue grows
    served, free = [], 0.0
    for i in range(40):
        sent = i * 0.25
        start = max(sent, free)
        free = start + 0.5
        served.append(ServedRequest(sent, free - sent, start - sent + 0.1, 8))
    stage = stage_figures(served)
    assert stage.achieved_rate == pytest.approx(2.0) and stage.saturated
    assert max(stage.latency_s) > 9.0  # the last waited behind the queue


def test_the_server_engines_open_loop_sends_at_the_same_seeded_times_as_before():
    import random

    from runners.server_engine import Arrivals

    # request_rate= runs written before the ladder: request i at the i-th arrival of random.Random(seed)'s
    # exponential gaps; the shared arrivals keep those times, so a run measured again sends alike
    gap, t, before = random.Random(11).expovariate, 0.0, []
    for _ in range(50):
        t += gap(1.5)
        before.append(t)
    assert Arrivals(1.5, 11).offsets_s(50) == before == arrival_offsets(1.5, 50, "poisson", seed=11)
