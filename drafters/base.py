"""What every drafter declares: its typed config, its vLLM translation, its limits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from drafters.replay import replay_turn
from speclens.config import VLLM_MAX_SPEC_LEN, Choice
from speclens.errors import ConfigError
from speclens.model_facts import ModelFacts

# vLLM 0.32 re-labels a draft as one of these methods when its path contains the substring,
# whatever method was asked for (config/speculative.py), except for these methods themselves.
VLLM_PATH_HINTS = {"eagle-": "eagle", "eagle3": "eagle3", "dflash": "dflash", "dspark": "dspark"}


def check_path_hints(method: str, path: str, key: str) -> None:
    if method in VLLM_PATH_HINTS.values():
        return
    for hint, relabel in VLLM_PATH_HINTS.items():
        if hint in path.lower():
            raise ConfigError(
                f"{key}={path}: the path contains {hint!r}, which makes vLLM run it as method {relabel!r} "
                f"instead of {method!r}; rename or link the folder to a path without {hint!r}."
            )


@dataclass(frozen=True)
class MechanismFacts:
    """What is known about a mechanism before measuring it: the seed comparison table as data."""

    architecture: str
    # token ids | target hidden states | fused target hidden states | token stream
    inputs: str
    # D serial passes | one parallel pass | one parallel pass + sequential correction | one lookup
    generation: str
    # separate model | post-training head | part of the base checkpoint | none
    release: str
    # none | low | medium | high
    training_cost: str
    # draft weights + full KV cache | weights + small KV cache | none
    serve_memory: str
    # what drafting D tokens costs: full draft forward x D | 1 layer serial | ~5 layers once | lookup
    speculation_cost: str
    best_fit: str


@dataclass
class DrafterConfig:
    """Keys every drafter has; each drafter's own config class subclasses it and is what
    `drafter=<name>` selects (drafters/__init__.py)."""

    # A serve.json (reports.rank) or a JSON [[start, end, k], ...] file: measure this drafter under
    # vLLM's dynamic speculative decoding with that draft-length schedule (d = its largest k).
    schedule: str | None = None


class ReplayKind(Choice):
    """How `evals.replay` gets AL(D) for D = 1..d_max."""

    # offline, from one greedy generation of the target
    exact = "exact"
    # from one measured run at d_max (accepted at D = min(accepted, D))
    estimated = "estimated"
    none = "none"


class Drafter:
    """Base class; one subclass per mechanism, registered in drafters/__init__.py.

    Subclasses set the class attributes and override `speculative_config`, and
    `max_d` / `validate` where the mechanism has limits of its own.
    """

    config_class: ClassVar[type[DrafterConfig]]
    facts: ClassVar[MechanismFacts]
    needs_checkpoint: ClassVar[bool] = False
    replay: ClassVar[ReplayKind] = ReplayKind.none
    # Exact replay needs the draft model's argmax after every prefix of the target's stream.
    replay_needs_draft_predictions: ClassVar[bool] = False
    # Exact replay needs every start's drafts computed once (runners/replay_chains.py: a head's or
    # MTP layer's chains, "eagle", "eagle3", "mtp", or a parallel draft's mask blocks, "pard"); None: not.
    replay_head: ClassVar[str | None] = None
    # Proposals draw on state shared by all requests, so replay follows the batch step by step.
    replay_in_lockstep: ClassVar[bool] = False
    # The proposers replay draws a curve for (curves' `proposer` column): "" where vLLM's model
    # runners propose alike, else each runner's ("v1", "v2": drafters/ngram.py).
    replay_proposers: ClassVar[tuple[str, ...]] = ("",)

    def __init__(self, name: str, cfg: DrafterConfig) -> None:
        # The registry key (drafters/__init__.py): the drafter's one name.
        self.name = name
        self.cfg = cfg

    @property
    def speculative(self) -> bool:
        return True

    def speculative_config(self, d: int) -> dict[str, Any] | None:
        raise NotImplementedError

    def max_d(self) -> int:
        return VLLM_MAX_SPEC_LEN

    def checkpoint(self) -> str | None:
        """The draft checkpoint reference (path or hub id), for drafters that have one."""
        return None

    def replay_proposal(self, ctx: Any, pos: int, d: int, proposer: str = "") -> Any:
        """The tokens this drafter proposes at a step starting at `pos` (drafters/replay.py), as
        `proposer` (one of replay_proposers) would."""
        raise NotImplementedError(f"drafter={self.name} has no exact replay")

    def replay_batches(self, batches: list[list[Any]], d: int, proposer: str = "") -> list[list[Any]]:
        """Replay turn batches (each in engine order) at draft length `d`; per context
        (drafted steps, target steps). Drafters whose proposals depend only on their own
        request replay each context alone; drafters with state shared across requests override."""

        def propose(ctx: Any, pos: int, d: int) -> Any:
            return self.replay_proposal(ctx, pos, d, proposer)

        return [[replay_turn(propose, ctx, d) for ctx in batch] for batch in batches]

    def validate(self, d: int, target: ModelFacts, draft: ModelFacts | None) -> None:
        """Raise ConfigError for settings vLLM would reject or silently mis-measure: the pair's
        config-level checks, then those that need the checkpoint's files or this machine's vLLM."""
        self.check_pair(d, target, draft)

    def check_pair(self, d: int, target: ModelFacts, draft: ModelFacts | None) -> None:
        """What the configs alone say against this target, draft and D: the one check evals.run,
        evals.whatif and evals.guidelines share (a config-only folder is enough)."""
        limit = self.max_d()
        if d > limit:
            raise ConfigError(
                f"d={d} is above what drafter={self.name} allows (at most {limit}); choose d in 1..{limit}."
            )
