"""docs/schemas/ holds the JSON Schema of every file format speclens writes, generated from its
record types (speclens/file_formats/schemas.py), and kept current here; tests/conftest.py validates
every JSON file the suite writes against them."""

from __future__ import annotations

import json
import shutil

import jsonschema
import pandas as pd
import pytest

from reports.speedup_ranking import rank
from speclens.errors import CorruptRecord
from speclens.file_formats.ranking_file import RANK_COLUMNS, RANKING_FILE, RankingRow, checked_rows
from speclens.file_formats.schemas import DOCS_FOLDER, FORMATS, schema_documents, schema_name
from speclens.file_formats.summary_file import SUMMARY_VERSION, read_summary
from tests.unit.test_identity import mixed, ranked  # noqa: F401 (the fake engine's runs, shared)


def test_the_committed_schemas_are_those_the_records_give():
    generated = schema_documents()
    assert sorted(generated) == sorted(p.name for p in DOCS_FOLDER.glob("*.schema.json"))
    for name, text in generated.items():
        assert (DOCS_FOLDER / name).read_text() == text, (
            f"docs/schemas/{name} is stale: python -m speclens.file_formats.schemas rewrites it"
        )


def test_a_written_summary_validates_and_a_broken_one_does_not(mixed):  # noqa: F811
    schema = json.loads((DOCS_FOLDER / schema_name("summary.json")).read_text())
    run_dir = mixed / "f32" / "ngram"
    data = json.loads((run_dir / "summary.json").read_text())
    jsonschema.validate(data, schema)
    assert read_summary(run_dir).provenance.dtype == "float32"
    for broken in (data | {"al": 0.5}, data | {"unknown": 1}, {k: v for k, v in data.items() if k != "drafter"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, schema)
    # the same rules the reader applies: the JSON Schema is the record's own, not a second copy
    assert set(FORMATS) >= {"summary.json", "stamp.json", "serve.json", "whatif.json", "failure.json"}


# The top-level fields each summary version began writing (speclens/file_formats/summary_file.py
# MIGRATIONS): a file of version v has none of those added after v.
ADDED_IN = {
    2: ("al_by_position", "operating_points", "config_fingerprint"),
    3: ("runner",),
    5: ("record_granularity",),
    7: ("numerics",),
    8: ("by_segment", "reasoning"),
    9: ("by_length", "context_window"),
    10: ("draft_share",),
    11: ("provenance",),
}


@pytest.mark.parametrize("version", range(1, SUMMARY_VERSION))
def test_every_earlier_summary_version_reads_with_its_figures_and_a_provenance_from_its_stamp(
    mixed,  # noqa: F811
    tmp_path,
    version,
):
    run_dir = tmp_path / "run"
    shutil.copytree(mixed / "f32" / "ngram", run_dir)
    current = json.loads((run_dir / "summary.json").read_text())
    later = {name for since, names in ADDED_IN.items() if since > version for name in names}
    old = {k: v for k, v in current.items() if k not in later} | {"schema_version": version}
    (run_dir / "summary.json").write_text(json.dumps(old))

    summary = read_summary(run_dir)
    assert summary.schema_version == SUMMARY_VERSION
    assert (summary.al, summary.tokens_per_step, summary.n_steps) == (
        current["al"],
        current["tokens_per_step"],
        current["n_steps"],
    )
    # before version 3 every run was vLLM's (the migration's word); since then the runner written,
    # and what the figures are comes from the stamp either way: never a default of measured
    runner = "vllm" if version < 3 else "fake"
    assert summary.runner == runner
    assert (summary.provenance.runner, summary.provenance.dtype) == (runner, "float32")
    assert summary.provenance.source == ("measured" if version < 3 else "fake")
    if version < 2:
        assert (summary.al_by_position, summary.config_fingerprint) == ([], None)


WHOLE = ("batch_size", "d", "rank")  # whole numbers a frame holds as floats beside its NaNs


def plain_row(row: dict) -> dict:
    """A ranking frame's row as its record's JSON: NaN -> null, numpy scalars -> Python."""
    plain = {}
    for key, value in row.items():
        if value is None or (not isinstance(value, str) and pd.isna(value)):
            plain[key] = None
        else:
            value = getattr(value, "item", lambda v=value: v)()
            plain[key] = int(value) if key in WHOLE else value
    return plain


def test_ranking_rows_are_their_records_and_a_row_that_cannot_say_what_it_is_is_refused(ranked):  # noqa: F811
    frame = pd.read_csv(ranked / RANKING_FILE, nrows=0)
    assert list(frame.columns) == RANK_COLUMNS  # the file's columns are the record's fields, in order
    ranking = rank([ranked])
    schema = json.loads((DOCS_FOLDER / schema_name("ranking.row")).read_text())
    rows = [plain_row(r) for r in ranking.to_dict("records")]
    for row in rows:
        jsonschema.validate(row, schema)
    # the fake engine's rows say so, with their engine and dtype, and `unknown` for the model runner
    # it has none of (never null: a groupby over the identity keeps every row)
    assert {(r["source"], r["engine"], r["dtype"], r["model_runner"]) for r in rows} == {
        ("fake", "fake", "bfloat16", "unknown")
    }
    by_setting = {(r["setting"], r["drafter"]): r["rank"] for r in rows if r["domain"] == "all"}
    assert by_setting == {
        ("", "ngram"): 1,
        ("", "none"): 2,
        ("kv_cache_dtype=fp8", "none"): 1,
        ("kv_cache_dtype=fp8", "ngram"): 2,
    }
    # a row built without its identity, or with an AL below 1, is refused naming the field and rule
    nameless = {k: v for k, v in rows[0].items() if k != "source"}
    with pytest.raises(
        CorruptRecord, match=r"ranking.csv does not have the layout of a RankingRow \(row 0\) \(field source"
    ):
        checked_rows(RankingRow, [nameless], RANKING_FILE)
    with pytest.raises(CorruptRecord, match=r"field al=0.5: must be >= 1"):
        checked_rows(RankingRow, [rows[0] | {"al": 0.5}], RANKING_FILE)
