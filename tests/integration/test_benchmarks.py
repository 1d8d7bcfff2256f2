"""Every script under benchmarks/ runs, at a tiny size, and prints the figure it exists for: a
benchmark that breaks when the code under it changes is found here, not by the next person who
needs its number (no timing is asserted; the scripts print ratios for the closing notes)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from reports.runs import find_runs

ROOT = Path(__file__).resolve().parents[2]
TINY = ["dataset.num_requests=2", "sampling.max_tokens=8", "engine.dtype=float32", "engine.max_model_len=1024"]


def benchmark(script: str, *args: str, timeout: int = 900) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VLLM_CPU_KVCACHE_SPACE": "1"}
    out = subprocess.run(
        [sys.executable, f"benchmarks/{script}", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.returncode == 0, f"{script} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


def figure(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    assert match, f"no {pattern!r} in:\n{text[-2000:]}"
    return float(match.group(1))


def test_every_benchmark_script_is_tested_here():
    tested = set(re.findall(r"benchmark\(\s*\"(\w+\.py)\"", Path(__file__).read_text()))
    tested |= {"read_sweep.py"}  # tests/unit/test_api.py runs it
    tested |= {"ladder_prediction.py"}  # tests/unit/test_load_command.py runs it on a fake ladder
    # needs GuideLLM in a side folder (it pins its own torch); tests/unit/test_load_command.py reads
    # a GuideLLM report as it does
    tested |= {"vs_guidellm.py"}
    tested |= {"gpu_step_cost.py"}  # run below through runpy, to see what it imports
    assert tested == {p.name for p in (ROOT / "benchmarks").glob("*.py")}


def test_harness_overhead_prints_both_ratios_with_intervals():
    out = benchmark("harness_overhead.py", "--repeats", "2", *TINY)
    assert "output tokens differ" not in out  # one engine, float32: the same tokens both ways
    for label in ("wall", "cpu"):
        ratio = figure(rf"harness_overhead_ratio_{label} ([\d.]+) \[", out)
        assert 0.2 < ratio < 5


def test_replay_cost_is_exact_in_float32():
    out = benchmark("replay_cost.py", *TINY)
    assert figure(r"replay_cost_ratio ([\d.]+)", out) > 0
    assert figure(r"replay_vs_measured_max_gap ([\d.]+)%", out) == 0.0


def test_head_replay_cost_is_exact_in_float32_on_the_mtp_fixture():
    """The one-pass replay of a chain (runners/head_chain.py) against runs at each D, on the tiny
    MiMo-layout "partial" MTP target: the same AL in float32, and the former estimate's gap beside."""
    from tests.fixtures.mechanisms import tiny_mtp_target

    out = benchmark(
        "head_replay_cost.py",
        "--dtypes",
        "float32",
        "--d-max",
        "3",
        "target=custom",
        f"target.model={tiny_mtp_target(mtp='partial')}",
        "drafter=mtp",
        "dataset.num_requests=2",
        "sampling.max_tokens=16",
        "engine.max_model_len=1024",
    )
    assert figure(r"head_replay_cost_ratio float32 ([\d.]+)", out) > 0
    for d in (1, 3):
        assert figure(rf"head_replay_gap float32 d={d} ([\d.]+)%", out) == 0.0
        assert figure(rf"estimate_gap float32 d={d} ([\d.]+)%", out) >= 0.0


def test_report_scale_summarises_and_ranks_synthetic_records():
    out = benchmark("report_scale.py", "--records", "20000")
    assert "20,000 step records" in out
    assert figure(r"([\d]+) curve points", out) == 4 * 4 * 9  # drafters x D x (all + 8 domains)


def test_explain_time_attributes_a_max_tokens_difference_to_the_tokens_past_it():
    out = benchmark("explain_time.py", "--requests", "40")
    assert "two runs of 40 requests: 40 outputs parted" in out
    difference, total = figure(r"difference ([-+\d.]+)", out), figure(r"parts sum ([-+\d.]+)", out)
    assert difference < 0 and total == difference
    assert "the difference comes from max_tokens 64 vs 256: 100% of it is in tokens past 64" in out


