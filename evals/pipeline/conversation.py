"""Runs prompts turn by turn: every conversation's turn k goes to the engine in one batch,
and turn k+1 carries the model's own earlier answers."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from evals.datasets import Prompt
from runners.engine import Engine, EngineFailed, ProgressFn
from speclens.generation import SamplingSpec, TurnRequest, TurnResult


def _run_turns(engine: Engine, prompts: Sequence[Prompt], answer: Callable[[list[TurnRequest]], list[str]]) -> None:
    """Send every conversation's turn k as one batch; `answer(batch)` generates it and gives
    the answer texts that turn k + 1 carries as the assistant's messages."""
    # A cut point of an agent trajectory starts from its recorded messages and is one generation.
    history: dict[str, list[dict[str, Any]]] = {p.request_id: list(p.messages or ()) for p in prompts}
    for turn in range(max(p.n_turns for p in prompts)):
        batch = []
        for p in prompts:
            if turn < p.n_turns:
                if p.messages is None:
                    history[p.request_id].append({"role": "user", "content": p.turns[turn]})
                ids = engine.chat_token_ids(history[p.request_id], p.tools)
                batch.append(TurnRequest(p.request_id, turn, tuple(ids)))
        for req, text in zip(batch, answer(batch)):
            history[req.request_id].append({"role": "assistant", "content": text})


def run_conversations(
    engine: Engine,
    prompts: Sequence[Prompt],
    sampling: SamplingSpec,
    progress: ProgressFn | None = None,
    max_concurrency: int | None = None,
) -> list[TurnResult]:
    """Every turn of every prompt; at most `max_concurrency` requests in flight (None: all)."""
    results: list[TurnResult] = []

    def answer(batch: list[TurnRequest]) -> list[str]:
        generated = engine.generate(batch, sampling, progress, max_concurrency)
        for request, result in zip(batch, generated):
            result.prompt_token_ids = request.prompt_token_ids
        results.extend(generated)
        return [r.output_text for r in generated]

    try:
        _run_turns(engine, prompts, answer)
    except EngineFailed as exc:
        exc.finished = results + exc.finished  # earlier turns finished too
        raise
    return results


def conversation_token_ids(encoder: Engine, prompt: Prompt, answer_tokens: int) -> list[list[int]]:
    """Turn-by-turn prompt ids with placeholder answers of `answer_tokens` words, for length
    checks before a run; `encoder` is anything with `chat_token_ids` (engine or tokenizer)."""
    if prompt.messages is not None:
        return [encoder.chat_token_ids(list(prompt.messages), prompt.tools)]
    placeholder = " ".join(["x"] * answer_tokens)
    messages: list[dict[str, str]] = []
    per_turn = []
    for text in prompt.turns:
        messages.append({"role": "user", "content": text})
        per_turn.append(encoder.chat_token_ids(messages))
        messages.append({"role": "assistant", "content": placeholder})
    return per_turn


@dataclass(frozen=True)
class ReferenceTurn:
    """One turn of a plain greedy generation, continued past where the real run stops."""

    request_id: str
    turn: int
    prompt_token_ids: tuple[int, ...]
    # The target's greedy tokens, `extra` more than max_tokens and past end-of-sequence.
    continuation: tuple[int, ...]
    # How many of them a normal run outputs (up to the first stop token, at most max_tokens).
    output_tokens: int


def run_reference(engine: Engine, prompts: Sequence[Prompt], sampling: SamplingSpec, extra: int) -> list[ReferenceTurn]:
    """Turn by turn like `run_conversations`, but each answer runs `extra` tokens further and
    ignores end-of-sequence; later turns still carry the answers as a normal run would end them."""
    stop_ids = engine.stop_token_ids()
    longer = replace(sampling, max_tokens=sampling.max_tokens + extra, ignore_eos=True)
    turns: list[ReferenceTurn] = []

    def answer(batch: list[TurnRequest]) -> list[str]:
        texts = []
        for req, result in zip(batch, engine.generate(batch, longer)):
            tokens = result.output_token_ids
            stop = next((i + 1 for i, t in enumerate(tokens[: sampling.max_tokens]) if t in stop_ids), None)
            n_out = min(stop or sampling.max_tokens, len(tokens))
            turns.append(ReferenceTurn(req.request_id, req.turn, req.prompt_token_ids, tuple(tokens), n_out))
            texts.append(engine.decode(tokens[:n_out]))
        return texts

    _run_turns(engine, prompts, answer)
    return turns
