"""reports.compare on paired data with a known difference, and evals.nightly with the fake engine."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from evals.nightly import main as nightly_main
from evals.pipeline.run_job import run
from reports.compare import compare, paired_al_difference, write_comparison
from reports.compare import main as compare_main
from speclens.errors import SpeclensError
from speclens.file_formats.diagnosis_file import read_diagnosis_file
from speclens.file_formats.reference_file import read_references
from tests.unit.conftest import (
    FAKE_PAIR_NOTE,
    compose_run,
    fake_overrides,
    write_checkpoint,
    write_questions,
    write_script,
)
from tests.unit.test_report import opened

D = 3
ROWS = [
    {"question_id": f"q{i}", "category": "coding" if i % 2 else "writing", "turns": [f"task {i}"]} for i in range(10)
]


def script(accepted: dict[str, int]) -> dict:
    """Every request drafts 5 steps accepting accepted[request] (default 2) each."""
    return {f"{r['question_id']}#0": [accepted.get(r["question_id"], 2)] * 5 for r in ROWS}


def measure(tmp_path: Path, out: Path, accepted: dict[str, int], rows=ROWS, *overrides: str) -> Path:
    cfg = compose_run(
        *fake_overrides(tmp_path, rows, script(accepted), name=out.name), "drafter=ngram", f"d={D}", *overrides
    )
    run(cfg, out / "ngram", progress=lambda label: None)
    return out


def test_a_shift_on_every_prompt_is_exact_and_significant(tmp_path):
    base = measure(tmp_path, tmp_path / "base", {})
    cand = measure(tmp_path, tmp_path / "cand", {r["question_id"]: 1 for r in ROWS})
    table, notes = compare(base, cand)
    overall = table.set_index("domain").loc["all"]
    assert overall.baseline_al == pytest.approx(3.0) and overall.candidate_al == pytest.approx(2.0)
    assert overall.al_diff == pytest.approx(-1.0)
    # every prompt moved by the same amount: the paired CI has no width
    assert (overall.diff_ci95_lo, overall.diff_ci95_hi) == pytest.approx((-1.0, -1.0))
    assert overall.significant and set(table.domain) == {"all", "coding", "writing"} and notes == [FAKE_PAIR_NOTE]


def test_a_difference_carried_by_one_prompt_is_not_significant(tmp_path):
    base = measure(tmp_path, tmp_path / "base", {})
    cand = measure(tmp_path, tmp_path / "cand", {"q0": 0})
    overall = compare(base, cand)[0].set_index("domain").loc["all"]
    # q0's 5 steps lose 2 accepted tokens each: 10 of 50 steps' worth, -0.2 in pooled AL
    assert overall.al_diff == pytest.approx(-0.2)
    assert overall.diff_ci95_lo < -0.2 < overall.diff_ci95_hi == pytest.approx(0.0)
    assert not overall.significant


def test_paired_bootstrap_matches_a_hand_computed_case():
    steps = lambda acc: pd.DataFrame({"request_id": ["a", "a", "b"], "num_accepted": acc})  # noqa: E731
    figures = paired_al_difference(steps([2, 2, 0]), steps([1, 1, 0]), ["a", "b"], samples=500)
    assert figures["baseline_al"] == pytest.approx(1 + 4 / 3) and figures["candidate_al"] == pytest.approx(1 + 2 / 3)
    assert figures["al_diff"] == pytest.approx(-2 / 3)
    # resamples: {a,a} -> -1, {b,b} -> 0, {a,b} -> -2/3
    assert figures["diff_ci95_lo"] == pytest.approx(-1.0) and figures["diff_ci95_hi"] == pytest.approx(0.0)


def test_one_prompt_gives_its_difference_but_no_interval_and_no_significance():
    steps = lambda acc: pd.DataFrame({"request_id": ["a", "a"], "num_accepted": acc})  # noqa: E731
    figures = paired_al_difference(steps([2, 2]), steps([1, 1]), ["a"])
    assert figures["al_diff"] == pytest.approx(-1.0)
    assert figures["diff_ci95_lo"] is None and figures["diff_ci95_hi"] is None and not figures["significant"]


def test_runs_over_different_prompts_are_refused_naming_the_difference(tmp_path, capsys):
    base = measure(tmp_path, tmp_path / "base", {})
    cand = measure(tmp_path, tmp_path / "cand", {}, ROWS[:8])
    with pytest.raises(SpeclensError, match=r"fingerprints.dataset differs"):
        compare(base, cand)
    assert compare_main([str(base), str(cand)]) == 2
    assert "cannot be compared" in capsys.readouterr().err
    same = measure(tmp_path, tmp_path / "same", {})
    assert compare_main([str(base), str(same)]) == 0
    assert (same / "compare.csv").is_file() and "difference" in (same / "compare.md").read_text()


def write_suite(tmp_path: Path, threshold: float = 0.1) -> Path:
    questions = write_questions(tmp_path / "suite.jsonl", ROWS)
    target = write_checkpoint(tmp_path / "target")
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        f"common: [runner=fake, target=custom, 'target.model={target}', dataset=jsonl, 'dataset.path={questions}']\n"
        f"jobs:\n  ngram_d3: [drafter=ngram, d={D}]\nthreshold: {threshold}\n"
    )
    return suite


def night(tmp_path: Path, label: str, accepted: dict[str, int], baseline: str | None = None, *extra: str) -> int:
    """One night with the fake runner (every request accepting accepted[request], default 2), through
    the command's own entry point."""
    scripted = write_script(tmp_path / f"{label}_script.json", script(accepted))
    argv = [
        f"suite={write_suite(tmp_path)}",
        f"night={label}",
        f"out={tmp_path / 'nights' / label}",
        f"runner.script={scripted}",
        *extra,
    ]
    if baseline:
        argv.append(f"baseline={tmp_path / 'nights' / baseline}")
    return nightly_main(argv)


