"""reports.rank per length bucket (issue 47): each length ranked from its own figures, serve.json's
winners and `num_speculative_tokens_per_batch_size` schedule per length, the (B, context) -> D table
in speculation_profile.json, extensions named, and runs without lengths left as they were.

Runs use the scripted fake engine over dataset=long_context prompts of the embedded target; the
script sets the acceptance of each length (the fake's own does not depend on length)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from evals.pipeline.run_job import run
from evals.sweep_report import gather_profiles
from reports.gpu_prediction import prediction_rows
from reports.ranking_tables import write_rankings
from reports.runs import find_runs
from speclens.file_formats.profile_file import CONTEXT_TABLE_KEY, PROFILE_FILE
from speclens.file_formats.ranking_file import LENGTH_RANKING_FILE
from speclens.file_formats.serve_file import SERVE_FILE, read_serve_file
from speclens.file_formats.summary_file import read_summary
from speclens.gpu_model.gpus import gpu_named
from speclens.gpu_model.step_cost import Hardware
from speclens.gpu_model.whatif import length_ranges, nearest_length
from tests.unit.conftest import compose_run, fake_overrides, write_script
from tests.unit.test_curves import accepted_script
from tests.unit.test_long_context import smollm2  # noqa: F401 (the embedded target, shared)

LENGTHS = "dataset.input_tokens=[300,1000]"
EXTENDED = "+engine.rope_scaling={rope_type:yarn,factor:4}"
# Accepted drafts per step at each length (capped at D): the 300-token prompts take every draft of
# d=3, the 1k prompts only the first, so d=3 pays at 300 and only costs more at 1k.
ACCEPTED = {"300": 3, "1k": 1}
PLAN_KEYS = {
    "winners",
    "schedules",
    "schedule_configs",
    "max_num_seqs",
    "temperature",
    "chat_template_kwargs",
    "setting",
    "kv_cache_dtype",
}


def script(accepted: dict[str, int], d: int) -> dict:
    """Every request drafts 6 steps accepting accepted[length label] (capped at d) each."""
    return {
        f"long_context/mixed@{label}/{i}#0": [min(accepted[label], d)] * 6 for label in ("300", "1k") for i in range(2)
    }


def measure(tmp_path: Path, target: Path, out: Path, d: int, *extra: str) -> Path:
    scripted = write_script(tmp_path / f"{out.parent.name}_d{d}.json", script(ACCEPTED, d))
    cfg = compose_run(
        "target=custom",
        f"target.model={target}",
        "runner=fake",
        f"runner.script={scripted}",
        "dataset=long_context",
        LENGTHS,
        "dataset.num_requests=2",
        "drafter=ngram",
        f"d={d}",
        "baseline=true",
        "batch_sizes=[1,2]",
        *extra,
    )
    run(cfg, out, progress=lambda label: None)
    return out


def short_window_target(tmp_path: Path, smollm2: Path) -> Path:  # noqa: F811
    """The embedded target with a 512-token window in its config.json (its other files linked)."""
    folder = tmp_path / "smol512"
    folder.mkdir(exist_ok=True)
    for file in smollm2.iterdir():
        if file.name != "config.json":
            (folder / file.name).symlink_to(file)
    config = json.loads((smollm2 / "config.json").read_text()) | {"max_position_embeddings": 512}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_the_best_d_differs_by_length_where_each_lengths_own_figures_say_so(tmp_path, smollm2):  # noqa: F811
    root = tmp_path / "sweep"
    for d in (1, 3):
        measure(tmp_path, smollm2, root / f"d={d}", d)
    _, lengths, _ = write_rankings([root])

    # each length ranked from its own AL and its own measured speedup
    top = lengths[lengths["rank"] == 1].set_index(["length", "batch_size"])
    assert top.loc[("300", 1), "d"] == 3 and top.loc[("1k", 1), "d"] == 1
    entry = lengths[(lengths.length == "1k") & (lengths.batch_size == 1) & (lengths.d == 3)].iloc[0]
    assert entry.al == pytest.approx(2.0) and entry.speedup_source == "fake"  # the fake engine's, said so
    summary = read_summary(root / "d=3")
    at_1k = next(p for p in summary.operating_points if p.batch_size == 1).by_length["1k"]
    assert entry.speedup == pytest.approx(at_1k.speedup) and entry.t_verif_spec_ms == at_1k.t_verif_spec.median_ms
    assert lengths[(lengths.length == "300") & (lengths.d == 3)].al.tolist() == pytest.approx([4.0, 4.0])
    assert (root / LENGTH_RANKING_FILE).is_file()

    plan = read_serve_file(root / SERVE_FILE)
    assert set(plan) == PLAN_KEYS | {"by_length", "provenance"}  # the pooled plan stays as it was, and says what it is
    short, long = plan["by_length"]
    limit = summary.context_window.max_model_len
    assert (short["length"], short["input_tokens"], short["context_range"]) == ("300", 300, [1, 650])
    assert (long["length"], long["input_tokens"], long["context_range"]) == ("1k", 1000, [651, limit])
    assert [(w["batch_size"], w["d"]) for w in short["winners"]] == [(1, 3), (2, 3)]
    assert [(w["batch_size"], w["d"]) for w in long["winners"]] == [(1, 1), (2, 1)]
    assert short["winners"][0]["speculative_config"]["num_speculative_tokens"] == 3
    max_num_seqs = plan["max_num_seqs"]
    assert short["schedules"] == {"ngram": [[1, max_num_seqs, 3]]}
    assert long["schedules"] == {"ngram": [[1, max_num_seqs, 1]]}
    config = long["schedule_configs"]["ngram"]
    assert config["num_speculative_tokens"] == 1 and config["num_speculative_tokens_per_batch_size"] == [
        [1, max_num_seqs, 1]
    ]
    assert short["context_extension"] is None and short["winners"][0]["context_extension"] is None
    markdown = (root / "ranking.md").read_text()
    assert "## By context length" in markdown and "### length 1k, batch size 1" in markdown

    # the report's prediction for another GPU: a row per length, each from that length's own AL
    rows, notes = prediction_rows(find_runs(root / "d=3"), Hardware(gpu_named("h200_sxm", {})))
    fake = [("1", "4.00 [fake]"), ("1", "2.00 [fake]"), ("2", "4.00 [fake]"), ("2", "2.00 [fake]")]
    assert [(r[2], r[4]) for r in rows] == fake
    # predicted from the fake engine's acceptance: said so
    assert notes == ["d=3: predicted from fake (scripted engine, runner=fake) acceptance, not measured."]
    assert 300 < int(rows[0][3]) < 1000 < int(rows[1][3])  # each length's mean context

    # the (B, context) -> D table survives the sweep's gathering of its jobs' profiles
    gather_profiles(root)
    profile = json.loads((root / PROFILE_FILE).read_text())
    table = profile[CONTEXT_TABLE_KEY]
    assert [(r["length"], r["context_range"], r["num_speculative_tokens_per_batch_size"]) for r in table] == [
        ("300", [1, 650], [[1, max_num_seqs, 3]]),
        ("1k", [651, limit], [[1, max_num_seqs, 1]]),
    ]
    by_length = {(p["d"], p["length"]): p for p in profile["profiles"] if "length" in p}
    assert by_length[(3, "300")]["al"] == pytest.approx(4.0) and by_length[(3, "1k")]["al"] == pytest.approx(2.0)
    assert (
        by_length[(3, "1k")]["marginal"] == pytest.approx([1.0, 0.0, 0.0]) and by_length[(3, "1k")]["domain"] == "all"
    )


def test_lengths_past_the_native_window_name_the_extension_they_were_measured_under(tmp_path, smollm2):  # noqa: F811
    target = short_window_target(tmp_path, smollm2)
    root = tmp_path / "sweep"
    measure(tmp_path, target, root / "d=3", 3, EXTENDED)
    _, lengths, _ = write_rankings([root])
    extension = read_summary(root / "d=3").context_window.extension
    # every length was measured under it, the one within the native window too (it rescales every position)
    assert extension and set(lengths.context_extension) == {extension}

    short, long = read_serve_file(root / SERVE_FILE)["by_length"]
    assert short["context_extension"] == long["context_extension"] == extension
    assert {w["context_extension"] for w in long["winners"] + short["winners"]} == {extension}
    assert f"length 1k (measured under the context extension {extension})" in (root / "ranking.md").read_text()
    table = json.loads((root / PROFILE_FILE).read_text())[CONTEXT_TABLE_KEY]
    assert [r["context_extension"] for r in table] == [extension, extension]


ROWS = [
    {"question_id": "q1", "category": "coding", "turns": ["write a function", "now test it"]},
    {"question_id": "q2", "category": "writing", "turns": ["write a poem"]},
]


def test_runs_without_lengths_rank_and_serve_as_before(tmp_path):
    root = tmp_path / "sweep"
    for d in (1, 2):
        cfg = compose_run(
            *fake_overrides(tmp_path, ROWS, accepted_script(d), name=f"q{d}", num_attention_heads=4),
            "drafter=ngram",
            f"d={d}",
            "baseline=true",
            "batch_sizes=[1,2]",
        )
        run(cfg, root / f"d={d}", progress=lambda label: None)
    (root / LENGTH_RANKING_FILE).write_text("stale")  # left by an earlier state of the sweep
    ranking, lengths, _ = write_rankings([root])
    assert lengths.empty and not (root / LENGTH_RANKING_FILE).exists()
    assert "length" not in ranking.columns and "input_tokens" not in ranking.columns
    assert set(read_serve_file(root / SERVE_FILE)) == PLAN_KEYS | {"provenance"}
    assert "By context length" not in (root / "ranking.md").read_text()
    assert not (root / PROFILE_FILE).exists()  # ranking writes no profile file without lengths
    profile = json.loads((root / "d=2" / PROFILE_FILE).read_text())
    assert set(profile) == {"schema_version", "profiles"} and profile["schema_version"] == 1
    assert not any("length" in p or "input_tokens" in p for p in profile["profiles"])
    assert list(pd.read_csv(root / "ranking.csv").columns[-7:]) == [
        "chat_template_kwargs",
        "setting",
        "source",
        "runner",
        "engine",
        "dtype",
        "model_runner",
    ]


def test_each_context_goes_to_the_nearest_measured_length_ties_to_the_shorter():
    lengths = [1000, 8000, 32000]
    assert [nearest_length(lengths, c) for c in (1, 4500, 4501, 20000, 20001, 100000)] == [
        1000,
        1000,
        8000,
        8000,
        32000,
        32000,
    ]
    ranges = length_ranges([32000, 1000, 8000], 131072)
    assert ranges == [[1, 4500], [4501, 20000], [20001, 131072]]
    # the ranges are exactly what nearest_length gives: every context in one, the nearest's
    for (start, end), length in zip(ranges, lengths):
        assert {nearest_length(lengths, c) for c in (start, (start + end) // 2, end)} == {length}
    assert length_ranges([300], 100) == [[1, 300]]  # never shorter than the length itself
