"""Cost decomposition, speedup model and ranking, against hand-computed values from the fake
engine's scripted step times (runners.fake_engine.linear_cost: 10 ms per step + 1 ms per token
processed + 2 ms per drafted token when a drafter ran)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evals.pipeline.run_job import run
from reports.rank import main as rank_main
from reports.ranking_tables import write_ranking
from reports.speedup_ranking import pareto_front, rank
from speclens.config import DEFAULT_DTYPE
from speclens.errors import ConfigError, SpeclensError
from speclens.figures import costs
from speclens.figures.costs import StepTiming
from speclens.file_formats.records import read_parquet
from speclens.file_formats.serve_file import SERVE_FILE, read_serve_file
from tests.unit.conftest import compose_run, fake_overrides

PROMPTS = [
    {"question_id": f"c{i}", "category": "coding", "turns": [f"write function number {i} " * (i + 1)]} for i in range(4)
]
# Every request: 18 tokens after the prefill token, so all passes produce the same outputs.
SCRIPTS = {2: [2] * 6, 1: [1] * 9}


def measure(tmp_path: Path, d: int, *overrides: str, rows=PROMPTS, name=None) -> tuple[dict, Path]:
    script = {f"{r['question_id']}#0": SCRIPTS[d] for r in rows}
    cfg = compose_run(
        *fake_overrides(tmp_path, rows, script, name=f"q{d}", num_attention_heads=8, num_key_value_heads=1),
        "drafter=ngram",
        f"d={d}",
        "batch_sizes=[1,2]",
        "baseline=true",
        *overrides,
    )
    out = tmp_path / "sweep" / (name or f"d={d}")
    summary = run(cfg, out, progress=lambda label: None)
    return summary.to_dict(), out


def prefill_ms(out: Path, batch_size: int) -> float:
    """The prefill steps' cost: 10 ms per step + 1 ms per prompt token, requests taken B at a time."""
    prompts = read_parquet(out / "requests.parquet").query("batch_size == 1").prompt_tokens.tolist()
    waves = [prompts[i : i + batch_size] for i in range(0, len(prompts), batch_size)]
    return sum(10 + sum(w) for w in waves)


def test_cost_decomposition_and_both_speedups_match_hand_computation(tmp_path, engines_started):
    summary, out = measure(tmp_path, 2)
    b1, b2 = summary["operating_points"]
    assert (b1["batch_size"], b2["batch_size"]) == (1, 2)
    # plain step: 10 + B tokens; speculative: 10 + 3B tokens + 2 ms x 2B drafts; verify: 10 + 3B
    for point, plain, spec, verify in ((b1, 11, 17, 13), (b2, 12, 24, 16)):
        assert point["t_verif"]["median_ms"] == pytest.approx(plain)
        assert point["t_step"]["median_ms"] == pytest.approx(spec)
        assert point["t_verif_spec"]["median_ms"] == pytest.approx(verify)
        assert point["t_draft_ms"] == pytest.approx(spec - verify)
        # 19 tokens from 1 prefill + 6 drafted steps per request
        assert point["tokens_per_step"] == pytest.approx(19 / 7)
        assert point["predicted_speedup"] == pytest.approx(plain * (19 / 7) / spec)
        assert point["predicted_speedup_range"] == pytest.approx([plain * (19 / 7) / spec] * 2)
    assert b1["t_verif"]["n"] == 4 * 18 and b2["t_step"]["n"] == 2 * 6
    # at B=1 every request decodes its 18 tokens after the first in 6 steps of 17 ms (speculative)
    # or 18 steps of 11 ms (plain): TPOT 102/18 and 198/18 ms
    assert b1["latency"]["tpot_ms"]["p50"] == pytest.approx(102 / 18)
    assert b1["latency_speedup"] == pytest.approx(198 / 102)
    # measured: same tokens, so the speedup is plain time / speculative time, prefill steps included
    for point, b, plain, spec, steps_plain, steps_spec in (
        (b1, 1, 11, 17, 4 * 18, 4 * 6),
        (b2, 2, 12, 24, 2 * 18, 2 * 6),
    ):
        expected = (prefill_ms(out, b) + steps_plain * plain) / (prefill_ms(out, b) + steps_spec * spec)
        assert point["speedup"] == pytest.approx(expected)
        assert point["speedup_gap"] == pytest.approx(point["predicted_speedup"] / expected - 1)
    assert summary["lossless"]["identical"] is True and summary["lossless"]["n_compared"] == 8
    engine_steps = read_parquet(out / "engine_steps.parquet")
    assert sorted(engine_steps["mode"].unique()) == ["idle", "plain", "speculative", "verify"]
    # a fresh engine for every pass: speculative, plain, zero-cost verify and idle at B = 1 and 2
    methods = [None if spec is None else spec["method"] for spec in engines_started]
    assert methods == ["ngram", "ngram", None, None] + ["custom_class"] * 4


