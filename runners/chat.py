"""Chat-templated prompt token ids from the target's own tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from speclens.errors import TemplateFailed

# target.chat_template=plain: no template, the turns as plain text (base models).
PLAIN = "plain"


class ChatTokenizer:
    def __init__(
        self, model_dir: Path, chat_template_kwargs: Mapping[str, Any] | None = None, chat_template: str | None = None
    ) -> None:
        # transformers is loaded only where a tokenizer or model is built.
        from transformers import AutoTokenizer

        # The engine's max_model_len is the real limit; this only silences a length warning.
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir), model_max_length=1 << 30)
        # Where the template comes from, for messages about it.
        self.source = str(model_dir)
        # target.chat_template: a Jinja file used instead of the target's own, or `plain`
        if chat_template == PLAIN:
            self.tokenizer.chat_template = None
        elif chat_template:
            self.tokenizer.chat_template = Path(chat_template).read_text(encoding="utf-8")
            self.source = chat_template
        self.has_template = bool(getattr(self.tokenizer, "chat_template", None))
        self.plain_chosen = chat_template == PLAIN
        # Extra variables for the template (run config chat_template_kwargs).
        self.chat_template_kwargs = dict(chat_template_kwargs or {})

    def chat_text(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None, **template_kwargs: Any
    ) -> str:
        """`messages` (and the tool schemas `tools`) rendered by the target's chat template with the
        generation prompt; keyword arguments go to the template besides chat_template_kwargs."""
        from jinja2 import TemplateError

        extra = {"tools": list(tools)} if tools else {}
        try:
            return self.tokenizer.apply_chat_template(
                list(messages),
                tokenize=False,
                add_generation_prompt=True,
                **extra,
                **(self.chat_template_kwargs | template_kwargs),
            )
        except TemplateError as exc:
            raise TemplateFailed(f"the chat template of {self.source} fails on its messages: {exc}") from None

    def chat_token_ids(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> list[int]:
        if self.has_template:
            return list(self.tokenizer.encode(self.chat_text(messages, tools), add_special_tokens=False))
        # target.chat_template=plain (base models): the turns as plain text, one per paragraph.
        text = "\n\n".join(m.get("content") or "" for m in messages)
        return list(self.tokenizer.encode(text))

    def encode_text(self, text: str) -> list[int]:
        """A generated text's token ids (no special tokens added)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)

    def decode_verbatim(self, token_ids: Sequence[int]) -> str:
        """Text of `token_ids` with special tokens kept (delimiters may be special tokens)."""
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=False)
