"""speclens's generic top-level packages (evals, drafters, runners, reports: names other projects
on PyPI use too) must be this distribution's. Another installed package of one of those names is
imported instead of ours, or half of each: refused in one line that names it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

OWN_PACKAGES = ("evals", "drafters", "runners", "reports")
ROOT = Path(__file__).resolve().parent.parent


def shadowed() -> dict[str, Path | None]:
    """Each of the packages that an import would take from somewhere else: where from (None: nowhere)."""
    found = {}
    for name in OWN_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        where = Path(spec.origin).resolve().parent if spec is not None and spec.origin else None
        if where != ROOT / name:
            found[name] = where
    return found


def clash_message(found: dict[str, Path | None]) -> str:
    from importlib.metadata import packages_distributions  # slow (every distribution): only when refusing

    owners = packages_distributions()
    parts = []
    for name, where in found.items():
        others = sorted({d for d in owners.get(name, []) if d != "speclens"})
        parts.append(
            f"'{name}' is {where or 'not importable'}"
            + (f" (installed by {', '.join(others)})" if others else "")
            + f", not speclens's {ROOT / name}"
        )
    names = " ".join(sorted({d for n in found for d in owners.get(n, []) if d != "speclens"}))
    advice = (
        f"uninstall it (pip uninstall {names}) or install speclens in a virtual environment of its own"
        if names
        else "take its folder off the import path (PYTHONPATH, the current folder)"
    )
    return "speclens: error: another package takes speclens's top-level name: " + "; ".join(parts) + f". {advice}."


def check_own_packages() -> None:
    """Refuse a clash: from a command (`python -m …`, `speclens …`), one line and exit status 2;
    from a library import, an ImportError with the same line."""
    found = shadowed()
    if not found:
        return
    message = clash_message(found)
    # While `python -m` locates its module, sys.argv[0] is "-m".
    if sys.argv and (sys.argv[0] == "-m" or Path(sys.argv[0]).name == "speclens"):
        print(message, file=sys.stderr)
        raise SystemExit(2)
    raise ImportError(message)
