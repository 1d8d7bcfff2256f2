"""Run dirs written by the schema-2 speclens (tests/data/schema2, made before the reshape) pass
through every report command with the same content as that release produced
(tests/data/schema2_expected). A CSV may have gained columns since (appended; a reader of that
release's columns finds them unchanged): its old columns are compared. The markdown files may
have gained or moved whole sections (`## ...`) since; every section that release wrote is compared
whole, but for the report's, whose tables are (its layout and charts were redesigned since)."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from reports.build import main as build_main
from reports.compare import main as compare_main
from reports.curves import main as curves_main
from reports.rank import main as rank_main

DATA = Path(__file__).resolve().parents[1] / "data"
EXPECTED = DATA / "schema2_expected"


@pytest.fixture
def schema2(tmp_path) -> Path:
    copy = tmp_path / "schema2"
    shutil.copytree(DATA / "schema2", copy)
    return copy


def sections(text: str) -> dict[str, str]:
    """A markdown file's `## ` sections by title (the head under ""), each section's whole text."""
    head, *parts = text.split("\n## ")
    return {"": head} | {part.split("\n", 1)[0]: part for part in parts}


def tables_of(section: str) -> list[str]:
    return [line for line in section.splitlines() if line.startswith("|")]


def same_content(produced: Path, expected_name: str, root: Path) -> None:
    expected = (EXPECTED / expected_name).read_text()
    text = produced.read_text().replace(str(root), "<DATA>")
    if produced.suffix == ".csv":
        old_columns = expected.splitlines()[0].split(",")
        frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
        assert list(frame.columns[: len(old_columns)]) == old_columns, f"{produced.name}: the old columns moved"
        text = frame[old_columns].to_csv(index=False)
    if produced.suffix == ".md":
        # sections may have been added or moved since; each one that release wrote is the same (of the
        # report, redesigned since to lead with its answer and draw each chart by its data: their tables)
        now, then = sections(text), sections(expected)
        if produced.name == "report.md":
            now, then = ({title: tables_of(s) for title, s in part.items() if tables_of(s)} for part in (now, then))
        assert {title: now.get(title) for title in then} == then, f"{produced.name} differs from {expected_name}"
        return
    assert text == expected, f"{produced.name} differs from {expected_name}"


def test_reports_of_schema2_runs_are_unchanged(schema2, capsys):
    baseline, candidate = schema2 / "baseline", schema2 / "candidate"
    assert curves_main([str(baseline)]) == 0
    assert rank_main([str(baseline)]) == 0
    assert compare_main([str(baseline), str(candidate)]) == 0
    assert build_main([str(baseline)]) == 0
    for produced, expected in [
        (baseline / "curves.csv", "curves.csv"),
        (baseline / "ranking.csv", "ranking.csv"),
        (baseline / "ranking.md", "ranking.md"),
        (candidate / "compare.csv", "compare.csv"),
        (candidate / "compare.md", "compare.md"),
        (baseline / "report.md", "report.md"),
    ]:
        same_content(produced, expected, schema2)


ROWS = [
    {"question_id": f"q{i}", "category": "coding" if i % 2 else "writing", "turns": [f"task number {i} please"]}
    for i in range(6)
]


def schema2_script(shift: int, d: int) -> dict:
    """The fake engine's script the schema-2 runs were measured with (tests/data/README.md)."""
    return {f"q{i}#0": [min((i + k + shift) % 4, d) if (i + k) % 5 else None for k in range(8)] for i in range(6)}


def test_a_schema2_night_is_a_nightly_baseline(schema2, tmp_path, capsys):
    from evals.nightly import main as nightly_main
    from tests.unit.conftest import write_checkpoint, write_questions, write_script

    target = write_checkpoint(tmp_path / "target")
    questions = write_questions(tmp_path / "q.jsonl", ROWS)
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        f"common: [runner=fake, target=custom, 'target.model={target}', dataset=jsonl, "
        f"'dataset.path={questions}', 'batch_sizes=[1,2]']\njobs:\n  ngram_d3: [drafter=ngram, d=3]\n"
    )
    for night, shift, status in (("same", 0, 0), ("worse", 1, 1)):
        script = write_script(tmp_path / f"{night}.json", schema2_script(shift, 3))
        assert (
            nightly_main(
                [
                    f"suite={suite}",
                    f"night={night}",
                    f"out={tmp_path / night}",
                    f"runner.script={script}",
                    f"baseline={schema2 / 'baseline'}",
                    f"history={tmp_path / 'history.parquet'}",
                    # the fake engine's nights against vLLM's baseline: a difference said as meant
                    "intended=source,runner",
                ]
            )
            == status
        )
    history = pd.read_parquet(tmp_path / "history.parquet").set_index(["night", "domain"])
    old = json.loads((schema2 / "baseline" / "drafter=ngram,d=3" / "summary.json").read_text())
    assert history.loc[("same", "all"), "baseline_al"] == pytest.approx(old["al"])
    assert history.loc[("same", "all"), "al_diff"] == 0.0
    assert history.loc[("worse", "all"), "regressed"]
    assert "REGRESSION drafter=ngram d=3" in capsys.readouterr().err