def test_step_timing_median_quartiles_and_predicted_range():
    timing = costs.step_timing(np.array([0.001, 0.002, 0.003, 0.004, 0.005]))
    assert (timing.median_ms, timing.p25_ms, timing.p75_ms) == pytest.approx((3.0, 2.0, 4.0)) and timing.n == 5
    assert costs.step_timing(np.array([0.001] * (costs.MIN_STEADY_STEPS - 1))) is None
    t_verif = StepTiming(median_ms=10.0, p25_ms=9.0, p75_ms=12.0, n=5)
    t_step = StepTiming(median_ms=20.0, p25_ms=18.0, p75_ms=25.0, n=5)
    point, (low, high) = costs.predicted_speedup(2.5, t_verif, t_step)
    assert point == pytest.approx(10 * 2.5 / 20)
    assert low == pytest.approx(9 * 2.5 / 25) and high == pytest.approx(12 * 2.5 / 18)
    assert costs.speedup_gap(1.1, 1.0) == pytest.approx(0.1)


def test_steady_steps_leave_out_prefill_and_partial_batches():
    steps = pd.DataFrame(
        {
            "mode": ["plain"] * 4 + ["verify"] * 2,
            "batch_size": [2] * 6,
            "num_requests": [2, 2, 1, 2, 2, 2],
            "num_tokens": [40, 2, 1, 2, 6, 5],
            "num_draft_tokens": [0, 0, 0, 0, 4, 3],
            "wall_s": [0.5, 0.012, 0.011, 0.013, 0.016, 0.015],
        }
    )
    assert costs.steady_walls(steps, "plain", 2).tolist() == [0.012, 0.013]
    # the verify pass counts only steps where every request verified all D proposals
    assert costs.steady_walls(steps, "verify", 2, d=2).tolist() == [0.016]


def test_the_speedup_account_multiplies_out_to_the_measured_speedup(tmp_path):
    summary, out = measure(tmp_path, 2)
    for point in summary["operating_points"]:
        account = point["speedup_account"]
        factors = account["factors"]
        assert account["product"] == pytest.approx(point["speedup"], rel=1e-12) == account["measured"]
        assert np.prod(list(factors.values())) == pytest.approx(account["product"], rel=1e-12)
        assert factors["steady_state_model"] == point["predicted_speedup"]
        # prefill steps: the speculative pass has 6 decode steps of 17 ms (B=1) per request where
        # plain decoding has 18 of 11 ms, so the same prefill time weighs more in it
        b = point["batch_size"]
        prefill, steps = prefill_ms(out, b), 4 // b
        plain, spec = {1: (11, 17), 2: (12, 24)}[b]
        plain_mix = plain * (steps + 18 * steps) / (prefill + 18 * steps * plain)
        spec_mix = spec * (steps + 6 * steps) / (prefill + 6 * steps * spec)
        assert factors["prefill"] == pytest.approx(spec_mix / plain_mix)
        # every request is as long as the others and steps cost what the script says: nothing else
        for name in ("ramp_up_and_tail", "slow_outliers", "token_yield"):
            assert factors[name] == pytest.approx(1.0)
        coding = point["by_domain"]["coding"]
        assert coding["predicted_corrected"] == pytest.approx(coding["predicted_speedup"] * factors["prefill"])


