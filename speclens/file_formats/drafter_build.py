"""`speclens_drafter.json`: the build facts of a drafter speclens trained itself, kept beside its weights.

Read by the pre-engine plan (into stamp.json), `python -m evals.drafters` and the
report's stamp. A user's own checkpoint has no such file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from speclens.errors import CorruptRecord

__all__ = [
    "DRAFTER_FACTS_FILE",
    "DRAFTER_FACTS_VERSION",
    "built_version",
    "describe_build",
    "is_current_build",
    "read_drafter_facts",
]

DRAFTER_FACTS_FILE = "speclens_drafter.json"
# 2: trained on answers generated in vLLM's own engine process (bit-stable; see
# drafters/training/selfdistill.py). 3: the head's held-out agreement counts as vLLM accepts, over
# the target's whole vocabulary (drafters/training/eagle3_head.py: chain_agreement); the weights
# are those of version 2. 4: answers decoded in float32 on one thread, every answer that recites an
# evaluation set dropped (corpus.dropped_recitations). 5: `training_probe`, the weights' digest after
# the first steps (the same weights as version 4). Builds of another version are rebuilt on use.
DRAFTER_FACTS_VERSION = 5


def _read_record(folder: Path) -> dict[str, Any] | None:
    """``folder``'s build record as written (None: it has none); CorruptRecord when unreadable."""
    path = Path(folder) / DRAFTER_FACTS_FILE
    if not path.is_file():
        return None
    try:
        facts = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CorruptRecord(f"{path} is unreadable ({exc}); delete {Path(folder)} to build the drafter again") from None
    if not isinstance(facts, dict) or not isinstance(facts.get("version"), int):
        raise CorruptRecord(f"{path} is not a drafter build record; delete {Path(folder)} to build the drafter again")
    return facts


def read_drafter_facts(folder: Path) -> dict[str, Any] | None:
    """The build facts in ``folder``, or None when speclens did not build it."""
    facts = _read_record(folder)
    if facts is not None and facts["version"] != DRAFTER_FACTS_VERSION:
        raise CorruptRecord(
            f"{Path(folder) / DRAFTER_FACTS_FILE} is not a version-{DRAFTER_FACTS_VERSION} drafter build "
            f"record; delete {Path(folder)} to build the drafter again"
        )
    return facts


def built_version(folder: Path) -> int | None:
    """The builder version that built ``folder`` (None: nothing built there). An unreadable record
    is a CorruptRecord, not a reason to spend minutes building again unasked."""
    facts = _read_record(folder)
    return None if facts is None else facts["version"]


def is_current_build(folder: Path) -> bool:
    """Whether ``folder`` holds a drafter built by this version of the builder (CorruptRecord when
    its record is unreadable)."""
    return built_version(folder) == DRAFTER_FACTS_VERSION


def describe_build(facts: Any) -> str:
    """One line: what was trained, on what, how far, how well it agrees with the target, how long it
    took; or that the record (read from a run's stamp, which may be damaged) cannot be read."""
    try:
        return _described(facts)
    except (KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError):
        return "a build record speclens cannot read (damaged or written by another tool)"


def _described(facts: dict[str, Any]) -> str:
    training = facts["training"]
    if training["steps"] == 0:  # the untrained build synthetic acceptance times (evals/embedded/drafter_builds.py)
        return (
            f"{facts['mechanism']} for {facts['target']} built by speclens with {facts['library']}: untrained, "
            "of the trained one's shape (for synthetic acceptance)"
        )
    corpus = facts["corpus"]
    agreement = facts["heldout_greedy_agreement"]
    shown = "/".join(f"{a:.2f}" for a in agreement) if isinstance(agreement, list) else f"{agreement:.2f}"
    return (
        f"{facts['mechanism']} for {facts['target']} built by speclens with {facts['library']}: "
        f"{corpus['name']} ({corpus['training_prompts']} prompts, {corpus['answer_tokens']} answer tokens), "
        f"{training['steps']} steps, final loss {training['final_loss']:.3f}, held-out greedy agreement "
        f"{shown}, {facts['build_seconds']['total'] / 60:.1f} min"
    )
