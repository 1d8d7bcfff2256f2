"""The file formats the foundation owns beside the run dir's records: serve.json, whatif.json,
curves.parquet and a sweep job's failure.json read back as written, and a damaged or foreign file
refused in one line (CorruptRecord naming the file and what it lacks) rather than read as
something it is not.
Ranked sweeps and predictions read through these readers in test_rank_by_length.py,
test_curves.py and test_whatif*.py."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from speclens.errors import CorruptRecord
from speclens.file_formats.curves_file import CURVES_CSV, CURVES_FILE, read_curves_file, write_curves_files
from speclens.file_formats.run_files import FAILURE_FILE, read_failure, record_failure
from speclens.file_formats.schedule_file import Mode, read_schedule
from speclens.file_formats.serve_file import (
    SERVE_FILE,
    context_table_beside,
    mode_plans,
    plan_at_temperature,
    read_serve_file,
    write_serve_file,
)
from speclens.file_formats.whatif_file import WHATIF_FILE, read_whatif_file, write_whatif_file
from speclens.provenance import Provenance

# What the plans below are of: measured in float32 by vLLM in this process.
PLAN_IDENTITY = {"source": "measured", "runner": "vllm", "engine": "vllm", "dtype": "float32", "model_runner": "v1"}


def plan(temperature: float, k: int, lengths: bool = False) -> dict:
    """One mode's plan: eagle3 at D=k up to B=8, then plain decoding."""
    out = {
        "winners": [],
        "schedules": {"eagle3": [[1, 8, k], [9, 64, 0]]},
        "schedule_configs": {"eagle3": None},
        "max_num_seqs": 64,
        "temperature": temperature,
        "provenance": [Provenance(**PLAN_IDENTITY).to_dict()],
    }
    if lengths:
        out["by_length"] = [
            {
                "length": "1k",
                "input_tokens": 1000,
                "context_range": [1, 4096],
                "context_extension": None,
                "winners": [],
                "schedules": {"eagle3": [[1, 64, k - 1]]},
                "schedule_configs": {"eagle3": None},
            }
        ]
    return out


def test_serve_json_reads_back_per_temperature_and_its_context_table_names_each_mode(tmp_path):
    two = {"by_temperature": [plan(0.0, 3, lengths=True), plan(1.0, 2)]}
    write_serve_file(two, tmp_path)
    read = read_serve_file(tmp_path / SERVE_FILE)
    assert [p["temperature"] for p in mode_plans(read)] == [0.0, 1.0]
    assert plan_at_temperature(read, 1.0)["schedules"]["eagle3"][0] == [1, 8, 2]
    assert plan_at_temperature(read, 0.5) is None
    table = context_table_beside(tmp_path)
    assert [(r["temperature"], r["length"], r["num_speculative_tokens_per_batch_size"]) for r in table] == [
        (0.0, "1k", [[1, 64, 2]])
    ]
    # evals.run's drafter.schedule= reads the same file through the same walk.
    own = Provenance(**PLAN_IDENTITY)
    assert read_schedule(str(tmp_path / SERVE_FILE), "eagle3", "drafter.schedule", own, Mode(1.0, {})) == [
        [1, 8, 2],
        [9, 64, 0],
    ]


@pytest.mark.parametrize(
    "content, why",
    [
        ("{not json", "unreadable"),
        ("[1, 2]", "layout of a serve.json"),
        (json.dumps({"winners": [], "max_num_seqs": 8}), "layout of a serve.json"),
        (json.dumps({"by_temperature": [plan(0.0, 3), {"winners": []}]}), "layout of a serve.json"),
    ],
)
def test_a_damaged_serve_json_is_refused_naming_the_file_and_gives_no_context_table(tmp_path, content, why):
    (tmp_path / SERVE_FILE).write_text(content)
    with pytest.raises(CorruptRecord, match=why) as refused:
        read_serve_file(tmp_path / SERVE_FILE)
    assert str(tmp_path / SERVE_FILE) in str(refused.value) and "\n" not in str(refused.value)
    assert context_table_beside(tmp_path) == []


def prediction() -> dict:
    return {
        "gpu": {"name": "H100"},
        "tp": 1,
        "points": [{"drafter": "eagle3", "d": 3, "batch_size": 1, "context_len": 512, "speedup": 2.1}],
        "best": [],
        "provenance": {"source": "predicted", "acceptance": {}},
    }


def test_whatif_json_reads_back_and_a_file_that_is_no_prediction_is_refused(tmp_path):
    write_whatif_file(prediction(), tmp_path)
    assert read_whatif_file(tmp_path)["points"][0]["speedup"] == 2.1
    lacking = {k: v for k, v in prediction().items() if k != "points"}
    measured = prediction() | {"provenance": {"source": "measured"}}
    said_measured = r"field provenance.source=\"measured\": input should be 'predicted'"
    for damaged, why in ((lacking, "it lacks points"), (measured, said_measured)):
        (tmp_path / WHATIF_FILE).write_text(json.dumps(damaged))
        with pytest.raises(CorruptRecord, match=why):
            read_whatif_file(tmp_path)


def test_a_failed_jobs_record_reads_back_redacted_and_a_damaged_one_is_still_a_failure(tmp_path):
    record_failure(tmp_path / "job", ["d=3", "runner.url=http://me:secret@127.0.0.1:8000"], "out of memory", 2)
    read = read_failure(tmp_path / "job" / FAILURE_FILE)
    assert (read["job"], read["error"], read["exit_status"]) == ("job", "out of memory", 2)
    assert "secret" not in json.dumps(read)
    (tmp_path / "job" / FAILURE_FILE).write_text("{cut sh")
    damaged = read_failure(tmp_path / "job" / FAILURE_FILE)
    assert damaged["exit_status"] == 1 and "is unreadable" in damaged["error"]


def test_curves_read_back_as_written_and_a_damaged_parquet_is_refused_in_one_line(tmp_path):
    curves = pd.DataFrame(
        {"drafter": ["eagle3"] * 2, "d": [1, 2], "domain": ["all"] * 2, "al": [1.6, 2.1], "source": ["replayed"] * 2}
    )
    write_curves_files(curves, tmp_path)
    assert read_curves_file(tmp_path).al.tolist() == [1.6, 2.1]
    assert pd.read_csv(tmp_path / CURVES_CSV).d.tolist() == [1, 2]  # the CSV holds the same rows
    # a replay's curves without the AL they draw, or with one below 1: one line, not a KeyError
    curves.drop(columns="al").to_parquet(tmp_path / CURVES_FILE)
    with pytest.raises(
        CorruptRecord, match=r"curves.parquet does not have the layout of a curves file \(field \[0\].al is required"
    ):
        read_curves_file(tmp_path)
    curves.assign(al=[0.5, 2.1]).to_parquet(tmp_path / CURVES_FILE)
    with pytest.raises(CorruptRecord, match=r"curves.parquet: field \[0\].al=0.5: must be >= 1"):
        read_curves_file(tmp_path)
    (tmp_path / CURVES_FILE).write_bytes(b"PAR1 cut short")
    with pytest.raises(CorruptRecord, match="is not a readable parquet file") as refused:
        read_curves_file(tmp_path)
    assert "\n" not in str(refused.value)
