"""A scripted engine for unit tests: replays given per-step acceptance, no model involved."""

from __future__ import annotations

from typing import Sequence

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


class FakeEngine:
    def __init__(
        self,
        d: int | None,
        script: dict[str, StepScript],
        latency_s: float = 0.01,
        counter_error: int = 0,
    ) -> None:
        """`script` maps `request_id#turn` to its decode steps; missing keys decode one plain step.

        `counter_error` is added to the reported accepted-token counter, to test
        that a disagreement between records and counters is caught.
        """
        self.d = d
        self.script = script
        self.latency_s = latency_s
        self.counter_error = counter_error
        self._counters = SpecCounters(num_accepted_tokens_per_pos=[0] * (d or 0))
        self._steps: list[EngineStep] = []

    def chat_token_ids(self, messages: Sequence[dict[str, str]]) -> list[int]:
        ids = []
        for m in messages:
            ids.append(1 if m["role"] == "user" else 2)
            ids.extend(len(word) + 10 for word in m["content"].split())
        return ids + [3]

    def generate(
        self, requests: Sequence[TurnRequest], sampling: SamplingSpec, progress: ProgressFn | None = None
    ) -> list[TurnResult]:
        results = []
        for req in requests:
            script = self.script.get(req.key, [None])
            generated = 1  # the prefill step samples the first token
            steps = []
            for entry in script:
                if entry is None:
                    generated += 1
                    continue
                drafted, accepted = entry if isinstance(entry, tuple) else (self.d, entry)
                steps.append(DraftedStep(len(req.prompt_token_ids) + generated, drafted, accepted))
                generated += accepted + 1
                self._observe(drafted, accepted)
            out = [100 + (i % 50) for i in range(generated)]
            drafted_tokens = sum((e if isinstance(e, tuple) else (self.d, e))[0] for e in script if e is not None)
            self._steps.append(EngineStep(self.latency_s, 1, len(req.prompt_token_ids) + len(script) + drafted_tokens, drafted_tokens))
            if progress:
                progress(generated)
            results.append(
                TurnResult(
                    request_id=req.request_id,
                    turn=req.turn,
                    prompt_tokens=len(req.prompt_token_ids),
                    output_token_ids=out,
                    output_text=" ".join(f"w{t}" for t in out),
                    steps=steps,
                    target_steps=1 + len(script),
                    latency_s=self.latency_s,
                )
            )
        return results

    def _observe(self, drafted: int, accepted: int) -> None:
        c = self._counters
        c.num_drafts += 1
        c.num_draft_tokens += drafted
        c.num_accepted_tokens += accepted
        for k in range(accepted):
            c.num_accepted_tokens_per_pos[k] += 1

    def step_log(self) -> list[EngineStep]:
        # The fake runs requests one after another: one "step" per request, at its latency.
        return list(self._steps)

    def counters(self) -> SpecCounters | None:
        if self.d is None:
            return None
        c = self._counters
        return SpecCounters(
            c.num_drafts,
            c.num_draft_tokens,
            c.num_accepted_tokens + self.counter_error,
            list(c.num_accepted_tokens_per_pos),
        )

    def close(self) -> None:
        pass