def test_ranking_orders_by_speedup_with_plain_decoding_ranked_beside(tmp_path):
    measure(tmp_path, 2)
    measure(tmp_path, 1)
    ranking, notes = write_ranking([tmp_path / "sweep"])
    assert {"ranking.csv", "ranking.md", "pareto.png"} <= {p.name for p in (tmp_path / "sweep").iterdir()}
    at_b1 = ranking[(ranking.domain == "all") & (ranking.batch_size == 1)]
    # B=1: d=2 steps cost 6x17 ms per request, d=1 9x14, plain 18x11 (plus the same prefills)
    assert at_b1.drafter.tolist() == ["ngram", "ngram", "none"] and at_b1.d.tolist()[:2] == [2, 1]
    assert at_b1["rank"].tolist() == [1, 2, 3]
    assert at_b1.speedup_source.tolist() == ["fake"] * 3  # measured by the fake engine, said so
    d1 = at_b1[at_b1.d == 1].iloc[0]
    assert d1.t_verif_ms == pytest.approx(11) and d1.t_verif_spec_ms == pytest.approx(12)
    assert d1.t_draft_ms == pytest.approx(2) and d1.draft_overhead == pytest.approx(2 / 14)
    assert d1.predicted_speedup == pytest.approx(11 * (19 / 10) / 14)
    assert d1.serve_memory == "none" and d1.training_cost == "none"
    csv = pd.read_csv(tmp_path / "sweep" / "ranking.csv")
    assert {
        "domain",
        "batch_size",
        "drafter",
        "d",
        "rank",
        "speedup",
        "speedup_source",
        "predicted_speedup",
        "al",
        "tokens_per_step",
        "t_verif_ms",
        "t_verif_spec_ms",
        "t_draft_ms",
    } <= set(csv.columns)
    # G = 8 for this target: guideline 2 starts at D = 15, which the sweep did not measure
    assert any("guideline 2 suggests D=15" in n and "disagrees" in n for n in notes)


def test_ranking_says_when_speculation_loses(tmp_path):
    measure(tmp_path, 2, "runner.draft_token_ms=30")
    ranking, _ = write_ranking([tmp_path / "sweep"])
    top = ranking[(ranking.domain == "all")].groupby("batch_size").head(1)
    assert top.drafter.tolist() == ["none", "none"]
    assert "plain decoding is fastest here" in (tmp_path / "sweep" / "ranking.md").read_text()


def test_per_domain_rows_of_a_mixed_run_are_predicted_and_labelled(tmp_path):
    rows = PROMPTS[:2] + [{"question_id": f"w{i}", "category": "writing", "turns": [f"poem {i}"]} for i in range(2)]
    summary, _ = measure(tmp_path, 2, rows=rows)
    ranking = rank([tmp_path / "sweep"])
    spec = ranking[(ranking.drafter == "ngram") & (ranking.batch_size == 2)].set_index("domain")
    point = summary["operating_points"][1]
    assert spec.loc["all", "speedup_source"] == "fake" and spec.loc["all", "speedup"] == pytest.approx(point["speedup"])
    # the domain's prediction carries the corrections its operating point measured
    correction = np.prod([v for k, v in point["speedup_account"]["factors"].items() if k != "steady_state_model"])
    assert spec.loc["coding", "speedup_source"] == "predicted (corrected) from fake"
    assert spec.loc["coding", "speedup"] == pytest.approx(
        point["by_domain"]["coding"]["predicted_speedup"] * correction
    )
    assert spec.loc["coding", "predicted_speedup"] == pytest.approx(point["by_domain"]["coding"]["predicted_speedup"])
    assert np.isnan(spec.loc["coding", "output_tokens_per_s"])


def test_ranking_is_refused_without_baseline_timings(tmp_path, capsys):
    measure(tmp_path, 2, "baseline=false")
    with pytest.raises(SpeclensError, match=r"d=2\) at batch size 1: no plain-decoding throughput and no T_verif\(B\)"):
        rank([tmp_path / "sweep"])
    assert rank_main([str(tmp_path / "sweep")]) == 2
    assert "baseline=true" in capsys.readouterr().err


def test_pareto_front_keeps_points_nothing_beats_on_both_axes():
    points = pd.DataFrame({"tokens_per_s_per_request": [10, 8, 5, 4, 9], "output_tokens_per_s": [10, 30, 40, 20, 9]})
    assert pareto_front(points).index.tolist() == [2, 1, 0]


def test_batch_sizes_are_checked_before_any_engine_starts(tmp_path):
    with pytest.raises(ConfigError, match="need at least 8 prompts, and the dataset gives 4"):
        measure(tmp_path, 2, "batch_sizes=[1,8]")
    with pytest.raises(ConfigError, match="above engine.max_num_seqs=2"):
        measure(tmp_path, 2, "engine.max_num_seqs=2", "batch_sizes=[4]")


def test_a_run_named_twice_is_ranked_once(tmp_path):
    measure(tmp_path, 2)
    once = rank([tmp_path / "sweep"])
    twice = rank([tmp_path / "sweep", tmp_path / "sweep" / "d=2"])
    pd.testing.assert_frame_equal(once, twice)


