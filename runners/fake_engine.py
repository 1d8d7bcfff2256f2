"""`runner=fake`: a scripted engine, no model involved, complete against the Engine protocol, so
every command runs end to end in unit tests without vLLM.

It batches like vLLM does: the requests in flight (at most `max_concurrency`) advance one
step together; a request's first step is its prefill, and a finished request's slot goes to
the next one. Each step's wall time comes from a cost function of what it carried, so the
cost decomposition can be checked against hand-computed values. What each request accepts at
each step is scripted: `runner.script=<json file>` (`{"<request_id>#<turn>": [steps]}`), else
`runner.pattern` rotated per request.
"""

from __future__ import annotations

import json
import random
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from runners.engine import ProgressFn
from runners.zero_cost_proposer import CLASS_PATH, IDLE_CLASS_PATH
from speclens.errors import ConfigError
from speclens.figures.costs import PassMode
from speclens.file_formats.schedule_file import k_at
from speclens.generation import (
    COUNTER_NAMES,
    DraftedStep,
    EngineStep,
    RecordGranularity,
    RequestTotals,
    SamplingSpec,
    SpecCounters,
    TurnRequest,
    TurnResult,
)

# One script entry per decode step: None = the drafter proposed nothing (an
# undrafted step), an int = accepted count with D drafted, a pair = (drafted, accepted).
StepScript = list["int | tuple[int, int] | None"]
# Step wall time in seconds from (mode, num_requests, num_tokens, num_draft_tokens).
StepCost = Callable[[str, int, int, int], float]


# Output tokens: token i of every answer, and the id that ends one (the fake's end-of-sequence).
EOS_TOKEN = 2


def output_token(i: int) -> int:
    return 100 + (i % 50)


# The fake's top-2 log-probability margins (SamplingSpec.top2).
CLEAR_MARGIN = 5.0
NEAR_TIE_MARGIN = 0.01


@dataclass
class FakeRunnerConfig:
    """runner=fake: the scripted engine (unit tests; no model, no vLLM)."""

    # JSON file mapping "<request_id>#<turn>" to its decode steps: null = an undrafted step, an
    # int = accepted count with D drafted, [drafted, accepted]; requests it lacks decode one step.
    script: str | None = None
    # Without a script: every request's decode steps cycle through this, starting at an offset
    # fixed by its request id (null = an undrafted step; counts above D are capped at D) ...
    pattern: list[Any] = field(default_factory=lambda: [2, 0, 3, None, 1])
    # ... until it has this many output tokens (sampling.max_tokens caps it).
    output_tokens: int = 24
    # Step wall time: step_ms + token_ms per token processed + draft_token_ms per draft token
    # in the drafter's own pass + idle_ms per step of the idle pass (speculation on, nothing
    # proposed: the K=0 tax, idle_ms / (step_ms + token_ms·B) at B in flight).
    step_ms: float = 10.0
    token_ms: float = 1.0
    draft_token_ms: float = 2.0
    idle_ms: float = 1.0
    # Added to the reported accepted-token counter (a miscount the run must catch).
    counter_error: int = 0
    # A request id whose generation raises, as an engine that dies mid-run would.
    fail_on: str | None = None
    # "<request_id>#<turn>" keys whose plain-decoding answer differs from the speculative one in
    # its last token (a lossless check that fails) ...
    diverge: list[str] = field(default_factory=list)
    # ... and of those, the ones whose plain decoding had a near-tie there (top-2 margin 0.01; every
    # other token's margin is 5).
    near_ties: list[str] = field(default_factory=list)
    # Real seconds each engine step takes (the scripted step cost is what is recorded): a run that
    # lasts long enough to be interrupted, for fault-injection tests.
    step_sleep_s: float = 0.0
    # A file each engine waits for before its first step, having written `<gate>.waiting` when it
    # got there: fault-injection tests hold a run mid-measurement until they release it (an event,
    # not a race against time). Unset: no wait.
    gate: str | None = None
    # How finely it reports acceptance, as a server of each kind would: step (every drafted step),
    # request (each request's totals) or domain (counters only).
    record_granularity: RecordGranularity = RecordGranularity.step


def chat_token_ids(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None) -> list[int]:
    """The fake's chat template: a role token (user 1, assistant 2, any other 4), then one token per
    word (its length + 10) of the content and of each tool call; the tool schemas first, one token
    per word of their JSON."""
    ids = [len(word) + 10 for tool in tools or () for word in json.dumps(tool, sort_keys=True).split()]
    for m in messages:
        ids.append({"user": 1, "assistant": 2}.get(m["role"], 4))
        ids.extend(len(word) + 10 for word in (m.get("content") or "").split())
        for call in m.get("tool_calls") or ():
            ids.extend(len(word) + 10 for word in json.dumps(call, sort_keys=True).split())
    return ids + [3]


