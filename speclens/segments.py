"""Thinking vs answer: the one rule that puts each output token and each verification step of a
reasoning target's output in its segment.

An output is split once, at its boundary: output tokens [0, thinking_tokens) are thinking (the
delimiter that ends thinking included), the rest are the answer. A verification step belongs to
the segment of the first token it verifies, the token at its start position: a step that crosses
the boundary counts, with all its accepted tokens, as thinking. Segment figures built on steps
(AL, per-position acceptance, target passes) follow that rule; token counts (`thinking_tokens`,
`answer_tokens`, `output_tokens`, `share_of_output_tokens`) follow the boundary, so a crossing
step's answer tokens are answer tokens. The segments' step counts add up to the total.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

THINKING = "thinking"
ANSWER = "answer"
SEGMENTS = (THINKING, ANSWER)


@dataclass(frozen=True)
class Boundary:
    """Where one output's thinking ends."""

    # Output tokens [0, thinking_tokens) are thinking.
    thinking_tokens: int
    # Whether thinking ended inside the output; an output that thinks to its end (cut by
    # sampling.max_tokens) is all thinking and not closed.
    closed: bool

    @property
    def unclosed(self) -> bool:
        return not self.closed and self.thinking_tokens > 0


def step_segment(position: int, prompt_tokens: int, thinking_tokens: int) -> str:
    """The segment of a step starting at context length `position` (speclens/generation.py DraftedStep)."""
    return THINKING if position - prompt_tokens < thinking_tokens else ANSWER


def passes_by_segment(starts: Sequence[tuple[int, int]], output_tokens: int, thinking_tokens: int) -> tuple[int, int]:
    """(thinking, answer) target passes of one output, from its drafted steps as (output offset at
    the step's start, accepted): a drafted step by its first token; every output token no drafted
    step verified came from a pass of its own (the prefill's first token, undrafted steps)."""
    covered = [False] * output_tokens
    thinking = answer = 0
    for offset, accepted in starts:
        if offset < thinking_tokens:
            thinking += 1
        else:
            answer += 1
        for i in range(max(offset, 0), min(offset + accepted + 1, output_tokens)):
            covered[i] = True
    thinking += sum(not c for c in covered[:thinking_tokens])
    answer += sum(not c for c in covered[thinking_tokens:])
    return thinking, answer


def first_prefix_holding(
    token_ids: Sequence[int], decode: Callable[[Sequence[int]], str], text: str, after: int
) -> int | None:
    """The fewest leading tokens whose decoded text holds `text` at or after character `after`;
    None when the whole output does not.

    Found on decoded prefixes, not on token ids, because BPE may merge a delimiter with its
    neighbours into tokens of their own: the token that completes the delimiter is the last one
    counted, with whatever text it merges in after the delimiter."""
    if decode(token_ids).find(text, after) < 0:
        return None
    low, high = 0, len(token_ids)  # decode(token_ids[:high]) holds it; [:low] does not
    while high - low > 1:
        middle = (low + high) // 2
        if decode(token_ids[:middle]).find(text, after) >= 0:
            high = middle
        else:
            low = middle
    return high


def text_boundary(
    prompt_text: str,
    output_ids: Sequence[int],
    decode: Callable[[Sequence[int]], str],
    end: str,
    start: str | None = None,
) -> Boundary:
    """Where thinking ends, by delimiters matched on decoded text (reasoning.end, reasoning.start).

    Without `start`, every output begins in thinking. With it, an output begins in thinking when
    the rendered prompt's last delimiter is `start` (templates that open thinking in the prompt,
    as DeepSeek-R1's and Nemotron's do) or the output holds `start` itself (the tokens before it
    count as thinking too: one split per output); otherwise the output is all answer."""
    n = len(output_ids)
    after = 0
    if start is not None:
        text = decode(output_ids)
        opened_in_prompt = prompt_text.rfind(start) > prompt_text.rfind(end)
        at = text.find(start)
        if at < 0 and not opened_in_prompt:
            return Boundary(0, closed=False)
        after = 0 if opened_in_prompt else at + len(start)
    ends = first_prefix_holding(output_ids, decode, end, after)
    return Boundary(n, closed=False) if ends is None else Boundary(ends, closed=True)
