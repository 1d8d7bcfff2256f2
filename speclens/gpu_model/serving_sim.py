"""A serving engine's continuous batching, simulated (simpy) to predict a load ladder's stage
(`evals.whatif request_rates=`, issue 67): requests arrive at their times, wait for a slot (at most
`max_num_seqs` in flight, and no more than the KV cache holds at their full length), are prefilled in
chunks that share steps with the decoding requests (at most `max_batched_tokens` a step), then
decode `tokens_per_step` tokens a step (AL's expectation under speculation, 1 without). Each step's
time comes from the step-cost model: `step_ms(decoding requests, prefill tokens)`.

What it leaves out: preemption (a request holds its whole length's KV from admission, so the queue
builds where vLLM would preempt and recompute), the spread of acceptance between steps (every
request gains the mean), and scheduling overheads beyond those the step costs carry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import simpy

from speclens.figures.load_ladder import ServedRequest


@dataclass(frozen=True)
class SimulatedEngine:
    """What the simulated engine can hold and how fast it steps."""

    # (requests decoding in the step, prompt tokens prefilled in it) -> the step's milliseconds
    step_ms: Callable[[int, int], float]
    tokens_per_step: float
    max_num_seqs: int
    max_batched_tokens: int
    # Requests the KV cache holds at once at their full length (input + output tokens).
    kv_capacity: int
    # Tokens a decoding request puts through a step (1 + D under speculation).
    tokens_per_decode: int = 1


@dataclass
class _Request:
    arrived_s: float
    input_tokens: int
    output_tokens: int
    prefilled: int = 0
    generated: float = 0.0
    first_token_s: float | None = None
    finished_s: float | None = None
    token_times: list[float] = field(default_factory=list)


def simulate(
    arrivals_s: Sequence[float], input_tokens: int, output_tokens: int, engine: SimulatedEngine
) -> list[ServedRequest]:
    """Each request of the stage as a load generator would see it (seconds from the stage's start)."""
    env = simpy.Environment()
    requests = [_Request(t, input_tokens, output_tokens) for t in arrivals_s]
    waiting: list[_Request] = []
    running: list[_Request] = []
    wake = [env.event()]

    def arrive(request: _Request):
        yield env.timeout(request.arrived_s)
        waiting.append(request)
        if not wake[0].triggered:
            wake[0].succeed()

    def serve():
        done = 0
        slots = min(engine.max_num_seqs, max(1, engine.kv_capacity))
        while done < len(requests):
            if not running and not waiting:
                wake[0] = env.event()
                yield wake[0]
            while waiting and len(running) < slots:
                running.append(waiting.pop(0))
            decoding = [r for r in running if r.prefilled >= r.input_tokens]
            budget = max(0, engine.max_batched_tokens - len(decoding) * engine.tokens_per_decode)
            prefill = 0
            for r in running:
                if r.prefilled < r.input_tokens and budget > 0:
                    chunk = min(budget, r.input_tokens - r.prefilled)
                    r.prefilled += chunk
                    budget -= chunk
                    prefill += chunk
            yield env.timeout(engine.step_ms(len(decoding), prefill) / 1000.0)
            now = env.now
            for r in running:
                if r in decoding:
                    r.generated += engine.tokens_per_step
                    r.token_times.append(now)
                elif r.prefilled >= r.input_tokens:  # prefill ends with the first token sampled
                    r.generated, r.first_token_s = 1.0, now
                    r.token_times.append(now)
                if r.generated >= r.output_tokens and r.finished_s is None:
                    r.finished_s = now
            finished = [r for r in running if r.finished_s is not None]
            done += len(finished)
            running[:] = [r for r in running if r.finished_s is None]

    for request in requests:
        env.process(arrive(request))
    env.process(serve())
    env.run()
    return [
        ServedRequest(
            sent_s=r.arrived_s,
            latency_s=r.finished_s - r.arrived_s,
            ttft_s=r.first_token_s - r.arrived_s,
            output_tokens=r.output_tokens,
            chunk_gaps_s=tuple(b - a for a, b in zip(r.token_times, r.token_times[1:])),
        )
        for r in requests
    ]
