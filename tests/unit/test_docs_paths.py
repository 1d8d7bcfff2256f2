"""Every repository path that the docs, the READMEs, the code's docstrings and comments name exists:
a file moved or renamed leaves no pointer to nowhere behind."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOP = ("speclens", "evals", "drafters", "runners", "reports", "tests", "benchmarks", "conf", "docs", ".ci", ".github")
PATH = re.compile(r"(?<![\w./~${-])((?:" + "|".join(re.escape(t) for t in TOP) + r")/[\w./-]*[\w/])")
PLACEHOLDER = re.compile(r"[<*{]")


def named_paths(text: str) -> set[str]:
    found = set()
    for match in PATH.finditer(text):
        end = match.end()
        if end < len(text) and PLACEHOLDER.match(text[end]):
            continue  # a pattern or a placeholder (`tests/data/<x>`, `docs/*.md`), not a path
        found.add(match.group(1).rstrip("."))
    return found


def tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / name for name in out.stdout.split()]


def test_every_path_named_in_docs_and_code_exists():
    sources = tracked("*.md", "*.py", "*.yaml", "*.toml", "Makefile", ".ci/*")
    sources += [p for p in (ROOT / "docs").rglob("*.md") if p not in sources]  # docs not yet committed too
    missing = sorted(
        f"{source.relative_to(ROOT)}: {path}"
        for source in sources
        if source.is_file() and source != Path(__file__).resolve()  # this file plants stale paths
        for path in named_paths(source.read_text(encoding="utf-8"))
        if not (ROOT / path).exists()
    )
    assert len(sources) > 150
    assert missing == []


def test_a_stale_path_is_found_and_patterns_are_not_paths():
    text = "see `reports/redact.py` and reports/rank.py, `tests/data/<set>/`, docs/*.md, ~/.cache/speclens/models"
    assert named_paths(text) == {"reports/redact.py", "reports/rank.py"}
    assert not (ROOT / "reports/redact.py").exists()
