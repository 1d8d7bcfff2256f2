"""Category filter, the seeded stratified subset, and the prompt-set fingerprint."""

from __future__ import annotations

import hashlib
import json
import random
from collections import defaultdict
from dataclasses import asdict

from speclens.errors import ConfigError
from speclens.figures.summary import RESERVED_GROUP_NAMES
from speclens.generation import Prompt


def check_group_names(prompts: list[Prompt], source: str) -> None:
    """Every prompt's category and domain is a name a report can group by: not empty, not a name
    speclens gives a group of its own (`all`: its rows would replace the whole run's)."""
    for p in prompts:
        for what, name in (("category", p.category), ("domain", p.domain)):
            if not name.strip():
                raise ConfigError(f"{source}: request {p.request_id!r} has an empty {what}; give every row a category.")
            if name.strip().lower() in RESERVED_GROUP_NAMES:
                raise ConfigError(
                    f"{source}: request {p.request_id!r} has the {what} {name!r}, the name speclens gives the whole "
                    "run's group; rename that category in the prompt file."
                )


def filter_categories(prompts: list[Prompt], categories: list[str] | None, source: str) -> list[Prompt]:
    if not categories:
        return prompts
    present = sorted({p.category for p in prompts})
    unknown = sorted(set(categories) - set(present))
    if unknown:
        raise ConfigError(
            f"dataset.categories: {', '.join(unknown)} not in {source}; its categories are {', '.join(present)}."
        )
    return [p for p in prompts if p.category in set(categories)]


def select_per_length(prompts: list[Prompt], num_requests: int | None, seed: int) -> list[Prompt]:
    """`select` within each length bucket where the prompts state several lengths (num_requests is
    then per length), else over all of them."""
    lengths = sorted({p.input_tokens for p in prompts if p.input_tokens is not None})
    if len(lengths) < 2:
        return select(prompts, num_requests, seed)
    unbucketed = [p for p in prompts if p.input_tokens is None]
    chosen = [q for n in lengths for q in select([p for p in prompts if p.input_tokens == n], num_requests, seed)]
    return chosen + select(unbucketed, num_requests, seed) if unbucketed else chosen


def select(prompts: list[Prompt], num_requests: int | None, seed: int) -> list[Prompt]:
    """A deterministic subset of `num_requests` prompts, stratified across source categories.

    Categories take turns (in name order) giving one prompt each from their own
    seeded shuffle, so small subsets still cover every category and no category
    gets more than one prompt above another unless it runs out.
    """
    if num_requests is not None and num_requests <= 0:
        raise ConfigError(f"dataset.num_requests={num_requests}: must be >= 1 (or null for all).")
    if num_requests is None or num_requests >= len(prompts):
        return list(prompts)
    rng = random.Random(seed)
    by_category: dict[str, list[Prompt]] = defaultdict(list)
    for p in prompts:
        by_category[p.category].append(p)
    queues = []
    for category in sorted(by_category):
        rows = list(by_category[category])
        rng.shuffle(rows)
        queues.append(rows)
    chosen: list[Prompt] = []
    while len(chosen) < num_requests:
        for q in queues:
            if q and len(chosen) < num_requests:
                chosen.append(q.pop(0))
    return chosen


# Prompt fields added after prompt sets were first fingerprinted: left out while unset, so a set
# that does not use them keeps the fingerprint its runs were stored under.
ADDED_FIELDS = ("messages", "tools", "agent_turn")
# Prompt fields that restate what the fingerprint holds already (the length bucket is in the domain,
# `<tier>@<length>`): left out, so sets measured before they existed keep their fingerprint.
DERIVED_FIELDS = ("input_tokens",)


def fingerprint(prompts: list[Prompt]) -> str:
    """sha256 of exactly what is sent, so two runs can tell whether they saw the same prompts."""
    rows = [
        {k: v for k, v in asdict(p).items() if not (k in ADDED_FIELDS and v is None) and k not in DERIVED_FIELDS}
        for p in prompts
    ]
    blob = json.dumps(rows, sort_keys=True, ensure_ascii=False)
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()
