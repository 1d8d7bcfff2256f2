"""reports.curves on runs from the scripted fake engine: golden curves, refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from evals.pipeline.run_job import run
from reports.curves import collect, write_curves
from reports.curves import main as curves_main
from speclens.errors import SpeclensError
from speclens.file_formats.serve_file import SERVE_FILE, read_serve_file
from tests.unit.conftest import compose_run, fake_overrides
from tests.unit.test_commands_fake import ROWS, check_golden


def accepted_script(d: int) -> dict:
    # acceptance capped by d, so AL grows with D and then saturates
    return {"q1#0": [min(3, d), min(1, d), None, 0], "q1#1": [min(2, d)], "q2#0": [None, min(4, d), min(4, d)]}


def sweep(tmp_path: Path, points, *extra: str) -> Path:
    root = tmp_path / "sweep"
    for drafter, d in points:
        cfg = compose_run(
            *fake_overrides(tmp_path, ROWS, accepted_script(d), name=f"q{d}"), f"drafter={drafter}", f"d={d}", *extra
        )
        run(cfg, root / f"drafter={drafter},d={d}", progress=lambda label: None)
    return root


def test_curves_from_a_sweep_match_the_golden_file(tmp_path):
    root = sweep(tmp_path, [("ngram", 1), ("ngram", 2), ("ngram", 4), ("suffix", 2)])
    curves = write_curves(root)
    check_golden("curves.csv", (root / "curves.csv").read_text())
    assert list(curves.columns) == [
        "drafter",
        "d",
        "domain",
        "al",
        "al_ci95_lo",
        "al_ci95_hi",
        "tokens_per_step",
        "source",
        "temperature",
        "segment",
        "chat_template_kwargs",
        "setting",
        "proposer",
        "input_tokens",
        "context_extension",
        "draft_share",
        "runner",
        "engine",
        "dtype",
        "model_runner",
    ]
    assert set(curves.segment) == {"all"} and set(curves.chat_template_kwargs) == {""} and set(curves.setting) == {""}
    # every point: its share of drafting passes gives its tokens per step (no tokens cut here)
    assert (1 + curves.draft_share * (curves.al - 1) - curves.tokens_per_step).abs().max() < 1e-12
    assert set(curves.proposer) == {""}  # the fake engine shows no model runner
    pooled = curves[(curves.domain == "all") & (curves.drafter == "ngram")].set_index("d")
    # d=1: every drafted step accepts min(x,1): 1,1,0 | 1 | 1,1 -> 5 of 6 -> AL 1 + 5/6
    assert pooled.loc[1, "al"] == pytest.approx(1 + 5 / 6)
    assert pooled.loc[4, "al"] == pytest.approx(1 + 14 / 6)
    assert set(curves.source) == {"fake"} and set(curves.runner) == {"fake"}
    assert pd.read_parquet(root / "curves.parquet").equals(curves)
    for domain in ("all", "coding", "writing"):
        png = root / f"curve_{domain}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_runs_under_different_settings_are_refused_naming_the_keys(tmp_path):
    root = sweep(tmp_path, [("ngram", 1), ("ngram", 2)])
    other = sweep(tmp_path / "other", [("ngram", 3)], "sampling.max_tokens=64")
    shutil.copytree(other / "drafter=ngram,d=3", root / "drafter=ngram,d=3")
    with pytest.raises(
        SpeclensError, match=r"config.sampling.max_tokens differs \(128 in .*; 64 in drafter=ngram,d=3\)"
    ):
        collect(root)
    assert curves_main([str(root)]) == 2


def test_same_drafter_and_d_with_different_settings_are_refused(tmp_path):
    root = sweep(tmp_path, [("ngram", 2)])
    other = sweep(tmp_path / "other", [("ngram", 2)], "drafter.prompt_lookup_max=7")
    shutil.copytree(other / "drafter=ngram,d=2", root / "copy")
    with pytest.raises(SpeclensError) as refused:
        collect(root)
    assert "drafter=ngram d=2 (temperature 0) was measured twice" in str(refused.value)
    # the runs' own drafter setting is named with both values, beside the paths that differ too
    assert "drafter.prompt_lookup_max: 7 vs 5" in str(refused.value)


def test_replayed_points_fill_in_and_measured_points_win(tmp_path):
    root = sweep(tmp_path, [("ngram", 2)])
    stamp = json.loads((root / "drafter=ngram,d=2" / "stamp.json").read_text())
    summary = json.loads((root / "drafter=ngram,d=2" / "summary.json").read_text())
    # measured on V1, as an in-process run on the CPU build records it (the fake engine shows none)
    summary["numerics"]["model_runner"] = stamp["model_runner"] = summary["provenance"]["model_runner"] = "v1"
    (root / "drafter=ngram,d=2" / "summary.json").write_text(json.dumps(summary))
    (root / "drafter=ngram,d=2" / "stamp.json").write_text(json.dumps(stamp))
    replay_dir = root / "replay"
    replay_dir.mkdir()
    (replay_dir / "replay.json").write_text(
        json.dumps(
            {
                "summary": {
                    "drafter": "ngram",
                    "d_max": 3,
                    "fingerprints": summary["fingerprints"],
                    "replay": "exact",
                    "elapsed_s": 1.0,
                    # replayed on the engine that measured the run
                    "runner": "fake",
                },
                "stamp": stamp,
            }
        )
    )
    rows = [
        {
            "drafter": "ngram",
            "d": d,
            "domain": "all",
            "al": 9.0,
            "al_ci95_lo": 9.0,
            "al_ci95_hi": 9.0,
            "tokens_per_step": 1.0,
            "source": "replayed",
        }
        for d in (1, 2, 3)
    ]
    # written before replays drew V2's n-gram proposer too: no proposer column, V1's curve
    pd.DataFrame(rows).to_parquet(replay_dir / "curves.parquet")
    curves = collect(root)
    pooled = curves[curves.domain == "all"].set_index("d")
    assert list(pooled.source) == ["replayed", "fake", "replayed"] and set(pooled.proposer) == {"v1"}
    assert pooled.loc[2, "al"] != 9.0
    # both proposers replayed: V2's is a curve of its own, which the V1 run measured nothing of
    both = [row | {"proposer": proposer, "al": al} for row in rows for proposer, al in (("v1", 9.0), ("v2", 7.0))]
    pd.DataFrame(both).to_parquet(replay_dir / "curves.parquet")
    pooled = collect(root)[lambda c: c.domain == "all"]
    v1, v2 = (pooled[pooled.proposer == p].set_index("d") for p in ("v1", "v2"))
    assert list(v1.source) == ["replayed", "fake", "replayed"] and list(v2.source) == ["replayed"] * 3
    assert set(v2.al) == {7.0}


def test_temperature_is_an_axis_of_the_curves_and_separates_the_ranking(tmp_path):
    """Runs at two temperatures: one curve point per temperature, an AL-vs-temperature plot, and
    ranking tables that never mix the two."""
    from reports.ranking_tables import write_ranking
    from tests.unit.test_step_costs import measure

    measure(tmp_path, 2)
    measure(tmp_path, 2, "sampling.temperature=0.7", name="hot")
    root = tmp_path / "sweep"
    curves = write_curves(root)
    overall = curves[curves.domain == "all"]
    assert sorted(overall.temperature) == [0.0, 0.7] and (root / "curve_temperature_all.png").stat().st_size > 5000
    ranking, _ = write_ranking([root])
    assert sorted(ranking.temperature.unique()) == [0.0, 0.7]
    for t in (0.0, 0.7):  # each table ranks ngram against plain decoding at its own temperature
        table = ranking[(ranking.temperature == t) & (ranking.domain == "all") & (ranking.batch_size == 2)]
        assert sorted(table.drafter) == ["ngram", "none"] and sorted(table["rank"]) == [1, 2]
    md = (root / "ranking.md").read_text()
    assert "## T=0, all, batch size 2" in md and "## T=0.7, all, batch size 2" in md
    plan = read_serve_file(root / SERVE_FILE)
    assert [p["temperature"] for p in plan["by_temperature"]] == [0.0, 0.7]
    # the report's answer names each temperature's winner, each row its mode
    from reports.build import build

    report = build(root)[1].read_text().split("\n## ")[0:2][1]
    assert report.startswith("What to serve") and "at B=2 T=0 (" in report and "at B=2 T=0.7 (" in report
    assert "| T=0.7 | all | 2 | ngram d=2 |" in report


def test_chat_template_kwargs_are_an_axis_like_temperature(tmp_path):
    """Thinking on and off: never one curve, never one ranking table, one plan each in serve.json."""
    from reports.ranking_tables import write_ranking
    from tests.unit.test_step_costs import measure

    measure(tmp_path, 2)
    measure(tmp_path, 2, "+chat_template_kwargs.enable_thinking=false", name="no-thinking")
    root = tmp_path / "sweep"
    curves = write_curves(root)
    overall = curves[curves.domain == "all"]
    assert sorted(overall.chat_template_kwargs) == ["", "enable_thinking=false"]
    ranking, _ = write_ranking([root])
    for mode in ("", "enable_thinking=false"):
        table = ranking[(ranking.chat_template_kwargs == mode) & (ranking.domain == "all") & (ranking.batch_size == 2)]
        assert sorted(table.drafter) == ["ngram", "none"] and sorted(table["rank"]) == [1, 2]
    md = (root / "ranking.md").read_text()
    assert "## template defaults, all, batch size 2" in md and "## enable_thinking=false, all, batch size 2" in md
    plan = read_serve_file(root / SERVE_FILE)
    assert [p["chat_template_kwargs"] for p in plan["by_temperature"]] == [{}, {"enable_thinking": False}]


def test_runs_with_a_reasoning_boundary_add_curves_per_segment(tmp_path):
    root = sweep(tmp_path, [("ngram", 1), ("ngram", 3)], "reasoning.end=w104")
    curves = write_curves(root)
    assert set(curves.segment) == {"all", "thinking", "answer"}
    thinking = curves[(curves.domain == "all") & (curves.segment == "thinking")].set_index("d")
    # d=3 (test_reasoning's hand count): thinking steps accept 3, 2 and 3 (q2's first drafted step)
    assert thinking.loc[3, "al"] == pytest.approx(1 + 8 / 3)
    assert (root / "curve_segments_all.png").stat().st_size > 5000
    assert set(pd.read_csv(root / "curves.csv").segment) == {"all", "thinking", "answer"}
