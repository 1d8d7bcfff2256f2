"""docs/schemas/ holds the JSON Schema of every file format speclens writes, generated from its
record types (speclens/file_formats/schemas.py), and kept current here; tests/conftest.py validates
every JSON file the suite writes against them."""

from __future__ import annotations

import json

import jsonschema
import pytest

from speclens.file_formats.schemas import DOCS_FOLDER, FORMATS, schema_documents, schema_name
from speclens.file_formats.summary_file import read_summary
from tests.unit.test_identity import mixed  # noqa: F401 (the fake engine's runs, shared)


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