def decode(token_ids: Sequence[int]) -> str:
    """The fake's text of a token sequence: `w<id>` per token, space-separated."""
    return " ".join(f"w{t}" for t in token_ids)


def linear_cost(
    mode: str,
    num_requests: int,
    num_tokens: int,
    num_draft_tokens: int,
    step_ms: float = 10.0,
    token_ms: float = 1.0,
    draft_token_ms: float = 2.0,
    idle_ms: float = 1.0,
) -> float:
    """step_ms per step + token_ms per token processed + draft_token_ms per drafted token when a
    drafter ran + idle_ms per step of the idle pass (defaults: 10 ms, 1 ms, 2 ms, 1 ms). The idle
    cost is charged in the idle pass alone: the other passes' scripted costs stay as they were."""
    drafting = draft_token_ms * num_draft_tokens if mode == "speculative" else 0.0
    machinery = idle_ms if mode == "idle" else 0.0
    return (step_ms + token_ms * num_tokens + drafting + machinery) / 1000.0


class FakeEngine:
    def __init__(
        self,
        d: int | None,
        script: Mapping[str, StepScript] | Callable[[str], StepScript],
        counter_error: int = 0,
        mode: str | None = None,
        cost: StepCost = linear_cost,
        fail_on: str | None = None,
        limits: tuple[int, int] = (64, 8192),
        diverge: Sequence[str] = (),
        near_ties: Sequence[str] = (),
        step_sleep_s: float = 0.0,
        record_granularity: RecordGranularity = RecordGranularity.step,
        gate: str | None = None,
        schedule: list[list[int]] | None = None,
    ) -> None:
        """`script` maps `request_id#turn` to its speculative decode steps (a mapping, in which
        missing keys decode one plain step, or a function of the key). In mode `plain` each
        script entry becomes accepted + 1 plain steps (the same output); in mode `verify` every
        decode step drafts D tokens and accepts none; in mode `idle` (speculation on, nothing
        proposed) every decode step drafts nothing, as in `plain`.

        `counter_error` is added to the reported accepted-token counter, to test
        that a disagreement between records and counters is caught.
        """
        self.mode = mode or ("speculative" if d else "plain")
        assert self.mode in set(PassMode), self.mode
        self.d = d
        self.script = script if callable(script) else (lambda key, s=script: s.get(key, [None]))
        self.counter_error = counter_error
        self.cost = cost
        self.fail_on = fail_on
        self.scheduler_limits = limits
        self.diverge = set(diverge)
        self.near_ties = set(near_ties)
        self.step_sleep_s = step_sleep_s
        self.record_granularity = record_granularity
        self.gate = gate
        # vLLM's num_speculative_tokens_per_batch_size: each step drafts at most the k of its batch.
        self.schedule = schedule
        self.counted = COUNTER_NAMES
        self.threads: int | None = None
        self.model_runner: str | None = None
        self.gpu: dict[str, Any] | None = None
        self.engine_name, self.engine_version = "fake", None
        self._counters = SpecCounters(num_accepted_tokens_per_pos=[0] * (d or 0))
        self._steps: list[EngineStep] = []

    def chat_token_ids(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> list[int]:
        return chat_token_ids(messages, tools)

    def _decode_steps(self, key: str) -> list[tuple[int, int] | None]:
        """This request's decode steps in this mode: (drafted, accepted), or None when undrafted."""
        entries = [
            None if e is None else tuple(e) if isinstance(e, (tuple, list)) else (self.d, e) for e in self.script(key)
        ]
        if self.mode == "speculative":
            return entries
        decoded = sum(1 if e is None else e[1] + 1 for e in entries)
        return [None] * decoded if self.mode in ("plain", "idle") else [(self.d, 0)] * decoded

    def generate(
        self,
        requests: Sequence[TurnRequest],
        sampling: SamplingSpec,
        progress: ProgressFn | None = None,
        max_concurrency: int | None = None,
        offsets_s: Sequence[float] | None = None,
    ) -> list[TurnResult]:
        """Closed loop as vLLM batches; open loop (`offsets_s`) on the scripted clock: request i
        joins the batch once the clock passes its arrival (at most max_num_seqs in flight, the rest
        queued), and its latency counts from its arrival, the wait in the queue included."""
        if self.fail_on is not None and any(req.request_id == self.fail_on for req in requests):
            raise RuntimeError(f"fake engine: scripted failure on request {self.fail_on}")
        if self.gate is not None:
            wait_at_gate(Path(self.gate))
        arrivals = list(offsets_s) if offsets_s is not None else [0.0] * len(requests)
        by_arrival = sorted(zip(arrivals, requests), key=lambda pair: pair[0])  # stable: closed loop in order
        queue = [
            (arrival, _Flight(req, self._decode_steps(req.key), sampling)) for arrival, req in reversed(by_arrival)
        ]
        limit = max_concurrency or (self.scheduler_limits[0] if offsets_s is not None else len(queue))
        in_flight: list[_Flight] = []
        done: dict[str, _Flight] = {}
        clock = 0.0
        while queue or in_flight:
            if not in_flight and queue[-1][0] > clock:
                clock = queue[-1][0]  # idle until the next arrival
            while queue and len(in_flight) < limit and queue[-1][0] <= clock:
                arrival, flight = queue.pop()
                flight.latency_s = clock - arrival  # 0.0 in closed loop
                in_flight.append(flight)
            tokens = drafts = new_tokens = 0
            k = None if self.schedule is None else k_at(self.schedule, len(in_flight))
            for f in in_flight:
                t, dr, n = f.advance(self, k)
                tokens, drafts, new_tokens = tokens + t, drafts + dr, new_tokens + n
            if self.step_sleep_s:
                time.sleep(self.step_sleep_s)
            wall = self.cost(self.mode, len(in_flight), tokens, drafts)
            self._steps.append(EngineStep(wall, len(in_flight), tokens, drafts))
            clock += wall
            for f in in_flight:
                f.latency_s += wall
                f.chunk_times.append(f.latency_s)
            if progress:
                progress(new_tokens)
            for f in [f for f in in_flight if f.finished]:
                in_flight.remove(f)
                done[f.request.key] = f
        results = [done[req.key].result() for req in requests]
        if self.record_granularity != RecordGranularity.step:
            for r in results:
                if self.record_granularity == RecordGranularity.request:
                    r.totals = RequestTotals(len(r.steps), sum(s.num_accepted for s in r.steps))
                r.steps = []
        if self.mode == "plain":
            for r in results:
                if f"{r.request_id}#{r.turn}" in self.diverge:
                    r.output_token_ids[-1] += 1
                if sampling.top2:  # a clear winner at every token, but a near-tie where scripted
                    r.top2_margins = [CLEAR_MARGIN] * len(r.output_token_ids)
                    if f"{r.request_id}#{r.turn}" in self.near_ties and r.top2_margins:
                        r.top2_margins[-1] = NEAR_TIE_MARGIN
        return results

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

    def decode(self, token_ids: Sequence[int]) -> str:
        return decode(token_ids)

    def stop_token_ids(self) -> set[int]:
        return {EOS_TOKEN}

    def greedy_predictions(self, sequences: Sequence[Sequence[int]]) -> list[list[int]]:
        """A draft that predicts the next token right except at every fourth position."""
        return [[int(s[j + 1]) if j + 1 < len(s) and j % 4 != 3 else -5 for j in range(len(s))] for s in sequences]

    def counters(self) -> SpecCounters | None:
        if self.d is None:
            return None
        c = self._counters
        return SpecCounters(
            c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens, list(c.num_accepted_tokens_per_pos)
        )

    def log_file(self) -> Path | None:
        return None

    def load_gauges(self) -> dict[str, float] | None:
        return None  # its clock is scripted: nothing runs while a load generator could look

    def forget_finished(self) -> None:
        pass  # the scripted steps draw on nothing

    def close(self) -> None:
        pass


GATE_TIMEOUT_S = 600.0


def wait_at_gate(gate: Path) -> None:
    """Say the engine got here (`<gate>.waiting`), then wait until `gate` exists."""
    Path(f"{gate}.waiting").touch()
    deadline = time.monotonic() + GATE_TIMEOUT_S
    while not gate.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"fake engine: runner.gate={gate} was not released in {GATE_TIMEOUT_S:.0f} s")
        time.sleep(0.01)


