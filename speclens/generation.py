"""What goes into an engine and what comes out: prompts, turn requests, per-step records,
engine steps, vLLM's speculative counters. Every runner produces these; everything above reads them."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol, Sequence

from speclens.schema import Count, record
from speclens.segments import Boundary


@dataclass(frozen=True)
class Prompt:
    """One conversation: user turns sent in order, later turns carrying the model's answers; or
    one cut point of an agent trajectory: its recorded messages, sent as they are."""

    request_id: str
    # What reports group by (evals/datasets/domains.py normalizes source categories).
    domain: str
    # The source's own category, kept next to the domain.
    category: str
    turns: tuple[str, ...]
    # A cut point: every message of the trajectory before one assistant turn (OpenAI layout:
    # role, content, tool_calls, tool_call_id), one request; `turns` is then empty ...
    messages: tuple[dict[str, Any], ...] | None = None
    # ... the tool schemas its chat template renders ...
    tools: tuple[dict[str, Any], ...] | None = None
    # ... and which assistant turn of the trajectory it is (0: the first).
    agent_turn: int | None = None
    # The prompt set's stated input length, where it states one (dataset=long_context's
    # input_tokens, SPEED-Bench's throughput_<N>k): the request's length bucket (docs/definitions.md).
    input_tokens: int | None = None

    @property
    def n_turns(self) -> int:
        """Generations this prompt takes: one per user turn, or one for a cut point."""
        return 1 if self.messages is not None else len(self.turns)


@dataclass(frozen=True)
class TurnRequest:
    """One generation: a conversation's turn, already chat-templated into token ids."""

    request_id: str
    turn: int
    prompt_token_ids: tuple[int, ...]

    @property
    def key(self) -> str:
        return f"{self.request_id}#{self.turn}"


@dataclass(frozen=True)
class DraftedStep:
    """A verification step in which the drafter proposed at least one token."""

    # Context length at the step's start: prompt tokens + tokens generated so far.
    position: int
    num_drafted: int
    num_accepted: int


class RecordGranularity(str, Enum):
    """How finely an engine reports acceptance: every drafted step (position and count), each
    request's totals, or only counters, which speclens attributes to one domain at a time."""

    step = "step"
    request = "request"
    domain = "domain"


@dataclass(frozen=True)
class RequestTotals:
    """One request's speculative totals, where the engine reports no per-step records."""

    num_drafts: int
    num_accepted: int
    # [k]: its verification steps that accepted exactly k draft tokens, where the engine counts them
    # (SGLang's spec_correct_drafts_histogram); per-position acceptance follows from it.
    accepted_histogram: tuple[int, ...] | None = None


@dataclass
class TurnResult:
    request_id: str
    turn: int
    prompt_tokens: int
    output_token_ids: list[int]
    output_text: str
    steps: list[DraftedStep]
    # Target forward passes that produced tokens for this request: the prefill
    # step, undrafted decode steps and drafted steps.
    target_steps: int
    # End to end: from sending the request to its last token.
    latency_s: float
    # From sending the request to its first output token.
    ttft_s: float | None = None
    # Times between successive output chunks (with speculation a chunk may carry several tokens).
    chunk_gaps_s: list[float] = field(default_factory=list)
    # Request granularity: the engine's totals for this request (`steps` is then empty).
    totals: RequestTotals | None = None
    # With SamplingSpec.top2: per output token, its log-probability minus the runner-up's.
    top2_margins: list[float] | None = None
    # The prompt it answered (set by the conversation runner; explaining a mismatch re-sends it).
    prompt_token_ids: tuple[int, ...] = ()
    # Where its thinking ends (set after the pass where reasoning.* is configured; evals/pipeline/reasoning.py).
    boundary: Boundary | None = None
    # Why it ended: "stop" (EOS or a stop string), "length" (max_tokens); None where the engine did not say.
    finish_reason: str | None = None
    # The prompt tokens a server says it received (its usage), where it says; None in-process.
    server_prompt_tokens: int | None = None


@dataclass(frozen=True)
class EngineStep:
    """One engine step (one target forward pass over the batch): its wall time and load."""

    wall_s: float
    num_requests: int
    # Tokens the target processed: prefill (chunks), decode tokens and draft tokens to verify.
    num_tokens: int
    num_draft_tokens: int
    # The length bucket of the requests the step ran (evals/pipeline/passes.py runs one length at a time
    # where the prompts state several); None where the prompts state none.
    input_tokens: int | None = None


# SpecCounters' fields, each a counter an engine may keep.
COUNTER_NAMES = ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos")


@record(frozen=False)
class SpecCounters:
    """vLLM's own speculative-decoding counters for the whole run."""

    num_drafts: Count = 0
    num_draft_tokens: Count = 0
    num_accepted_tokens: Count = 0
    num_accepted_tokens_per_pos: list[Count] = field(default_factory=list)

    def since(self, earlier: "SpecCounters") -> "SpecCounters":
        """What was counted after `earlier` was read (the counters are cumulative)."""
        return self._combine(earlier, -1)

    def __add__(self, other: "SpecCounters") -> "SpecCounters":
        return self._combine(other, 1)

    def _combine(self, other: "SpecCounters", sign: int) -> "SpecCounters":
        n = max(len(self.num_accepted_tokens_per_pos), len(other.num_accepted_tokens_per_pos))
        mine = self.num_accepted_tokens_per_pos + [0] * (n - len(self.num_accepted_tokens_per_pos))
        theirs = other.num_accepted_tokens_per_pos + [0] * (n - len(other.num_accepted_tokens_per_pos))
        return SpecCounters(
            self.num_drafts + sign * other.num_drafts,
            self.num_draft_tokens + sign * other.num_draft_tokens,
            self.num_accepted_tokens + sign * other.num_accepted_tokens,
            [a + sign * b for a, b in zip(mine, theirs)],
        )


@dataclass(frozen=True)
class SamplingSpec:
    temperature: float
    top_p: float
    max_tokens: int
    seed: int
    # Generate past end-of-sequence (replay needs the target's tokens after a stop).
    ignore_eos: bool = False
    # Also report each output token's top-2 log-probability margin (explaining lossless mismatches).
    top2: bool = False


class ChatEncoder(Protocol):
    """Anything that turns chat messages into the target's prompt token ids (an engine, a tokenizer)."""

    def chat_token_ids(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> list[int]:
        """Token ids of `messages` (and the tool schemas `tools`) with the target's chat template."""