def test_a_sweep_that_cannot_be_ranked_any_more_drops_its_stale_ranking(tmp_path, capsys):
    from evals.sweep_report import sweep_outputs

    measure(tmp_path, 2)
    sweep = tmp_path / "sweep"
    assert sweep_outputs(sweep)[1] is not None and (sweep / "ranking.csv").is_file()
    measure(tmp_path, 1, "baseline=false")  # a run without baseline timings joins the sweep
    _, ranking, notes = sweep_outputs(sweep)
    assert ranking is None and any("no ranking: cannot rank without plain-decoding timings" in n for n in notes)
    assert not any((sweep / name).exists() for name in ("ranking.csv", "ranking.md", "pareto.png"))


def test_pass_factors_name_prefill_tail_and_outliers():
    from speclens.figures.account import pass_factors

    # B=2: a prefill step, three full decode steps (one 4x slower), a tail step with one request
    steps = pd.DataFrame(
        {
            "mode": "plain",
            "batch_size": 2,
            "step": range(5),
            "wall_s": [0.030, 0.010, 0.010, 0.040, 0.008],
            "num_requests": [2, 2, 2, 2, 1],
            "num_tokens": [10, 2, 2, 2, 1],
            "num_draft_tokens": 0,
        }
    )
    f = pass_factors(steps, "plain", 2, output_tokens=9, tokens_per_request_step=1.0)
    mean_steady, mean_decode, mean_all = 0.02, 0.068 / 4, 0.098 / 5
    assert f["slow_outliers"] == pytest.approx(0.010 / mean_steady)
    assert f["prefill"] == pytest.approx(mean_decode / mean_all)
    assert f["ramp_up_and_tail"] == pytest.approx(mean_steady / mean_decode * (9 / 5) / 2)
    assert f["token_yield"] == pytest.approx(1.0)
    # together: the pass's throughput over what its median steady step would give (2 tokens / 10 ms)
    assert np.prod(list(f.values())) == pytest.approx((9 / 0.098) / (2 / 0.010))


def _pass(mode: str, seconds: float, tokens: int = 100):
    from evals.pipeline.passes import Pass
    from speclens.generation import TurnResult

    result = TurnResult("q", 0, 5, list(range(tokens)), "", [], tokens, seconds)
    return Pass(mode, 1, [result], None, 0.0, seconds, [])


def test_repeats_give_the_median_repeat_and_the_range():
    from evals.pipeline.measure import median_repeats

    # speedups of the three repeats: 2.0, 1.25, 1.6 -> the median repeat is the third
    spec = [[_pass("speculative", s)] for s in (1.0, 2.0, 1.25)]
    plain = [[_pass("plain", s)] for s in (2.0, 2.5, 2.0)]
    passes, baseline, spreads = median_repeats(spec, plain)
    assert passes[0] is spec[2][0] and baseline[0] is plain[2][0]
    assert spreads == {1: [2.0, 1.25, 1.6]}
    # an even count takes the lower middle repeat, one that was measured
    passes, _, _ = median_repeats(spec[:2], plain[:2])
    assert passes[0] is spec[1][0]


def test_entries_whose_repeat_ranges_overlap_are_tied(tmp_path):
    from reports.ranking_tables import _verdict
    from reports.speedup_ranking import _mark_ties

    frame = pd.DataFrame(
        {
            "drafter": ["ngram", "suffix", "none", "eagle3"],
            "d": [3, 3, None, 5],
            "speedup": [1.50, 1.45, 1.0, 0.9],
            "speedup_lo": [1.42, 1.30, 1.0, 0.85],
            "speedup_hi": [1.55, 1.44, 1.0, 0.97],
            "rank": pd.array([1, 2, 3, 4], dtype="Int64"),
            "tie": False,
        }
    )
    _mark_ties(frame, list(frame.index))
    assert list(frame["rank"]) == [1, 1, 3, 4] and list(frame["tie"]) == [True, True, False, False]
    assert _verdict(frame) == "a tie between ngram d=3, suffix d=3: their speedups' ranges over the repeats overlap"


def test_repeats_need_a_baseline(tmp_path):
    with pytest.raises(ConfigError, match=r"repeats=3 repeats the speculative and plain passes .*: add baseline=true"):
        run(compose_run(*fake_overrides(tmp_path, PROMPTS), "drafter=ngram", "repeats=3"), tmp_path / "run")


def test_a_repeated_run_reports_each_repeat(tmp_path):
    summary, _ = measure(tmp_path, 2, "repeats=3")
    for point in summary["operating_points"]:
        # the fake's scripted step times are the same every time: three equal speedups
        assert point["speedup_repeats"] == pytest.approx([point["speedup"]] * 3)
        assert point["speedup_range"] == pytest.approx([point["speedup"]] * 2)
        assert point["speedup_account"]["product"] == pytest.approx(point["speedup"])


