"""A scripted engine for unit tests: replays given per-step acceptance, no model involved.

It batches like vLLM does: the requests in flight (at most `max_concurrency`) advance one
step together; a request's first step is its prefill, and a finished request's slot goes to
the next one. Each step's wall time comes from a cost function of what it carried, so the
cost decomposition can be checked against hand-computed values.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from runners.engine import (
    DraftedStep,
    EngineStep,
    ProgressFn,
    SamplingSpec,
    SpecCounters,
    TurnRequest,
    TurnResult,
)

# One script entry per decode step: None = the drafter proposed nothing (an
# undrafted step), an int = accepted count with D drafted, a pair = (drafted, accepted).
StepScript = list["int | tuple[int, int] | None"]
# The modes a run uses: the drafter's speculative pass, plain decoding, and verification of
# D free proposals per request (the zero-cost proposer).
MODES = ("speculative", "plain", "verify")
# Step wall time in seconds from (mode, num_requests, num_tokens, num_draft_tokens).
StepCost = Callable[[str, int, int, int], float]


def linear_cost(mode: str, num_requests: int, num_tokens: int, num_draft_tokens: int) -> float:
    """10 ms per step + 1 ms per token processed + 2 ms per drafted token when a drafter ran."""
    drafting = 0.002 * num_draft_tokens if mode == "speculative" else 0.0
    return 0.010 + 0.001 * num_tokens + drafting


class FakeEngine:
    def __init__(
        self,
        d: int | None,
        script: dict[str, StepScript],
        counter_error: int = 0,
        mode: str | None = None,
        cost: StepCost = linear_cost,
    ) -> None:
        """`script` maps `request_id#turn` to its speculative decode steps; missing keys decode
        one plain step. In mode `plain` each script entry becomes accepted + 1 plain steps (the
        same output); in mode `verify` every decode step drafts D tokens and accepts none.

        `counter_error` is added to the reported accepted-token counter, to test
        that a disagreement between records and counters is caught.
        """
        self.mode = mode or ("speculative" if d else "plain")
        assert self.mode in MODES, self.mode
        self.d = d
        self.script = script
        self.counter_error = counter_error
        self.cost = cost
        self._counters = SpecCounters(num_accepted_tokens_per_pos=[0] * (d or 0))
        self._steps: list[EngineStep] = []

    def chat_token_ids(self, messages: Sequence[dict[str, str]]) -> list[int]:
        ids = []
        for m in messages:
            ids.append(1 if m["role"] == "user" else 2)
            ids.extend(len(word) + 10 for word in m["content"].split())
        return ids + [3]

    def _decode_steps(self, key: str) -> list[tuple[int, int] | None]:
        """This request's decode steps in this mode: (drafted, accepted), or None when undrafted."""
        entries = [None if e is None else e if isinstance(e, tuple) else (self.d, e) for e in self.script.get(key, [None])]
        if self.mode == "speculative":
            return entries
        decoded = sum(1 if e is None else e[1] + 1 for e in entries)
        return [None] * decoded if self.mode == "plain" else [(self.d, 0)] * decoded

    def generate(
        self,
        requests: Sequence[TurnRequest],
        sampling: SamplingSpec,
        progress: ProgressFn | None = None,
        max_concurrency: int | None = None,
    ) -> list[TurnResult]:
        queue = [_Flight(req, self._decode_steps(req.key)) for req in reversed(requests)]
        limit = max_concurrency or len(queue)
        in_flight: list[_Flight] = []
        done: dict[str, _Flight] = {}
        while queue or in_flight:
            while queue and len(in_flight) < limit:
                in_flight.append(queue.pop())
            tokens = drafts = new_tokens = 0
            for f in in_flight:
                t, dr, n = f.advance(self)
                tokens, drafts, new_tokens = tokens + t, drafts + dr, new_tokens + n
            wall = self.cost(self.mode, len(in_flight), tokens, drafts)
            self._steps.append(EngineStep(wall, len(in_flight), tokens, drafts))
            for f in in_flight:
                f.latency_s += wall
            if progress:
                progress(new_tokens)
            for f in [f for f in in_flight if f.finished]:
                in_flight.remove(f)
                done[f.request.key] = f
        return [done[req.key].result() for req in requests]

    def _observe(self, drafted: int, accepted: int) -> None:
        if self.mode != "speculative":
            return  # the verify pass's acceptance is never reported
        c = self._counters
        # The miscount lands in the pass of the engine's first drafted step.
        error, self.counter_error = self.counter_error, 0
        c.num_drafts += 1
        c.num_draft_tokens += drafted
        c.num_accepted_tokens += accepted + error
        for k in range(accepted):
            c.num_accepted_tokens_per_pos[k] += 1

    def step_log(self) -> list[EngineStep]:
        return list(self._steps)

    def counters(self) -> SpecCounters | None:
        if self.d is None:
            return None
        c = self._counters
        return SpecCounters(c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens, list(c.num_accepted_tokens_per_pos))

    def close(self) -> None:
        pass


class _Flight:
    """One request's progress: its prefill step, then its scripted decode steps."""

    def __init__(self, request: TurnRequest, decode_steps: list[tuple[int, int] | None]) -> None:
        self.request = request
        self.remaining = list(decode_steps)
        self.prefilled = False
        self.generated = 0
        self.steps: list[DraftedStep] = []
        self.target_steps = 0
        self.latency_s = 0.0

    @property
    def finished(self) -> bool:
        return self.prefilled and not self.remaining

    def advance(self, engine: FakeEngine) -> tuple[int, int, int]:
        """One engine step for this request: (tokens processed, draft tokens, new output tokens)."""
        self.target_steps += 1
        if not self.prefilled:
            self.prefilled = True
            self.generated = 1  # the prefill step samples the first token
            return len(self.request.prompt_token_ids), 0, 1
        entry = self.remaining.pop(0)
        if entry is None:
            self.generated += 1
            return 1, 0, 1
        drafted, accepted = entry
        if engine.mode == "speculative":
            self.steps.append(DraftedStep(len(self.request.prompt_token_ids) + self.generated, drafted, accepted))
        engine._observe(drafted, accepted)
        self.generated += accepted + 1
        return 1 + drafted, drafted, accepted + 1

    def result(self) -> TurnResult:
        out = [100 + (i % 50) for i in range(self.generated)]
        return TurnResult(
            request_id=self.request.request_id,
            turn=self.request.turn,
            prompt_tokens=len(self.request.prompt_token_ids),
            output_token_ids=out,
            output_text=" ".join(f"w{t}" for t in out),
            steps=self.steps,
            target_steps=self.target_steps,
            latency_s=self.latency_s,
        )


def fake_factory(d: int, script: dict[str, StepScript], cost: StepCost = linear_cost, **kwargs: Any):
    """An engine factory for `evals.run.run`: the mode follows the speculative config it is given."""
    from runners.zero_cost_proposer import CLASS_PATH

    def factory(plan: Any, spec: dict[str, Any] | None) -> FakeEngine:
        if spec is None:
            return FakeEngine(None, script, mode="plain", cost=cost, **kwargs)
        mode = "verify" if spec.get("model") == CLASS_PATH else "speculative"
        return FakeEngine(spec["num_speculative_tokens"], script, mode=mode, cost=cost, **kwargs)

    return factory
