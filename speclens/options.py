"""Typed reading of `key=value` options and of the figures in files from outside: every value a
finite number of the kind and range its key needs, or one line naming the key and the rule.
JSON's NaN and Infinity, which Python's json module reads without a word, are refused."""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterable
from typing import Any

from speclens.errors import ConfigError

__all__ = ["nearest", "number", "parse_value", "strict_json_loads", "whole"]


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a finite number")


def strict_json_loads(text: str | bytes) -> Any:
    """json.loads refusing NaN, Infinity and -Infinity (ValueError, as for any malformed JSON)."""
    return json.loads(text, parse_constant=_refuse_constant)


def parse_value(text: str, key: str) -> Any:
    """An option's value: JSON where it parses (numbers, lists, null), else the text; a NaN or an
    infinity anywhere in it is refused."""
    try:
        return strict_json_loads(text)
    except json.JSONDecodeError:
        return text
    except ValueError:
        raise ConfigError(f"{key}={text}: not a finite number; give a number.") from None


def split_own_keys(argv: list[str], keys: Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """A command's own key=value arguments (`keys`) apart from the rest (evals.run overrides, kept
    as given); an argument without `=` is one line."""
    own: dict[str, str] = {}
    rest: list[str] = []
    wanted = set(keys)
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep:
            raise ConfigError(f"{arg}: expected key=value.")
        if key in wanted:
            own[key] = value
        else:
            rest.append(arg)
    return own, rest


def _shown(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (str, list, dict)) or value is None else str(value)


def number(
    value: Any,
    key: str,
    *,
    above: float | None = None,
    at_least: float | None = None,
    at_most: float | None = None,
) -> float:
    """`value` as a finite float in range, else one line naming the key and the range."""
    rule = " and ".join(
        part
        for part in (
            f"above {above:g}" if above is not None else "",
            f">= {at_least:g}" if at_least is not None else "",
            f"<= {at_most:g}" if at_most is not None else "",
        )
        if part
    )
    wanted = f"a finite number{' ' + rule if rule else ''}"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{key}={_shown(value)}: must be {wanted}.")
    if (
        (above is not None and not value > above)
        or (at_least is not None and value < at_least)
        or (at_most is not None and value > at_most)
    ):
        raise ConfigError(f"{key}={_shown(value)}: must be {wanted}.")
    return float(value)


def whole(value: Any, key: str, at_least: int = 1, at_most: int | None = None) -> int:
    """`value` as a whole number in range, else one line naming the key and the range."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < at_least or (at_most and value > at_most):
        limit = f" and <= {at_most}" if at_most else ""
        raise ConfigError(f"{key}={_shown(value)}: must be a whole number >= {at_least}{limit}.")
    return value


def closest(word: str, known: Iterable[str]) -> str | None:
    """The known word closest to a mistyped one (difflib's ratio), or None where none is close."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return close[0] if close else None


def nearest(word: str, known: Iterable[str]) -> str:
    """` (did you mean X?)` for the closest known word, or nothing."""
    found = closest(word, known)
    return f" (did you mean {found}?)" if found else ""


def dotted_get(node: Any, dotted: str) -> Any:
    """The value under a dotted key (`a.b.c`) of nested dicts (None where any part is missing)."""
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node