def test_serve_json_names_each_winner_config_and_a_schedule_per_mechanism(tmp_path):
    import json

    from reports.serve import schedule

    measure(tmp_path, 1)
    measure(tmp_path, 2)
    ranking, _ = write_ranking([tmp_path / "sweep"])
    plan = read_serve_file(tmp_path / "sweep" / SERVE_FILE)
    stamps = {str(p.parent): json.loads(p.read_text()) for p in (tmp_path / "sweep").glob("*/stamp.json")}
    for w in plan["winners"]:
        top = ranking[(ranking.domain == w["domain"]) & (ranking.batch_size == w["batch_size"])].iloc[0]
        assert (w["drafter"], w["speedup"]) == (top.drafter, pytest.approx(top.speedup))
        # the exact speculative config the winning run was measured with
        assert w["speculative_config"] == stamps[top.run]["speculative_config"]
        assert w["speculative_config"]["num_speculative_tokens"] == w["d"]
    # the fake's scripts: d=2 beats d=1 at both batch sizes, so ngram serves k=2 from 1 to max_num_seqs
    assert plan["schedules"] == {"ngram": [[1, plan["max_num_seqs"], 2]]}
    assert plan["schedule_configs"]["ngram"]["num_speculative_tokens_per_batch_size"] == [[1, plan["max_num_seqs"], 2]]
    assert "## What to serve" in (tmp_path / "sweep" / "ranking.md").read_text()
    # a B where plain decoding wins gets k = 0; a tie goes to the smaller D
    frame = pd.DataFrame(
        {
            "domain": "all",
            "batch_size": [1, 1, 1, 8, 8, 8],
            "drafter": ["ngram", "ngram", "none"] * 2,
            "d": [2, 5, None, 2, 5, None],
            "speedup": [1.3, 1.3, 1.0, 0.8, 0.9, 1.0],
            "speedup_lo": None,
            "speedup_hi": None,
        }
    )
    assert schedule(frame, "ngram", 64) == [[1, 7, 2], [8, 64, 0]]


def test_a_schedule_from_serve_json_is_measured_and_ranked_beside_each_fixed_d(tmp_path, engines_started):
    import json

    serve = tmp_path / "serve.json"
    # a plan of the fake engine's figures, as these runs' own are (the schedule reader takes no other)
    fake = {"source": "fake", "runner": "fake", "engine": "fake", "dtype": DEFAULT_DTYPE}
    plan = {"winners": [], "schedule_configs": {}, "max_num_seqs": 64, "temperature": 0.0, "provenance": [fake]}
    serve.write_text(json.dumps(plan | {"schedules": {"ngram": [[1, 1, 2], [2, 64, 1]]}}))
    with pytest.raises(ConfigError, match=r"its largest k is 2 but d=1; set d=2"):
        measure(tmp_path, 1, f"drafter.schedule={serve}", name="wrong")
    with pytest.raises(
        ConfigError, match=r"has no schedule for drafter=suffix in the plan measured as this run is \(it has: ngram\)"
    ):
        measure(tmp_path, 2, f"drafter.schedule={serve}", "drafter=suffix", name="other")
    measure(tmp_path, 1)
    measure(tmp_path, 2)
    summary, _ = measure(tmp_path, 2, f"drafter.schedule={serve}", name="schedule")
    assert summary["schedule"] == [[1, 1, 2], [2, 64, 1]]
    # the engine gets vLLM's dynamic speculative decoding config
    scheduled = [spec for spec in engines_started if spec and "num_speculative_tokens_per_batch_size" in spec]
    assert len(scheduled) == 2 and scheduled[0]["num_speculative_tokens_per_batch_size"] == [[1, 1, 2], [2, 64, 1]]
    assert scheduled[0]["method"] == "ngram" and scheduled[0]["num_speculative_tokens"] == 2
    ranking = rank([tmp_path / "sweep"])
    overall = ranking[ranking.domain == "all"]
    assert set(overall.drafter) == {"ngram", "ngram (schedule)", "none"}
    assert len(overall[(overall.drafter == "ngram (schedule)") & (overall.batch_size == 1)]) == 1
    # the schedule run is no point of an AL-vs-D curve
    from reports.curves import collect

    assert set(collect(tmp_path / "sweep").drafter) == {"ngram"}
