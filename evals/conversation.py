"""Runs prompts turn by turn: every conversation's turn k goes to the engine in one batch,
and turn k+1 carries the model's own earlier answers."""

from __future__ import annotations

from typing import Sequence

from evals.datasets import Prompt
from runners.engine import Engine, ProgressFn, SamplingSpec, TurnRequest, TurnResult


def run_conversations(
    engine: Engine, prompts: Sequence[Prompt], sampling: SamplingSpec, progress: ProgressFn | None = None
) -> list[TurnResult]:
    history: dict[str, list[dict[str, str]]] = {p.request_id: [] for p in prompts}
    results: list[TurnResult] = []
    for turn in range(max(len(p.turns) for p in prompts)):
        batch = []
        for p in prompts:
            if turn < len(p.turns):
                history[p.request_id].append({"role": "user", "content": p.turns[turn]})
                ids = engine.chat_token_ids(history[p.request_id])
                batch.append(TurnRequest(p.request_id, turn, tuple(ids)))
        for result in engine.generate(batch, sampling, progress):
            history[result.request_id].append({"role": "assistant", "content": result.output_text})
            results.append(result)
    return results


def conversation_token_ids(encoder: Engine, prompt: Prompt, answer_tokens: int) -> list[list[int]]:
    """Turn-by-turn prompt ids with placeholder answers of `answer_tokens` words, for length
    checks before a run; `encoder` is anything with `chat_token_ids` (engine or tokenizer)."""
    placeholder = " ".join(["x"] * answer_tokens)
    messages: list[dict[str, str]] = []
    per_turn = []
    for text in prompt.turns:
        messages.append({"role": "user", "content": text})
        per_turn.append(encoder.chat_token_ids(messages))
        messages.append({"role": "assistant", "content": placeholder})
    return per_turn