def replay_chains(target_dir, draft_dir, kind: str, sequences, first_starts, d_max: int, dtype: str) -> list:
    """Drafts whose k-th from start p is the stream's token p + 1 + k except where p + k is 3 mod 4
    (then -5), whatever the kind; every margin 1.0 (runners/replay_chains.py's layout)."""
    import numpy as np

    out = []
    for seq in sequences:
        n = len(seq)
        drafts = np.full((d_max, n), -1, dtype=np.int64)
        for k in range(1, d_max + 1):
            for p in range(n - 1 - k):
                drafts[k - 1, p] = int(seq[p + 1 + k]) if (p + k) % 4 != 3 else -5
        out.append((drafts, np.ones((d_max, n))))
    return out


class _Flight:
    """One request's progress: its prefill step, then its scripted decode steps."""

    def __init__(
        self, request: TurnRequest, decode_steps: list[tuple[int, int] | None], sampling: SamplingSpec
    ) -> None:
        self.request = request
        self.remaining = list(decode_steps)
        self.max_tokens = sampling.max_tokens
        self.ignore_eos = sampling.ignore_eos
        self.prefilled = False
        self.generated = 0
        # Tokens of a scripted step a schedule's smaller k left to plain steps.
        self.owed = 0
        self.steps: list[DraftedStep] = []
        self.target_steps = 0
        self.latency_s = 0.0
        # Scripted time (since the request started) at which each of its steps ended.
        self.chunk_times: list[float] = []

    @property
    def finished(self) -> bool:
        # With ignore_eos the answer runs to max_tokens, past where its script ends.
        if self.ignore_eos:
            return self.prefilled and self.generated >= self.max_tokens
        return self.prefilled and ((not self.remaining and not self.owed) or self.generated >= self.max_tokens)

    def advance(self, engine: FakeEngine, k: int | None = None) -> tuple[int, int, int]:
        """One engine step for this request: (tokens processed, draft tokens, new output tokens).
        Under a schedule whose `k` is below a scripted step's drafts, the step drafts k and the
        tokens it no longer accepts come as plain steps after it (the answer stays the same)."""
        self.target_steps += 1
        if not self.prefilled:
            self.prefilled = True
            self.generated = 1  # the prefill step samples the first token
            return len(self.request.prompt_token_ids), 0, 1
        entry = None if self.owed else (self.remaining.pop(0) if self.remaining else None)
        self.owed = max(0, self.owed - 1)
        if entry is not None and k is not None and engine.mode == "speculative" and k < entry[0]:
            self.owed = entry[1] - min(entry[1], k)
            entry = (k, min(entry[1], k)) if k > 0 else None
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
        # As vLLM does, the last step's accepted tokens past max_tokens are cut from the output
        # (but were counted); an answer that ends on its own ends with EOS_TOKEN.
        n = min(self.generated, self.max_tokens)
        out = [output_token(i) for i in range(n)]
        stopped = not self.ignore_eos and not self.remaining and self.generated <= self.max_tokens
        if stopped:
            out[-1] = EOS_TOKEN
        return TurnResult(
            request_id=self.request.request_id,
            turn=self.request.turn,
            prompt_tokens=len(self.request.prompt_token_ids),
            output_token_ids=out,
            output_text=decode(out),
            steps=self.steps,
            target_steps=self.target_steps,
            latency_s=self.latency_s,
            ttft_s=self.chunk_times[0],
            chunk_gaps_s=[b - a for a, b in zip(self.chunk_times, self.chunk_times[1:])],
            finish_reason="stop" if stopped else "length",
        )