def test_reproducibility_finds_the_float32_server_equal_to_in_process():
    # float32 only: the claim it checks (bf16 on an AVX2 CPU runs a fallback many times slower)
    out = benchmark(
        "reproducibility.py", "--repeats", "1", "--dtypes", "float32", "dataset.num_requests=2", "sampling.max_tokens=8"
    )
    assert out.rstrip().splitlines()[-1].startswith("float32 server == in-process on every run: True")


def test_the_reasoning_split_costs_a_measured_share_and_its_segments_agree(smollm2_ngram):
    out = benchmark("reasoning_split_cost.py", *TINY)
    # a share of the run's wall time; where the split's cost is below the timer's noise (one busy core),
    # the difference of the two timings it is measured as can come out negative
    assert abs(figure(r"ratio (-?[\d.]+) \(", out)) < 1
    # the agreement over a run split by reasoning.end: the shared embedded-target run is one
    agreement = benchmark("segment_agreement.py", str(smollm2_ngram.out))
    agree, steps = map(int, re.search(r"segment agrees on (\d+)/(\d+)", agreement).groups())
    assert agree == steps == smollm2_ngram.summary["n_steps"] > 0


def test_the_head_transfer_reads_a_built_head():
    from evals.embedded.drafter_builds import ensure_drafter

    head = ensure_drafter("eagle3", "reduced")
    out = benchmark("head_transfer.py", str(head), "--prompts", "2", "--max-tokens", "8")
    assert f"head: {head}" in out
    agree = figure(r"sample \(all\)\s+\d+\s+([\d.]+)", out)
    assert 0 <= agree <= 1


def test_speclens_and_vllm_bench_serve_measure_one_server_alike(tmp_path):
    questions = tmp_path / "question.jsonl"
    rows = [
        {"question_id": i, "category": "summarization", "turns": [f"Summarize: the {i}th report says sales rose."]}
        for i in range(2)
    ]
    questions.write_text("".join(json.dumps(row) + "\n" for row in rows))
    args = ["--num-prompts", "2", "--output-len", "8", "--concurrency", "2", "--repeats", "1"]
    out = benchmark("vs_vllm_bench_serve.py", *args, "--questions", str(questions))
    assert figure(r"AL ratio speclens / vllm bench serve: ([\d.]+)", out) == pytest.approx(1.0, abs=0.01)


def test_report_build_times_a_fake_sweeps_report():
    out = benchmark("report_build.py", "--runs", "4")
    assert figure(r"reports.build median ([\d.]+) s", out) > 0
    assert 1 < figure(r"report.html ([\d.]+) MB", out) < 10  # plotly.js inlined, and nothing else that large
    assert figure(r"MB, (\d+) charts", out) >= 4


def test_the_gpu_step_cost_check_times_both_terms_with_torch_alone():
    # On CPU a smoke run (its ratios are for a GPU); what runs on a GPU machine needs torch, not vLLM or Hydra.
    check = (
        "import runpy, sys; sys.argv = ['gpu_step_cost.py', '--device', 'cpu', '--reps', '2'];"
        "runpy.run_path('benchmarks/gpu_step_cost.py', run_name='__main__');"
        "print('imported:', sorted(m for m in ('vllm', 'hydra', 'omegaconf', 'pandas') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=300, check=True
    ).stdout
    assert out.rstrip().splitlines()[-1] == "imported: []"
    number = r"\s+([\d.e+-]+) /\s+([\d.e+-]+) = +([\d.e+-]+)"
    rows = re.findall(
        rf"^\s+(\d+)\s+(\d+)\s+(\d+) {number} \((?:weights|compute)\) {number} \((?:kv|compute)\)", out, re.M
    )
    assert [(int(b), int(d)) for b, d, *_ in rows] == [(1, 0), (1, 3), (4, 0), (4, 3)]
    for row in rows:
        measured, predicted, ratio = map(float, row[3:6])
        assert measured > 0 and predicted > 0 and ratio == pytest.approx(measured / predicted, rel=0.01)


