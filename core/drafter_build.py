"""`speclens_drafter.json`: the build facts of a drafter speclens trained itself, kept beside its weights.

Read by the pre-engine plan (into stamp.json), `python -m evals.drafters` and the
report's stamp. A user's own checkpoint has no such file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.errors import CorruptRecord

__all__ = ["DRAFTER_FACTS_FILE", "DRAFTER_FACTS_VERSION", "describe_build", "is_current_build", "read_drafter_facts"]

DRAFTER_FACTS_FILE = "speclens_drafter.json"
# 2: trained on answers generated in vLLM's own engine process (bit-stable; see
# drafters/training/selfdistill.py). 3: the head's held-out agreement counts as vLLM accepts, over
# the target's whole vocabulary (drafters/training/eagle3_head.py: chain_agreement); the weights
# are those of version 2. Builds of another version are rebuilt on use.
DRAFTER_FACTS_VERSION = 3


def read_drafter_facts(folder: Path) -> dict[str, Any] | None:
    """The build facts in ``folder``, or None when speclens did not build it."""
    path = Path(folder) / DRAFTER_FACTS_FILE
    if not path.is_file():
        return None
    try:
        facts = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CorruptRecord(f"{path} is unreadable ({exc}); delete its folder to rebuild it") from None
    if not isinstance(facts, dict) or facts.get("version") != DRAFTER_FACTS_VERSION:
        raise CorruptRecord(f"{path} is not a version-{DRAFTER_FACTS_VERSION} drafter build record; "
                            "delete its folder to rebuild it")
    return facts


def is_current_build(folder: Path) -> bool:
    """Whether ``folder`` holds a drafter built by this version of the builder."""
    try:
        return read_drafter_facts(folder) is not None
    except CorruptRecord:
        return False


def describe_build(facts: dict[str, Any]) -> str:
    """One line: what was trained, on what, how far, how well it agrees with the target, how long it took."""
    training = facts["training"]
    corpus = facts["corpus"]
    agreement = facts["heldout_greedy_agreement"]
    shown = "/".join(f"{a:.2f}" for a in agreement) if isinstance(agreement, list) else f"{agreement:.2f}"
    return (f"{facts['mechanism']} for {facts['target']} built by speclens with {facts['library']}: "
            f"{corpus['name']} ({corpus['training_prompts']} prompts, {corpus['answer_tokens']} answer tokens), "
            f"{training['steps']} steps, final loss {training['final_loss']:.3f}, held-out greedy agreement "
            f"{shown}, {facts['build_seconds']['total'] / 60:.1f} min")