def pattern_script(pattern: Sequence[Any], output_tokens: int, d: int | None) -> Callable[[str], StepScript]:
    """Decode steps from `pattern`, rotated by a fixed offset per request, until `output_tokens`
    output tokens (counts above D capped at D)."""

    def steps(key: str) -> StepScript:
        offset = zlib.crc32(key.encode()) % len(pattern)
        out: StepScript = []
        made = 1  # the prefill step's token
        i = offset
        while made < output_tokens:
            entry = pattern[i % len(pattern)]
            accepted = None if entry is None or not d else min(int(entry), d)
            out.append(accepted)
            made += 1 if accepted is None else accepted + 1
            i += 1
        return out

    return steps


def synthetic_script(
    script: Mapping[str, StepScript] | Callable[[str], StepScript], d: int, marginal: Sequence[float]
) -> Callable[[str], StepScript]:
    """`script`'s requests at vLLM's synthetic acceptance: each request decodes as many tokens as
    its script does, every decode step drafting D tokens and accepting position k with the
    conditional rate marginal[k] / marginal[k-1] (a draw seeded by the request), as
    vLLM's synthetic rejection sampler does (runners/cpu_synthetic_fix.py)."""
    scripted = script if callable(script) else (lambda key: script.get(key, [None]))
    conditional = [m / p if p > 0 else 0.0 for m, p in zip(marginal, [1.0, *marginal[:-1]])]

    def steps(key: str) -> StepScript:
        decoded = sum(1 if e is None else (e[1] if isinstance(e, (tuple, list)) else int(e)) + 1 for e in scripted(key))
        rng = random.Random(zlib.crc32(key.encode()))
        out: StepScript = []
        made = 0
        while made < decoded:
            accepted = 0
            while accepted < d and rng.random() < conditional[accepted]:
                accepted += 1
            accepted = min(accepted, decoded - made - 1)  # the answer's last token ends it
            out.append(accepted)
            made += accepted + 1
        return out

    return steps