def test_nightly_fails_on_a_regression_naming_drafter_and_domain(tmp_path, capsys):
    assert night(tmp_path, "n1", {}) == 0
    assert "new baseline" in capsys.readouterr().out
    assert night(tmp_path, "n2", {}, "n1") == 0
    # the coding prompts (odd ids) lose acceptance; writing keeps it
    assert night(tmp_path, "n3", {f"q{i}": 0 for i in range(1, 10, 2)}, "n1") == 1
    err = capsys.readouterr().err
    assert "REGRESSION drafter=ngram d=3 domain=coding" in err and "domain=all" in err
    assert "domain=writing" not in err
    history = pd.read_parquet(tmp_path / "nights" / "history.parquet")
    assert sorted(history.night.unique()) == ["n1", "n2", "n3"]
    assert len(history[history.night == "n3"]) == 3  # all, coding, writing
    n3 = history[history.night == "n3"].set_index("domain")
    assert n3.loc["coding", "al_diff"] == pytest.approx(-2.0) and bool(n3.loc["coding", "regressed"])
    assert not bool(n3.loc["writing", "regressed"])
    assert (tmp_path / "nights" / "trend.png").stat().st_size > 5000
    # the same trend, interactive: three nights of ngram d=3, the regressed one marked
    page = opened(tmp_path / "nights" / "trend.html")
    assert page["errors"] == "" and page["charts"] == page["charts-rendered"] == "1"
    specs = json.loads(
        re.search(r'id="speclens-charts">(.*?)</script>', (tmp_path / "nights" / "trend.html").read_text()).group(1)
    )
    (trend,) = specs.values()
    assert trend["data"][0]["x"] == ["n1", "n2", "n3"] and trend["data"][0]["marker"]["symbol"] == [
        "circle",
        "circle",
        "x",
    ]
    # a fourth night like the third: the history's change point is at n3, for coding (and all) only
    capsys.readouterr()
    assert night(tmp_path, "n4", {f"q{i}": 0 for i in range(1, 10, 2)}, "n1") == 1
    drift = json.loads((tmp_path / "nights" / "drift.json").read_text())
    assert (drift["nights"], drift["series"], drift["level"]) == (4, 3, 0.05)
    assert sorted((c["domain"], c["night"], c["previous_night"]) for c in drift["changes"]) == [
        ("all", "n3", "n2"),
        ("coding", "n3", "n2"),
    ]
    coding = next(c for c in drift["changes"] if c["domain"] == "coding")
    assert coding["size"] == pytest.approx(-2.0) and coding["interval"][1] < 0
    assert coding["causes"] == []  # the same fake engine, prompts and setting every night
    out = capsys.readouterr().out
    assert "CHANGE drafter=ngram d=3 domain=coding: AL 3.000 -> 1.000 (-2.000" in out
    # the night's diagnosis: n-gram, the model-free control, has nothing to retrain
    (ngram,) = read_diagnosis_file(tmp_path / "nights" / "n4").drafters
    assert (ngram.drafter, ngram.d, ngram.verdict, ngram.control) == ("ngram", 3, "none", None)
    assert f"DIAGNOSIS {ngram.sentence}" in out and "model-free, nothing to retrain" in ngram.sentence


