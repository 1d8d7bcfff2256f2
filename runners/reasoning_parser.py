"""vLLM's reasoning parsers as a thinking boundary (reasoning.parser=<name>): looked up by name in
vllm.reasoning.ReasoningParserManager and built on the target's tokenizer (vllm imported on use)."""

from __future__ import annotations

from typing import Any, Sequence

from speclens.errors import ConfigError
from speclens.segments import Boundary


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
