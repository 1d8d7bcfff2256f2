"""Prompts as the evaluator sees them, and the seeded, domain-stratified subset."""

from __future__ import annotations

import hashlib
import json
import random
from collections import defaultdict
from dataclasses import asdict, dataclass

from evals.errors import ConfigError


@dataclass(frozen=True)
class Prompt:
    """One conversation: user turns sent in order, later turns carrying the model's answers."""

    request_id: str
    domain: str
    # The source's own category (kept next to the normalized domain).
    category: str
    turns: tuple[str, ...]


def select(prompts: list[Prompt], num_requests: int | None, seed: int) -> list[Prompt]:
    """A deterministic subset of `num_requests` prompts, balanced across domains.

    Domains take turns (in name order) giving one prompt each from their own
    seeded shuffle, so small subsets still cover every domain.
    """
    if num_requests is None or num_requests >= len(prompts):
        return list(prompts)
    if num_requests <= 0:
        raise ConfigError(f"dataset.num_requests={num_requests}: must be >= 1 (or null for all).")
    rng = random.Random(seed)
    by_domain: dict[str, list[Prompt]] = defaultdict(list)
    for p in prompts:
        by_domain[p.domain].append(p)
    queues = []
    for domain in sorted(by_domain):
        rows = list(by_domain[domain])
        rng.shuffle(rows)
        queues.append(rows)
    chosen: list[Prompt] = []
    while len(chosen) < num_requests:
        for q in queues:
            if q and len(chosen) < num_requests:
                chosen.append(q.pop(0))
    return chosen


def fingerprint(prompts: list[Prompt]) -> str:
    """sha256 of exactly what is sent, so two runs can tell whether they saw the same prompts."""
    blob = json.dumps([asdict(p) for p in prompts], sort_keys=True, ensure_ascii=False)
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()
