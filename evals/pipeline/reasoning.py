"""The thinking boundary a run is configured with (reasoning.*), built before any engine starts,
and the segment of every output found with it once the passes have run (speclens/segments.py)."""

from __future__ import annotations

from typing import Any, Protocol, Sequence

from speclens.config import ReasoningConfig, RunConfig
from speclens.console import console
from speclens.errors import ConfigError
from speclens.figures.summary import ReasoningSplit
from speclens.generation import TurnResult
from speclens.segments import Boundary, text_boundary


class Segmenter(Protocol):
    # How the boundary is found, as summary.json `reasoning.boundary` says it.
    description: str

    def boundary(self, prompt_ids: Sequence[int], output_ids: Sequence[int]) -> Boundary: ...


class TextSegmenter:
    """reasoning.end (and .start) matched on the text the target's tokenizer decodes, special tokens kept."""

    def __init__(self, end: str, start: str | None, decode: Any) -> None:
        self.end, self.start, self.decode = end, start, decode
        self.description = f"text {end!r}" + (f" after {start!r}" if start else "")

    def boundary(self, prompt_ids: Sequence[int], output_ids: Sequence[int]) -> Boundary:
        prompt_text = self.decode(prompt_ids) if self.start else ""
        return text_boundary(prompt_text, output_ids, self.decode, self.end, self.start)


def make_segmenter(cfg: ReasoningConfig, encoder: Any) -> Segmenter | None:
    """The configured boundary (None: no split), or a ConfigError naming the key."""
    if cfg.parser is not None and (cfg.end is not None or cfg.start is not None):
        raise ConfigError(
            "reasoning.parser and reasoning.end/start both set: thinking ends where one of them says; "
            "keep reasoning.parser (a vLLM parser) or the text delimiters."
        )
    for key in ("parser", "end", "start"):
        value = getattr(cfg, key)
        if value is not None and (not isinstance(value, str) or not value):
            raise ConfigError(f"reasoning.{key}={value!r}: give a non-empty text, or null.")
    if cfg.parser is not None and not cfg.parser.strip():
        raise ConfigError(f"reasoning.parser={cfg.parser!r}: give a parser's name, or null.")
    # Whitespace is a delimiter like any other text (a blank line ending thinking): said, not refused.
    for key in ("end", "start"):
        value = getattr(cfg, key)
        if value is not None and not value.strip():
            print(f"speclens: reasoning.{key}={value!r} is whitespace only; it is matched as it is.", file=console())
    if cfg.start is not None and cfg.start == cfg.end:
        raise ConfigError(
            f"reasoning.start and reasoning.end are both {cfg.end!r}: thinking would end where it starts; "
            "give the text that closes thinking as reasoning.end, and drop reasoning.start or give its opener."
        )
    if cfg.start is not None and cfg.end is None:
        raise ConfigError(
            f"reasoning.start={cfg.start!r} needs reasoning.end=<text>: where thinking ends is what splits an output."
        )
    if cfg.end is not None:
        decode = getattr(encoder, "decode_verbatim", None)
        if decode is None:
            raise ConfigError("reasoning.end: this runner cannot decode the target's output text.")
        return TextSegmenter(cfg.end, cfg.start, decode)
    if cfg.parser is not None:
        tokenizer = getattr(encoder, "tokenizer", None)
        if tokenizer is None:
            raise ConfigError(
                f"reasoning.parser={cfg.parser} needs the target's tokenizer, which this runner does not "
                "load (runner=fake); use reasoning.end=<text>."
            )
        from runners.reasoning_parser import ParserBoundary

        return ParserBoundary(cfg.parser, tokenizer)
    return None


def split_outputs(segmenter: Segmenter, results: Sequence[TurnResult]) -> ReasoningSplit:
    """Every result's boundary set (TurnResult.boundary), and what they came to."""
    for r in results:
        r.boundary = segmenter.boundary(r.prompt_token_ids, r.output_token_ids)
    boundaries = [r.boundary for r in results]
    return ReasoningSplit(
        boundary=segmenter.description,
        n_outputs=len(boundaries),
        n_closed=sum(b.closed for b in boundaries),
        n_unclosed=sum(b.unclosed for b in boundaries),
        n_without_thinking=sum(b.thinking_tokens == 0 and not b.closed for b in boundaries),
    )


def warn_about(split: ReasoningSplit, cfg: RunConfig) -> None:
    """Say when thinking never ended, or ended in only some outputs: those are all thinking."""
    if not split.n_unclosed:
        return
    where = f"reasoning.end={cfg.reasoning.end!r}" if cfg.reasoning.end is not None else split.boundary
    if not split.n_closed:
        print(
            f"speclens: warning: thinking never ends in any of the {split.n_outputs} outputs ({where} occurs in "
            "none): every output token is counted as thinking. Check the delimiter, or raise sampling.max_tokens.",
            file=console(),
        )
    else:
        print(
            f"speclens: warning: {split.n_unclosed} of {split.n_outputs} outputs think to their end (cut by "
            f"sampling.max_tokens={cfg.sampling.max_tokens}): they are all thinking.",
            file=console(),
        )


def check_template_kwargs(cfg: RunConfig, encoder: Any, messages: Sequence[dict[str, str]]) -> None:
    """Warn when chat_template_kwargs do not change the rendered prompt: the template does not use them."""
    if not cfg.chat_template_kwargs or not hasattr(encoder, "chat_text") or not getattr(encoder, "has_template", False):
        return
    with_kwargs = encoder.chat_text(messages)
    without = encoder.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    if with_kwargs == without:
        names = ", ".join(sorted(cfg.chat_template_kwargs))
        print(
            f"speclens: warning: chat_template_kwargs ({names}) do not change the target's rendered prompt: its chat "
            "template does not use them, so this run measures the template's default.",
            file=console(),
        )
