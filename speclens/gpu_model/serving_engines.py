"""How each serving engine runs a decode step under speculation, as `evals.whatif engine=…` models
it: whether the host's scheduling of the next step overlaps the GPU's work on this one (overlap or
async scheduling), for plain decoding and under each drafter, and which drafters run their draft
loop inside the target's graph (no launch overhead per draft pass). Each figure's source is in
docs/whatif.md ("Engines").

The step-cost model's fixed overheads (speclens/gpu_model/step_cost.py Efficiency: the per-pass one
from a fit of vLLM's step time, the per-draft-pass one fitted on published speedups) describe steps
measured with plain and speculative steps alike overlapped or alike not. Each term is scored on
its own engine's published cases (speclens/gpu_model/model_error.py ENGINE_TERMS): one that makes
them worse or that no case scores is assumed, and a prediction it moves carries a widened interval
(unscored_because).
What an engine changes is the difference: where it overlaps plain decoding but not a drafter's
steps (SGLang's EAGLE before its spec v2 worker, vLLM's n-gram today), the plain step it is
compared against hides `hidden_overhead_ms` that the drafter's steps pay, and the speedup shrinks;
where a drafter's loop runs in the target's graph (TensorRT-LLM's one-model EAGLE-3 and MTP), its
draft passes pay no launch overhead of their own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TypeVar

from speclens.errors import ConfigError

ALL_DRAFTERS = frozenset({"ngram", "suffix", "eagle", "eagle3", "draft_model", "mtp", "dflash", "dspark"})
EAGLE_FAMILY = frozenset({"eagle", "eagle3", "mtp", "dflash"})

Eff = TypeVar("Eff")  # step_cost.Efficiency, which imports this module's ServingEngine


@dataclass(frozen=True)
class ServingEngine:
    name: str
    version: str  # the release whose behaviour this is
    hidden_overhead_ms: float  # of a pass's fixed overhead, what overlap scheduling hides
    overlap_plain: bool
    overlap_drafters: frozenset[str]  # drafters whose steps keep overlap scheduling on
    in_graph_drafters: frozenset[str]  # drafters whose draft loop runs in the target's graph

    def plain_advantage_ms(self, drafter: str) -> float:
        """The overhead a plain step hides that this drafter's steps pay: overlap scheduling's
        where plain decoding overlaps and the drafter's steps do not, else none."""
        return self.hidden_overhead_ms if self.overlap_plain and drafter not in self.overlap_drafters else 0.0

    def moves(self, drafter: str) -> bool:
        """Whether this engine's term changes a prediction for `drafter` (the published cases are
        scored without it)."""
        return bool(self.plain_advantage_ms(drafter)) or drafter in self.in_graph_drafters

    def plain_efficiency(self, eff: Eff, drafter: str) -> Eff:
        """The efficiencies of the plain step a drafter's steps are compared against."""
        hidden = self.plain_advantage_ms(drafter)
        return replace(eff, overhead_ms=max(0.0, eff.overhead_ms - hidden)) if hidden else eff

    def drafting_efficiency(self, eff: Eff, drafter: str) -> Eff:
        """The efficiencies of a drafter's passes: no launch overhead of their own in the target's graph."""
        return replace(eff, draft_pass_overhead_ms=0.0) if drafter in self.in_graph_drafters else eff

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "version": self.version,
            "hidden_overhead_ms": self.hidden_overhead_ms,
            "overlap_plain": self.overlap_plain,
            "overlap_drafters": sorted(self.overlap_drafters),
            "in_graph_drafters": sorted(self.in_graph_drafters),
            "label": self.label(),
        }

    def label(self) -> str:
        def names(drafters: frozenset[str]) -> str:
            return ", ".join(sorted(drafters)) or "none"

        overlap = "plain decoding" if self.overlap_plain else "nothing"
        if self.overlap_drafters:
            overlap += f" and {names(self.overlap_drafters)}"
        graph = f"; drafting in the target's graph: {names(self.in_graph_drafters)}" if self.in_graph_drafters else ""
        return f"{self.name} {self.version} (overlap scheduling: {overlap}{graph})"


ENGINES: dict[str, ServingEngine] = {
    e.name: e
    for e in (
        # async scheduling on by default, with EAGLE-family, draft-model and DSpark drafters; off
        # for the host's n-gram and suffix lookups (vllm/config/vllm.py, VllmConfig)
        ServingEngine("vllm", "0.32", 0.43, True, ALL_DRAFTERS - {"ngram", "suffix"}, frozenset()),
        # spec v2 (the default since 0.5.13) keeps the overlap scheduler on for EAGLE-family drafters
        # at topk 1; other drafters run the synchronous path
        ServingEngine("sglang", "0.5.13", 0.43, True, EAGLE_FAMILY, frozenset()),
        # the PyTorch backend: overlap for MTP, one-model EAGLE-3 (the default) and draft models;
        # one-model EAGLE-3 and MTP draft inside the target's forward. Hidden: the 1.2 ms default
        # overhead less the 0.58 ms that stays exposed with overlap on (TensorRT-LLM issue #13957).
        ServingEngine(
            "trtllm",
            "1.x (PyTorch backend)",
            0.62,
            True,
            frozenset({"eagle3", "mtp", "draft_model"}),
            frozenset({"eagle3", "mtp"}),
        ),
    )
}
DEFAULT_ENGINE = "vllm"


def engine_named(name: str) -> ServingEngine:
    if name not in ENGINES:
        raise ConfigError(f"engine={name}: choose one of {', '.join(ENGINES)}.")
    return ENGINES[name]
