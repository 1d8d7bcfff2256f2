"""One record to one JSON file and back (drift.json, diagnosis.json, bisect.json): written atomically from its record type, read back
checked (a damaged file is CorruptRecord in one line naming the file, the field and the rule)."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from speclens.file_formats.summary_file import read_json_object
from speclens.files import write_json_atomic
from speclens.schema import parse, to_plain

T = TypeVar("T")


def write_record(value: object, path: Path) -> Path:
    write_json_atomic(to_plain(value), path)
    return path


def read_record(kind: type[T], path: Path, what: str) -> T:
    return parse(kind, read_json_object(path), path, what)
