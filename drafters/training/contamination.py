"""Training answers that recite an evaluation set, dropped before a drafter learns from them.

The target answers speclens's own prompts, but a small target recites what it saw in pretraining:
SmolLM2 writes HumanEval docstrings back word for word. A drafter trained on such an answer has
seen evaluation text, so every answer that shares a run of N_WORDS words (lower-cased letters and
digits, as `corpus.shared_passages` counts them) with any evaluation text is dropped, whatever its
prompt; an evaluation text shorter than that (at least MIN_SHORT_WORDS words) counts when it
appears whole.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Mapping, Sequence

from drafters.training.corpus import words

__all__ = ["N_WORDS", "EvaluationIndex", "Recitations", "drop_recitations"]

N_WORDS = 8
MIN_SHORT_WORDS = 4


class EvaluationIndex:
    """Every N_WORDS-word run of the evaluation sets, each named by the first set (in the order
    given) that holds it."""

    def __init__(self, sets: Mapping[str, Sequence[str]], n: int = N_WORDS) -> None:
        self.n = n
        self.sizes = {name: len(texts) for name, texts in sets.items()}
        self._runs: dict[tuple[str, ...], str] = {}
        self._short: list[tuple[str, str]] = []
        for name, texts in sets.items():
            for text in texts:
                found = words(text)
                if len(found) >= n:
                    for i in range(len(found) - n + 1):
                        self._runs.setdefault(tuple(found[i : i + n]), name)
                elif len(found) >= MIN_SHORT_WORDS:
                    self._short.append((f" {' '.join(found)} ", name))

    def recited(self, text: str) -> str | None:
        """The evaluation set `text` shares a run with (None: it shares none)."""
        found = words(text)
        for i in range(len(found) - self.n + 1):
            name = self._runs.get(tuple(found[i : i + self.n]))
            if name is not None:
                return name
        joined = f" {' '.join(found)} "
        return next((name for short, name in self._short if short in joined), None)


@dataclass(frozen=True)
class Recitations:
    """Which answers were kept (their indexes, in order) and how many were dropped per evaluation set."""

    kept: list[int]
    dropped: dict[str, int]


def drop_recitations(answers: Sequence[str], index: EvaluationIndex) -> Recitations:
    kept, dropped = [], Counter()
    for i, text in enumerate(answers):
        name = index.recited(text)
        if name is None:
            kept.append(i)
        else:
            dropped[name] += 1
    return Recitations(kept, {name: dropped.get(name, 0) for name in index.sizes})
