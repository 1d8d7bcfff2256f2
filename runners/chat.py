"""Chat-templated prompt token ids from the target's own tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence


class ChatTokenizer:
    def __init__(self, model_dir: Path) -> None:
        # transformers is loaded only where a tokenizer or model is built.
        from transformers import AutoTokenizer

        # The engine's max_model_len is the real limit; this only silences a length warning.
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir), model_max_length=1 << 30)
        self.has_template = bool(getattr(self.tokenizer, "chat_template", None))

    def chat_token_ids(self, messages: Sequence[dict[str, str]]) -> list[int]:
        if self.has_template:
            text = self.tokenizer.apply_chat_template(
                list(messages), tokenize=False, add_generation_prompt=True
            )
            return list(self.tokenizer.encode(text, add_special_tokens=False))
        # Base models without a template: the turns as plain text, one per paragraph.
        text = "\n\n".join(m["content"] for m in messages)
        return list(self.tokenizer.encode(text))

    def encode_text(self, text: str) -> list[int]:
        """A generated text's token ids (no special tokens added)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)
