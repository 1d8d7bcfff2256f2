"""The module map of docs/architecture.md cannot go stale: every Python module of the project's
packages has a row there, and every row names a module that exists.

The convention (stated in the doc): in the section `## Folder and module map` (up to the next
`## ` heading), a table row whose first cell is one backticked path under a project package, ending
in `.py`, names that module. An `__init__.py` is a module of the map only where it holds code
beyond its docstring."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Iterable, NamedTuple

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("speclens", "evals", "drafters", "runners", "reports", "benchmarks")
SECTION = "## Folder and module map"
FIRST_CELL = re.compile(r"^\|\s*`([^`]+)`\s*\|")


def map_section(doc_text: str) -> str:
    """The text from the map's heading up to the next heading of the same level."""
    lines = doc_text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == SECTION]
    assert len(starts) == 1, f"docs/architecture.md has {len(starts)} '{SECTION}' headings, expected one"
    section = []
    for line in lines[starts[0] + 1 :]:
        if line.startswith("## "):
            break
        section.append(line)
    return "\n".join(section)


def mapped_modules(map_text: str) -> list[str]:
    """The modules the map's rows name, in order (repeats kept)."""
    named = []
    for line in map_text.splitlines():
        match = FIRST_CELL.match(line.strip())
        if match is None:
            continue
        path = match.group(1)
        if path.endswith(".py") and path.split("/", 1)[0] in PACKAGES:
            named.append(path)
    return named


def holds_code(source: str) -> bool:
    """Whether a module has any statement beyond its docstring."""
    body = ast.parse(source).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str):
            body = body[1:]
    return bool(body)


def modules_on_disk(root: Path = ROOT) -> list[str]:
    """Every module of the project's packages, as repository paths; a docstring-only `__init__.py`
    is not one."""
    found = []
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            if path.name == "__init__.py" and not holds_code(path.read_text(encoding="utf-8")):
                continue
            found.append(path.relative_to(root).as_posix())
    return sorted(found)


class Differences(NamedTuple):
    unmapped: list[str]  # on disk, named by no row
    stale: list[str]  # named by a row, not on disk
    repeated: list[str]  # named by more than one row


def map_differences(map_text: str, modules: Iterable[str]) -> Differences:
    named = mapped_modules(map_text)
    modules = set(modules)
    return Differences(
        unmapped=sorted(modules - set(named)),
        stale=sorted(set(named) - modules),
        repeated=sorted({m for m in named if named.count(m) > 1}),
    )


def test_the_module_map_names_every_module_and_nothing_else():
    modules = modules_on_disk()
    section = map_section(DOC.read_text(encoding="utf-8"))
    differences = map_differences(section, modules)
    assert differences.unmapped == [], (
        "modules with no row in docs/architecture.md's module map (add one, with what it holds): "
        + ", ".join(differences.unmapped)
    )
    assert differences.stale == [], (
        "rows of docs/architecture.md's module map naming no module on disk (moved or removed?): "
        + ", ".join(differences.stale)
    )
    assert differences.repeated == [], "modules with more than one row in the module map: " + ", ".join(
        differences.repeated
    )
    # The check compared something: the map and the disk both hold the whole project.
    assert len(mapped_modules(section)) == len(modules) > 150


def test_modules_on_disk_follow_the_init_rule():
    modules = modules_on_disk()
    assert "evals/pipeline/plan.py" in modules
    assert "evals/datasets/selection.py" in modules
    assert "speclens/gpu_model/step_cost.py" in modules
    assert "benchmarks/synthetic_grid.py" in modules
    # __init__.py with code (a registry, the public API, the package check) is a module ...
    assert {"drafters/__init__.py", "evals/datasets/__init__.py", "speclens/__init__.py", "evals/__init__.py"} <= set(
        modules
    )
    # ... one holding only its docstring is not.
    assert "runners/__init__.py" not in modules
    assert "speclens/gpu_model/__init__.py" not in modules
    assert "drafters/training/__init__.py" not in modules
    assert not [m for m in modules if "__pycache__" in m or not m.endswith(".py")]


def test_holds_code():
    assert not holds_code('"""Only a docstring."""\n')
    assert not holds_code("")
    assert holds_code('"""Doc."""\n\nfrom x import y\n')
    assert holds_code("X = 1\n")  # no docstring, one statement


def test_the_map_section_stops_at_the_next_heading_and_reads_first_cells_only():
    doc = "\n".join(
        [
            "# Architecture",
            "| `evals/run.py` | before the map: not counted |",
            SECTION,
            "### `evals/` — pipeline",
            "| module | purpose |",
            "| --- | --- |",
            "| `evals/pipeline/plan.py` | checks, also `evals/pipeline/stamp.py` named in a description |",
            "| `conf/config.yaml` | not a module |",
            "| `tests/layers.py` | not a project package |",
            "| `evals/datasets/` | a folder, not a module |",
            "### `drafters/training/` — sub-package",
            "| `drafters/training/corpus.py` | prompts |",
            "## Design choices",
            "| `evals/pipeline/measure.py` | after the map: not counted |",
        ]
    )
    assert mapped_modules(map_section(doc)) == ["evals/pipeline/plan.py", "drafters/training/corpus.py"]


def test_a_planted_unmapped_module_and_a_planted_stale_row_are_found():
    # Paths built from parts, so that tests/unit/test_docs_paths.py does not read them as stale pointers.
    unmapped = "/".join(("evals", "planted_module.py"))
    stale = "/".join(("runners", "planted_gone.py"))
    modules = ["evals/pipeline/plan.py", "drafters/base.py", unmapped]
    map_text = "\n".join(
        [
            "| module | purpose |",
            "| --- | --- |",
            "| `evals/pipeline/plan.py` | checks |",
            "| `drafters/base.py` | the drafter base |",
            f"| `{stale}` | a module since removed |",
        ]
    )
    assert map_differences(map_text, modules) == Differences(unmapped=[unmapped], stale=[stale], repeated=[])
    # The real map misses the planted module, and names nothing of a plant it never held.
    real = map_differences(map_section(DOC.read_text(encoding="utf-8")), [*modules_on_disk(), unmapped])
    assert real.unmapped == [unmapped]
    assert real.stale == []
    # A module removed from disk leaves its row stale.
    without_plan = [m for m in modules_on_disk() if m != "evals/pipeline/plan.py"]
    assert map_differences(map_section(DOC.read_text(encoding="utf-8")), without_plan).stale == [
        "evals/pipeline/plan.py"
    ]


def test_a_module_named_twice_is_found():
    map_text = "| `evals/pipeline/plan.py` | checks |\n| `evals/pipeline/plan.py` | the same, again |\n"
    assert map_differences(map_text, ["evals/pipeline/plan.py"]) == Differences(
        unmapped=[], stale=[], repeated=["evals/pipeline/plan.py"]
    )