def test_published_speedups_prints_each_cases_error_and_their_median():
    out = benchmark("published_speedups.py", "--no-aiconfigurator")
    # first the held-out figures (docs/whatif.md): nested coverage of the 80 % interval, median, worst
    held_out, in_sample = out.split("in-sample (")
    assert figure(r"nested coverage of the 80% interval: (\d+) of 31", held_out) >= 0.8 * 31
    assert figure(r"over 31 \(worst ([\d.]+)%\)", held_out) == pytest.approx(42.6)
    assert "NOT what ships" not in held_out and "stale" not in held_out
    rows = re.findall(r"^\S+ +\w+ +\d+ +\d+ x +[\d.]+ +([+-][\d.]+)% +([+-][\d.]+)% +-$", in_sample, flags=re.M)
    assert len(rows) == 31
    held = sorted(abs(float(h)) for h, _ in rows)
    assert figure(r"median \|error\| ([\d.]+)% over 31", held_out) == pytest.approx(held[15], abs=0.05)
    errors = sorted(abs(float(r)) for _, r in rows)
    median = figure(r"roofline: ([\d.]+)% over 31", in_sample)
    assert median == pytest.approx(errors[15], abs=0.05) and median < 15.7  # docs/whatif.md: 15.6 %


def test_published_step_times_prints_the_held_out_figures_first_and_each_cases_error():
    out = benchmark("published_step_times.py")
    assert out.startswith("held out by source")
    errors = sorted(abs(float(e)) for e in re.findall(r" ([+-][\d.]+)%$", out, flags=re.M))
    cases = int(figure(r"\((\d+) cases", out))
    assert len(errors) == cases >= 12
    median = figure(r"median \|error\| ([\d.]+)%", out)
    assert median == pytest.approx((errors[(cases - 1) // 2] + errors[cases // 2]) / 2, abs=0.06)
    assert figure(r"worst ([\d.]+)%", out) == pytest.approx(errors[-1], abs=0.06)
    assert figure(r"covers (\d+) of", out) >= 0.8 * cases  # the nested 80 % interval holds its level


def test_synthetic_grid_holds_each_d_out_and_sets_its_measured_speedup_beside(tmp_path):
    # runner=fake: the grid's three runs, folds and tables without vLLM (the real grid: docs/whatif.md)
    out = benchmark("synthetic_grid.py", "--out", str(tmp_path), "--requests", "8", "--max-tokens", "32", "runner=fake")
    held_out, in_sample = out.split("in-sample:")
    for table in (held_out, in_sample):
        assert figure(r"over (\d+) points", table) == 6  # D = 1, 3, 5, each at B = 1 and 4
    measured = {}
    for run in find_runs(tmp_path):
        for op in run.summary.operating_points:
            measured[(run.summary.d, op.batch_size)] = op.predicted_speedup
    rows = re.findall(r"^ +(\d) +[\d.]+ +(\d) +x[\d.]+ +\S+, \S+ +x([\d.]+) ", held_out, flags=re.M)
    assert len(rows) == 6
    for d, b, steady in rows:
        assert float(steady) == pytest.approx(measured[(int(d), int(b))], abs=0.005)


def test_drift_detection_prints_the_false_alarm_rate_and_the_power_per_noise_level():
    out = benchmark("drift_detection.py", "--histories", "200")
    rows = [line.split() for line in out.splitlines() if re.match(r"\s+0\.0\d\s", line)]
    assert [float(row[0]) for row in rows] == [0.01, 0.02, 0.03, 0.04]
    # more noise finds the same step less often; 0.01 AL of noise finds it within two nights always
    two_nights = [float(row[3]) for row in rows]
    assert two_nights == sorted(two_nights, reverse=True) and two_nights[0] == 1.0
    low, high = map(float, re.search(r"pooled [\d.]+ \[([\d.]+), ([\d.]+)\] over 800", out).groups())
    assert low <= 0.05  # the stated level is inside what 800 stationary histories allow