def test_compare_writes_a_forest_plot_page_with_the_significant_changes_marked(tmp_path):
    base = measure(tmp_path, tmp_path / "base", {})
    cand = measure(tmp_path, tmp_path / "cand", {f"q{i}": 0 for i in range(1, 10, 2)})
    write_comparison(base, cand)
    page = opened(cand / "compare.html")
    assert page["errors"] == "" and page["charts"] == page["charts-rendered"] == "1"
    assert int(page["scroll-width"]) <= int(page["inner-width"])
    specs = json.loads(re.search(r'id="speclens-charts">(.*?)</script>', (cand / "compare.html").read_text()).group(1))
    (forest,) = specs.values()
    marked = {trace["name"]: trace["y"] for trace in forest["data"]}
    assert marked == {
        "significant": ["ngram d=3 · all", "ngram d=3 · coding"],
        "not significant": ["ngram d=3 · writing"],
    }


def test_a_crashed_night_leaves_the_history_and_reruns(tmp_path, capsys):
    assert night(tmp_path, "n1", {}) == 0
    history = tmp_path / "nights" / "history.parquet"
    before = history.read_bytes()

    # the engine dies on the first request: a failed measurement (3), not a regression (1)
    assert night(tmp_path, "n2", {}, "n1", "runner.fail_on=q0") == 3
    assert history.read_bytes() == before
    assert (
        "the measurement failed: RuntimeError: fake engine: scripted failure on request q0" in capsys.readouterr().err
    )
    assert night(tmp_path, "n2", {}, "n1") == 0
    # running the same night again replaces its rows instead of adding them twice
    assert night(tmp_path, "n2", {}, "n1") == 0
    assert pd.read_parquet(history).groupby("night").size().to_dict() == {"n1": 3, "n2": 3}


def test_nightly_arguments_are_checked(tmp_path, capsys):
    assert nightly_main([f"suite={write_suite(tmp_path)}", f"baseline={tmp_path / 'nope'}"]) == 2
    assert "baseline=" in capsys.readouterr().err
    assert nightly_main([f"suite={tmp_path / 'missing.yaml'}"]) == 2
    assert nightly_main([f"suite={write_suite(tmp_path)}", "threshold=lots"]) == 2
    assert "must be a number" in capsys.readouterr().err


