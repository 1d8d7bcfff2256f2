"""The one schema library of speclens's records: pydantic 2 over typed dataclasses.

A record type is a dataclass declared with `record` (frozen by default): its field types say what
each figure is, its ranges (`AL`, `Rate`, `Count`, `Milliseconds`, ...) and which fields are
required, once. pydantic checks a file against that declaration when it is read (`parse`: strict
types, no unknown keys, no NaN or infinity) and gives the JSON Schema users validate against
(`json_schema`). A file that breaks
the declaration is refused in one line naming the file, the field and the rule.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import Annotated, Any, Callable, TypeVar, overload

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from speclens.errors import CorruptRecord

# The rules every record's figures are held to: an AL is at least 1 (its upper bound, 1 + d, is
# the run's: RunSummary's reader), a rate a share, a count a whole number >= 0, a time >= 0.
AL = Annotated[float, Field(ge=1.0)]
Rate = Annotated[float, Field(ge=0.0, le=1.0)]
Count = Annotated[int, Field(ge=0)]
Milliseconds = Annotated[float, Field(ge=0.0)]
Seconds = Annotated[float, Field(ge=0.0)]
NonNegative = Annotated[float, Field(ge=0.0)]
DraftLength = Annotated[int, Field(ge=1)]

# Every record refuses keys it does not declare, and NaN or infinity in any figure: no figure
# speclens writes can be one, and arithmetic downstream would carry it silently.
RECORD_CONFIG = ConfigDict(extra="forbid", allow_inf_nan=False)
# A record that holds another's document whole (a stamp's resolved config) keeps the keys it does not
# read: it declares only those, with their types.
OPEN_RECORD_CONFIG = ConfigDict(extra="allow", allow_inf_nan=False)

T = TypeVar("T")


@overload
def record(cls: type[T]) -> type[T]: ...
@overload
def record(*, frozen: bool = True, kw_only: bool = False) -> Callable[[type[T]], type[T]]: ...
def record(cls: type[T] | None = None, *, frozen: bool = True, kw_only: bool = False) -> Any:
    """A record type: a dataclass (frozen unless said otherwise) that pydantic validates strictly;
    `kw_only` where its fields keep a file's column order, required and defaulted ones mixed."""

    def wrap(kind: type[T]) -> type[T]:
        if "__pydantic_config__" not in vars(kind):  # a record that keeps others' keys says so itself
            kind.__pydantic_config__ = RECORD_CONFIG  # type: ignore[attr-defined]
        return dataclasses.dataclass(frozen=frozen, kw_only=kw_only)(kind)

    return wrap if cls is None else wrap(cls)


@functools.lru_cache(maxsize=None)
def adapter(kind: Any) -> TypeAdapter:
    """The validator of `kind` (built once per type: pydantic compiles it)."""
    return TypeAdapter(kind)


def parse(kind: type[T], data: Any, path: Path | str, what: str | None = None) -> T:
    """`data` (parsed JSON, or JSON text) as `kind`, checked strictly against its declaration; a
    CorruptRecord naming `path`, the first field that breaks it and the rule otherwise (`what`: the
    record's name in that line, `kind`'s own by default)."""
    text = data if isinstance(data, (str, bytes)) else json.dumps(data, allow_nan=True)
    try:
        return adapter(kind).validate_json(text, strict=True)
    except ValidationError as exc:
        raise CorruptRecord(refusal(exc, path, what or kind.__name__)) from None


# pydantic's error types for a value of the right type out of its range, and how a line says each.
RANGE_RULES = {
    "greater_than_equal": "must be >= {ge}",
    "greater_than": "must be > {gt}",
    "less_than_equal": "must be <= {le}",
    "less_than": "must be < {lt}",
    "finite_number": "must be a finite number",
}
# Its error types for a value of the wrong type, said in the words of JSON.
TYPE_RULES = {
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be an object",
    "dataclass_type": "must be an object",
    "none_required": "must be null",
}


def refusal(exc: ValidationError, path: Path | str, what: str) -> str:
    """The one line a record that breaks its declaration is refused with: the file, the first field
    and the rule (a value out of range: a corrupt record; else not the layout of `what`)."""
    error = exc.errors(include_url=False)[0]
    where = field_path(error["loc"]) or "(the document)"
    kind = error["type"]
    if kind in RANGE_RULES:
        rule = RANGE_RULES[kind].format(**{k: _number(v) for k, v in (error.get("ctx") or {}).items()})
        return f"{path}: field {where}={_shown(error.get('input'))}: {rule}; a corrupt record, measure the run again"
    if kind in ("missing", "missing_argument", "missing_keyword_only_argument"):
        detail = f"field {where} is required but absent"
    elif kind in ("extra_forbidden", "unexpected_keyword_argument"):
        detail = f"field {where} is not one of its fields"
    elif kind == "value_error":  # a record's own check (its __post_init__) said what is wrong
        detail = f"field {where}: {str(error['msg']).removeprefix('Value error, ')}"
    else:
        message = error["msg"] or kind
        rule = TYPE_RULES.get(kind) or message[0].lower() + message[1:]
        detail = f"field {where}={_shown(error.get('input'))}: {rule}"
    return f"{path} does not have the layout of a {what} ({detail})"


def _number(value: Any) -> Any:
    return f"{value:g}" if isinstance(value, float) else value


def _shown(value: Any) -> str:
    shown = json.dumps(value, default=str)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def field_path(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as a dotted key path: ("a", 2, "b") -> "a[2].b" (the type names
    pydantic puts in for unions and tagged choices are left out)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and not _is_type_step(part):
            out += f".{part}" if out else part
    return out


def _is_type_step(part: str) -> bool:
    # pydantic names the member of a union it tried ("float", "list[float]", "function-after[...]").
    return part in {"int", "float", "str", "bool", "none", "list", "dict"} or "[" in part


# JSON keys that are Python keywords are held with a trailing underscore.
_KEYWORDS = {"from_": "from"}


def to_plain(value: Any) -> Any:
    """A record as plain JSON data: its fields by their JSON names, a field marked
    `omit_when_none` (speclens/figures/metrics.py OMITTED_WHEN_NONE) left out where it is None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            _KEYWORDS.get(f.name, f.name): to_plain(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not (f.metadata.get("omit_when_none") and getattr(value, f.name) is None)
        }
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    return value


def json_schema(kind: Any, title: str | None = None) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of `kind`, as files of it are validated against."""
    schema = adapter(kind).json_schema(by_alias=True, mode="validation")
    if title:
        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": title, **schema}
    return schema