def load_script(path: str) -> dict[str, StepScript]:
    try:
        raw = json.loads(Path(path).expanduser().read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"runner.script={path}: not a readable JSON file ({exc}).") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"runner.script={path}: expected an object mapping '<request_id>#<turn>' to steps.")
    return raw


def check_script(script: Mapping[str, Any], d: int, path: str) -> None:
    """Each scripted step possible at D = `d`: null, the accepted count (0..d), or [drafted,
    accepted] with 0 <= accepted <= drafted <= d."""
    for key, steps in script.items():
        if not isinstance(steps, list):
            raise ConfigError(f"runner.script={path}: {key} holds {steps!r}, not a list of steps.")
        for step in steps:
            pair = step if isinstance(step, list) else [d, step] if step is not None else None
            if pair is None:
                continue
            ok = len(pair) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in pair)
            if not ok or not 0 <= pair[1] <= pair[0] <= d:
                raise ConfigError(
                    f"runner.script={path}: {key} has the step {step!r}, impossible at d={d} "
                    "(null, an accepted count 0..d, or [drafted, accepted] with accepted <= drafted <= d)."
                )


def fake_factory(
    d: int | None,
    script: Mapping[str, StepScript] | Callable[[str], StepScript],
    cost: StepCost = linear_cost,
    **kwargs: Any,
):
    """An engine factory (model_dir, speculative config) -> FakeEngine: the mode follows the
    speculative config it is given (none: plain; the zero-cost proposer: verify; the idle
    proposer: idle)."""

    def factory(model_dir: Any, spec: dict[str, Any] | None) -> FakeEngine:
        if spec is None:
            return FakeEngine(None, script, mode="plain", cost=cost, **kwargs)
        mode = {CLASS_PATH: "verify", IDLE_CLASS_PATH: "idle"}.get(spec.get("model"), "speculative")
        d = spec["num_speculative_tokens"]
        scheduled = kwargs | {"schedule": spec.get("num_speculative_tokens_per_batch_size")}
        if spec.get("rejection_sample_method") == "synthetic":
            return FakeEngine(
                d, synthetic_script(script, d, spec["synthetic_acceptance_rates"]), mode=mode, cost=cost, **scheduled
            )
        return FakeEngine(d, script, mode=mode, cost=cost, **scheduled)

    return factory


def engine_factory(cfg: FakeRunnerConfig, d: int | None, max_num_seqs: int, max_num_batched_tokens: int | None):
    """The factory `runner=fake` builds from its config."""
    if cfg.script:
        script: Any = load_script(cfg.script)
        if d is not None:  # plain decoding reads no drafts from it
            check_script(script, d, cfg.script)
    else:
        script = pattern_script(list(cfg.pattern), cfg.output_tokens, d)

    def cost(mode: str, requests: int, tokens: int, drafts: int) -> float:
        return linear_cost(mode, requests, tokens, drafts, cfg.step_ms, cfg.token_ms, cfg.draft_token_ms, cfg.idle_ms)

    return fake_factory(
        d,
        script,
        cost,
        counter_error=cfg.counter_error,
        fail_on=cfg.fail_on,
        limits=(max_num_seqs, max_num_batched_tokens or 8192),
        diverge=list(cfg.diverge),
        near_ties=list(cfg.near_ties),
        step_sleep_s=cfg.step_sleep_s,
        record_granularity=RecordGranularity(cfg.record_granularity),
        gate=cfg.gate,
    )


class FakeEncoder:
    """The fake engine's chat encoding, for pre-engine checks (prompt lengths, long-context cuts)."""

    def chat_token_ids(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> list[int]:
        return chat_token_ids(messages, tools)

    def decode_verbatim(self, token_ids: Sequence[int]) -> str:
        return decode(token_ids)
