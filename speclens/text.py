"""Text from prompt files and checkpoints made safe to show: on a terminal (no control character
runs: colours, window titles, cursor moves, right-to-left overrides) and in markdown (no markup or
HTML runs). The one place for each; every table, error line and markdown file goes through them."""

from __future__ import annotations

import re

# What lets text in a markdown file turn into markup: HTML's brackets and entities (markdown passes
# HTML through), a code span's backtick, a table cell's pipe, the escape character itself.
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_MARKDOWN_ACTIVE = re.compile(r"([\\`|])")


def _escaped(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def terminal_safe(text: object) -> str:
    """`text` with every control and format character (C0, C1, DEL, bidi overrides, zero-width
    marks; newlines and tabs too: one value, one line) written as a visible escape."""
    value = str(text)
    if value.isprintable():
        return value
    return "".join(c if c.isprintable() else _escaped(c) for c in value)


def markdown_safe(text: object) -> str:
    """`text` shown as itself in markdown: no HTML (`<`, `>`, `&` as entities), backticks, pipes and
    backslashes escaped, control characters as in terminal_safe."""
    value = "".join(_HTML.get(c, c) for c in terminal_safe(text))
    return _MARKDOWN_ACTIVE.sub(r"\\\1", value)


class Shown(str):
    """A line of a report made of names from the user's files (domains, categories): the markdown
    renderer escapes it with markdown_safe, where speclens's own lines keep their markup."""