def test_the_reader_migrates_every_earlier_summary_and_refuses_a_newer_one(schema2):
    from speclens.errors import SpeclensError
    from speclens.file_formats.summary_file import SUMMARY_VERSION, read_summary

    run_dir = schema2 / "baseline" / "drafter=ngram,d=3"
    summary = read_summary(run_dir)
    assert (summary.schema_version, summary.runner, summary.drafter, summary.d) == (SUMMARY_VERSION, "vllm", "ngram", 3)
    assert summary.operating_points[1].t_verif.median_ms == pytest.approx(12.0)
    # schema 1: no operating points, no AL by position (as the first release wrote it)
    raw = json.loads((run_dir / "summary.json").read_text())
    v1 = {k: v for k, v in raw.items() if k not in ("operating_points", "al_by_position", "config_fingerprint")}
    (run_dir / "summary.json").write_text(json.dumps(v1 | {"schema_version": 1}))
    migrated = read_summary(run_dir)
    assert migrated.operating_points == [] and migrated.al_by_position == [] and migrated.al == summary.al
    (run_dir / "summary.json").write_text(json.dumps(raw | {"schema_version": SUMMARY_VERSION + 1}))
    with pytest.raises(
        SpeclensError,
        match=rf"schema version {SUMMARY_VERSION + 1} is newer than this speclens reads \(up to {SUMMARY_VERSION}\)",
    ):
        read_summary(run_dir)


def test_a_run_measured_by_the_schema2_release_is_recognised_as_the_same_configuration(schema2):
    """The skip-on-rerun fingerprint is unchanged by the reshape (components are named by their
    registry key now, not by a config `name`): a sweep resumed by today's code skips those jobs."""
    from evals.pipeline.capacity import check_kv_cache
    from evals.pipeline.compose import compose_config, run_fingerprint, to_run_config
    from evals.pipeline.plan import fit_engine_defaults
    from runners.registry import runner_of
    from speclens.file_formats.summary_file import read_summary
    from speclens.model_facts import ModelFacts

    # The overrides the schema-2 runs were made with (their paths, before tests/data rewrote them).
    for drafter, d in (("ngram", 1), ("ngram", 3), ("suffix", 3)):
        cfg = compose_config(
            [
                "target=custom",
                "target.model=/tmp/gen/work/target",
                "dataset=jsonl",
                "dataset.path=/tmp/gen/work/q.jsonl",
                f"drafter={drafter}",
                f"d={d}",
                "baseline=true",
                "batch_sizes=[1,2]",
                "runner=fake",
            ]
        )
        stored = read_summary(schema2 / "baseline" / f"drafter={drafter},d={d}").config_fingerprint
        # their fake target named no context window and no dtype, and the fake engine holds no KV
        # cache: the fitted defaults are the old ones
        run_config = to_run_config(cfg)
        fitted = fit_engine_defaults(
            run_config, ModelFacts.from_config("target", {"vocab_size": 100, "hidden_size": 16}), runner_of(run_config)
        )
        check_kv_cache(run_config, fitted, None, None, [100], 2, 0, ())
        assert {k: f["value"] for k, f in fitted.items()} == {
            "engine.max_model_len": 4096,
            "engine.dtype": "bfloat16",
            "engine.cpu_kvcache_space_gib": 4,
        }
        assert run_fingerprint(cfg, run_config, fitted) == stored


@pytest.mark.parametrize(
    "file, content, message",
    [
        ("summary.json", b'{"schema_version": 2, "al": ', "summary.json is unreadable"),
        (
            "summary.json",
            b'{"schema_version": 2, "al": "high"}',
            "summary.json does not have the layout of a RunSummary",
        ),
        ("stamp.json", b"[1, 2]", "stamp.json does not have the layout of a run stamp"),
        ("steps.parquet", b"PAR1 not really", "steps.parquet is not a readable parquet file"),
    ],
)
def test_report_commands_name_a_corrupt_record_in_one_line(schema2, capsys, file, content, message):
    (schema2 / "baseline" / "drafter=ngram,d=3" / file).write_bytes(content)
    for main in (build_main, rank_main, curves_main) if file != "steps.parquet" else (compare_main,):
        args = [str(schema2 / "baseline")] + ([str(schema2 / "candidate")] if main is compare_main else [])
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("speclens: error: ") and message in err[0], err
