"""The foundation: errors, config schemas, record and summary types, file formats, metrics and
cost definitions, redaction and cache paths. Imports nothing of the project.

The public API for notebooks and other tools (docs/api.md), imported on first use so that
`import speclens.errors` stays light:
- `read_run(path) -> Run`, `read_sweep(path) -> Sweep` (speclens/file_formats/reading.py);
- what every figure is: `Provenance` (a Run's `provenance`) and `IDENTITY_COLUMNS`, the columns
  every row of a Sweep's frames carries (speclens/provenance.py);
- the definitions over those frames (speclens/figures/metrics.py): `al(steps)`, `al_ci95(steps, seed)`,
  `request_weighted_al(steps)`, `tokens_per_step(requests)`, `per_position_acceptance(steps, d)`,
  `conditional_acceptance(per_position)`, `acceptance_histogram(steps, d)`.
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    "read_run": ("speclens.file_formats.reading", "read_run"),
    "read_sweep": ("speclens.file_formats.reading", "read_sweep"),
    "Run": ("speclens.file_formats.reading", "Run"),
    "Sweep": ("speclens.file_formats.reading", "Sweep"),
    "al": ("speclens.figures.metrics", "acceptance_length"),
    "al_ci95": ("speclens.figures.metrics", "al_ci95"),
    "request_weighted_al": ("speclens.figures.metrics", "request_weighted_al"),
    "tokens_per_step": ("speclens.figures.metrics", "tokens_per_step"),
    "per_position_acceptance": ("speclens.figures.metrics", "per_position_acceptance"),
    "conditional_acceptance": ("speclens.figures.metrics", "conditional_acceptance"),
    "acceptance_histogram": ("speclens.figures.metrics", "acceptance_histogram"),
    "IDENTITY_COLUMNS": ("speclens.provenance", "IDENTITY_COLUMNS"),
    "Provenance": ("speclens.provenance", "Provenance"),
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'speclens' has no attribute {name!r}")
    module, attribute = _PUBLIC[name]
    return getattr(importlib.import_module(module), attribute)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
