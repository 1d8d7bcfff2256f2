"""vLLM's reasoning parsers as a thinking boundary (reasoning.parser=<name>): looked up by name in
vllm.reasoning.ReasoningParserManager and built on the target's tokenizer (vllm imported on use)."""

from __future__ import annotations

import re
from typing import Any, Sequence

from speclens.errors import ConfigError
from speclens.segments import Boundary

# A marker's special tokens (`<think>`, `<|START_THINKING|>`, `<|open|>`): each must be one token of
# the target's vocabulary, or the parser looks for something the target cannot emit.
_SPECIAL = re.compile(r"<[^<>\s]+>")


def check_parser(name: str, parser: Any, tokenizer: Any) -> None:
    """Refuse, before any engine starts, a parser that cannot split this target's outputs: its
    thinking markers' special tokens not in the vocabulary (or resolved to another token), or its
    token-id methods not provided (some parsers only detect the boundary)."""
    vocab = tokenizer.get_vocab()
    markers = [getattr(parser, attr, None) for attr in ("reasoning_start_str", "reasoning_end_str")]
    for marker in filter(lambda m: isinstance(m, str) and m, markers):
        missing = [piece for piece in _SPECIAL.findall(marker) if piece not in vocab]
        if missing:
            raise ConfigError(
                f"reasoning.parser={name} marks thinking with {markers[0]!r} ... {markers[1]!r}, and the target's "
                f"vocabulary has no token {missing[0]!r}: it would never see thinking start or end. Use a target "
                "whose tokenizer has them, or reasoning.end=<text>."
            )
    for attr, marker in (("start_token_id", markers[0]), ("end_token_id", markers[1])):
        token_id = getattr(parser, attr, None)
        if isinstance(token_id, int) and isinstance(marker, str) and marker in vocab and vocab[marker] != token_id:
            raise ConfigError(
                f"reasoning.parser={name} resolves {marker!r} to token {token_id}, which is "
                f"{tokenizer.convert_ids_to_tokens(token_id)!r} in the target's vocabulary; use reasoning.end=<text>."
            )
    probe = list(range(1, 4))
    for method in ("is_reasoning_end", "extract_content_ids"):
        try:
            getattr(parser, method)(probe)
        except NotImplementedError:
            raise ConfigError(
                f"reasoning.parser={name} does not provide {method} on token ids (it only detects the boundary "
                "while streaming text), so it cannot split outputs token by token; use reasoning.end=<text>."
            ) from None
        except (TypeError, ValueError, AttributeError, IndexError, KeyError) as exc:
            raise ConfigError(
                f"reasoning.parser={name}: its {method} fails on token ids ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else 'no message'}); use reasoning.end=<text>."
            ) from None


def parser_names() -> list[str]:
    from vllm.reasoning import ReasoningParserManager

    return ReasoningParserManager.list_registered()


class ParserBoundary:
    """Thinking ends where the parser says: `is_reasoning_end` on the output, and the answer is
    what `extract_content_ids` gives back.

    An output the parser does not see end: all thinking when it opens thinking itself (holds the
    parser's start token) or when the prompt did not close it; all answer when the prompt's last
    reasoning marker closed thinking (a template that switches thinking off renders an empty
    block, as Qwen3's does with enable_thinking=false). vLLM's parsers look at the output only,
    so a template that opens thinking in the prompt (DeepSeek-R1's, Nemotron's) would count no
    reasoning there (vLLM PR #44398); here the output then starts in thinking."""

    def __init__(self, name: str, tokenizer: Any) -> None:
        from vllm.reasoning import ReasoningParserManager

        names = ReasoningParserManager.list_registered()
        if name not in names:
            raise ConfigError(
                f"reasoning.parser={name!r} is not one of vLLM's reasoning parsers; choose one of {', '.join(names)}."
            )
        try:
            self.parser = ReasoningParserManager.get_reasoning_parser(name)(tokenizer)
        except (ValueError, RuntimeError, KeyError, AttributeError, TypeError) as exc:
            raise ConfigError(
                f"reasoning.parser={name} does not fit the target's tokenizer ({str(exc).splitlines()[0]}); "
                "its reasoning tokens must be in the target's vocabulary, or set reasoning.end=<text> "
                "instead."
            ) from None
        check_parser(name, self.parser, tokenizer)
        self.description = f"parser {name}"
        start = getattr(self.parser, "reasoning_start_str", None)
        self.start_id = self.parser.vocab.get(start) if start else getattr(self.parser, "start_token_id", None)

    def boundary(self, prompt_ids: Sequence[int], output_ids: Sequence[int]) -> Boundary:
        output = list(output_ids)
        if output and self.parser.is_reasoning_end(output):
            return Boundary(len(output) - len(self.parser.extract_content_ids(output)), closed=True)
        opens_itself = self.start_id is not None and self.start_id in output
        if not opens_itself and prompt_ids and self.parser.is_reasoning_end(list(prompt_ids)):
            return Boundary(0, closed=False)
        return Boundary(len(output), closed=False)