def test_a_baseline_that_cannot_be_compared_is_refused_before_the_suite_runs(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert (
        nightly_main([f"suite={write_suite(tmp_path)}", f"baseline={tmp_path / 'empty'}", f"out={tmp_path / 'n1'}"])
        == 2
    )
    assert "holds no finished speculative runs" in capsys.readouterr().err and not (tmp_path / "n1").exists()
    other = measure(tmp_path, tmp_path / "other", {}, ROWS[:8])
    assert nightly_main([f"suite={write_suite(tmp_path)}", f"baseline={other}", f"out={tmp_path / 'n1'}"]) == 2
    assert "was measured with other prompts" in capsys.readouterr().err and not (tmp_path / "n1").exists()


@pytest.mark.parametrize(
    "text, message",
    [
        ("jobs: [drafter=ngram]\n", "a suite needs `jobs` (a mapping of job name to a list"),
        ("jobs:\n  a: [d=1\n", "not readable YAML"),
        ("jobs:\n  a: [d=1]\nthreshhold: 2\n", "unknown keys: threshhold"),
    ],
)
def test_a_malformed_suite_is_one_clear_error(tmp_path, capsys, text, message):
    suite = tmp_path / "suite.yaml"
    suite.write_text(text)
    assert nightly_main([f"suite={suite}", f"out={tmp_path / 'n'}"]) == 2
    assert message in capsys.readouterr().err


def test_two_targets_measured_the_same_night_both_stay_in_the_history(tmp_path):
    assert night(tmp_path, "n1", {}) == 0
    # the same night, another target (another fingerprint) into another dir, one shared history
    suite = write_suite(tmp_path)
    write_checkpoint(tmp_path / "target", tuned=True)
    argv = [
        f"suite={suite}",
        "night=n1",
        f"out={tmp_path / 'nights' / 'n1b'}",
        f"history={tmp_path / 'nights' / 'history.parquet'}",
    ]
    assert nightly_main(argv) == 0
    history = pd.read_parquet(tmp_path / "nights" / "history.parquet")
    assert history[history.domain == "all"].target_fingerprint.nunique() == 2 and len(history) == 6
    # the first target's night measured again replaces its own rows only
    assert night(tmp_path, "n1", {}) == 0
    assert len(pd.read_parquet(tmp_path / "nights" / "history.parquet")) == 6


def test_compare_refuses_one_dir_twice_and_runs_of_other_settings(tmp_path, capsys):
    base = measure(tmp_path, tmp_path / "base", {})
    assert compare_main([str(base), str(base)]) == 2
    assert "is given as both baseline and candidate" in capsys.readouterr().err
    wider = measure(tmp_path, tmp_path / "wider", {}, ROWS, "drafter.prompt_lookup_max=7")
    with pytest.raises(
        SpeclensError,
        match=r"different drafter settings \(config.drafter: .*'prompt_lookup_max': 5.* vs .*'prompt_lookup_max': 7",
    ):
        compare(base, wider)
    batched = measure(tmp_path, tmp_path / "batched", {}, ROWS, "batch_sizes=[2]")
    with pytest.raises(SpeclensError, match=r"different batch sizes \(config.batch_sizes: None vs \[2\]\)"):
        compare(base, batched)


def test_with_a_reasoning_boundary_each_segment_is_compared(tmp_path):
    def measured(name: str, steps: list[int]) -> Path:
        out = tmp_path / name
        cfg = compose_run(
            *fake_overrides(tmp_path, ROWS, {f"{r['question_id']}#0": steps for r in ROWS}, name=name),
            "drafter=ngram",
            f"d={D}",
            "reasoning.end=w106",
        )
        run(cfg, out / "ngram", progress=lambda label: None)
        return out

    # tokens 0..6 are thinking ("w106" is token 6): the steps at offsets 1 and 4 think, the rest answer
    base = measured("base", [2, 2, 2, 2, 2])
    cand = measured("cand", [2, 2, 1, 1, 1])
    table = compare(base, cand)[0].set_index(["domain", "segment"])
    assert table.loc[("all", "thinking"), "al_diff"] == pytest.approx(0.0)
    answer = table.loc[("all", "answer")]
    assert (answer.baseline_al, answer.candidate_al) == pytest.approx((3.0, 2.0)) and answer.significant
    assert table.loc[("all", "all"), "al_diff"] == pytest.approx((2 * 3 + 3 * 2) / 5 - 3.0)


def test_a_reference_written_from_one_night_gates_the_next_both_ways(tmp_path, capsys):
    reference = tmp_path / "refs" / "reference.yaml"
    (tmp_path / "refs").mkdir()
    assert night(tmp_path, "n1", {}, None, f"write_reference={reference}") == 0
    written = read_references(reference)
    target = (tmp_path / "target").name
    assert written == {(target, "default", "ngram", domain, 3): 3.0 for domain in ("all", "coding", "writing")}
    assert yaml.safe_load(reference.read_text()) == {
        target: {"default": {"ngram": {d: {3: 3.0} for d in ("all", "coding", "writing")}}}
    }
    capsys.readouterr()
    coding_lost = {f"q{i}": 0 for i in range(1, 10, 2)}  # coding AL 3 -> 1, all 3 -> 2
    # no baseline: the reference alone fails the night, naming each (drafter, D, domain) below 95 %
    assert (
        night(
            tmp_path,
            "n2",
            coding_lost,
            None,
            f"reference={reference}",
            "gate=0.95",
            f"history={tmp_path / 'h2.parquet'}",
        )
        == 1
    )
    err = capsys.readouterr().err
    assert "BELOW REFERENCE drafter=ngram d=3 domain=coding: AL 1.000 < 0.95 x reference 3.000 (default)" in err
    assert "domain=all: AL 2.000 < 0.95 x reference 3.000" in err and "domain=writing" not in err
    # a gate the night passes (a third of the reference), and another thinking mode the file has no entry for
    assert (
        night(
            tmp_path,
            "n3",
            coding_lost,
            None,
            f"reference={reference}",
            "gate=0.3",
            f"history={tmp_path / 'h3.parquet'}",
        )
        == 0
    )
    assert (
        night(
            tmp_path,
            "n4",
            coding_lost,
            None,
            f"reference={reference}",
            "gate=0.95",
            "thinking_mode=thinking",
            f"history={tmp_path / 'h4.parquet'}",
        )
        == 0
    )
    assert "BELOW REFERENCE" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "text, extra, said",
    [
        ("a: [1, 2", ["gate=0.95"], r"reference=\S+: not readable YAML"),
        ("- 1\n- 2\n", ["gate=0.95"], r"the file must map names to the next level"),
        ("m:\n  sometimes:\n    ngram:\n      all:\n        3: 2.5\n", [], r"m.sometimes: a thinking mode is one of default, thinking, non_thinking"),
        ("m:\n  default:\n    ngram:\n      all:\n        x: 2.5\n", [], r"m.default.ngram.all.x: K must be a whole number >= 1"),
        ("m:\n  default:\n    ngram:\n      all:\n        3: 0.5\n", [], r"m.default.ngram.all.3: 0.5 is not an AL"),
        ("m:\n  default:\n    ngram:\n      all:\n        3: 2.5\n", ["gate=1.5"], r"gate=1.5: must be a finite number above 0 and <= 1"),
        (None, ["gate=0.9"], r"gate=0.9: needs reference=<file>"),
        ("m:\n  default:\n    ngram:\n      all:\n        3: 2.5\n", ["thinking_mode=deep"], r"thinking_mode=deep: one of default"),
    ],
)  # fmt: skip
def test_a_hostile_reference_or_gate_is_one_line_before_the_suite_runs_and_the_history_stays(
    tmp_path, capsys, text, extra, said
):
    assert night(tmp_path, "n1", {}) == 0
    history = tmp_path / "nights" / "history.parquet"
    before = history.read_bytes()
    reference = tmp_path / "reference.yaml"
    args = list(extra)
    if text is not None:
        reference.write_text(text)
        args.append(f"reference={reference}")
    capsys.readouterr()
    assert night(tmp_path, "n2", {}, "n1", *args) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("speclens: error: ") and re.search(said, line), line
    assert history.read_bytes() == before and not (tmp_path / "nights" / "n2").exists()
