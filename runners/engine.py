"""The engine protocol: the one place an engine is defined. Runners implement it (runners/vllm_engine.py
in-process vLLM, runners/fake_engine.py the scripted test double); the pipeline uses nothing else."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from speclens.errors import MeasurementError
from speclens.generation import (
    EngineStep,
    RecordGranularity,
    SamplingSpec,
    SpecCounters,
    TurnRequest,
    TurnResult,
)

# Called with the number of new output tokens after each engine step. A progress object may also
# have `prefill(new_tokens, added_total)`: the prompt tokens prefilled in the step, and the prompt
# tokens that joined the pass's total since the last call (engines that see their scheduler call it).
ProgressFn = Callable[[int], None]


class EngineFailed(MeasurementError):
    """The engine stopped answering mid-pass; `finished` holds the requests it completed first
    (kept in the run dir for inspection; the run gets no summary)."""

    def __init__(self, message: str, finished: Sequence[TurnResult]) -> None:
        super().__init__(message)
        self.finished = list(finished)
        # Set by the pipeline: the passes finished before, and the failed one with `finished`.
        self.passes: list[Any] = []


class Engine(Protocol):
    # How finely it reports acceptance (speclens/generation.py): per step for in-process vLLM and vLLM
    # servers with per-request metrics.
    record_granularity: RecordGranularity
    # The SpecCounters fields its counters() keeps (all four for vLLM; a server may keep fewer).
    counted: tuple[str, ...]
    # Threads it computes with: greedy bf16 outputs on CPU move with it (speclens/figures/summary.py Numerics).
    # None where it cannot be seen (an attached server, the fake engine).
    threads: int | None
    # vLLM's model runner that computed it ("v1", "v2"; runners/model_runner.py), None where it
    # cannot be seen (a server, the fake engine).
    model_runner: str | None
    # The GPU it computed on (runners/gpu_facts.py), None on a CPU or where it cannot be seen.
    gpu: dict[str, Any] | None
    # The serving engine that computed it, as it names itself ("vllm", "sglang", "trtllm", "fake"),
    # and its version (a server's from the server; None where it does not say): what a run's
    # provenance records, so that an SGLang server's figures never pair as vLLM's.
    engine_name: str
    engine_version: str | None

    def chat_token_ids(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> list[int]:
        """Token ids of `messages` (and the tool schemas `tools`) with the target's chat template and
        generation prompt."""

    def generate(
        self,
        requests: Sequence[TurnRequest],
        sampling: SamplingSpec,
        progress: ProgressFn | None = None,
        max_concurrency: int | None = None,
        offsets_s: Sequence[float] | None = None,
    ) -> list[TurnResult]:
        """Run the requests, at most `max_concurrency` in flight at once (None: all of them; the
        engine batches those in flight and starts the next as one finishes); results in request order.
        With `offsets_s` (open loop; the load ladder), request i is sent `offsets_s[i]` seconds after
        the call, however many are in flight; an engine that cannot send so raises ConfigError."""

    def counters(self) -> SpecCounters | None:
        """Cumulative speculative counters since the engine started; None without speculation."""

    def load_gauges(self) -> dict[str, float] | None:
        """What the engine holds now, where it reports it (a vLLM server's metrics page): requests
        `in_flight` (running and waiting) and `kv_cache_usage` (0..1); None where it cannot be seen."""

    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of `token_ids` as the engine reports output text."""

    def step_log(self) -> list[EngineStep]:
        """Every engine step since the engine started, in order."""

    def stop_token_ids(self) -> set[int]:
        """Token ids that end a generation (end-of-sequence and the model's extra stop ids)."""

    def greedy_predictions(self, sequences: Sequence[Sequence[int]]) -> list[list[int]]:
        """For each sequence, the model's argmax next token after each prefix (one prefill pass):
        element j is the prediction for position j + 1."""

    @property
    def scheduler_limits(self) -> tuple[int, int]:
        """(max_num_seqs, max_num_batched_tokens): how many requests and tokens one step takes."""

    def log_file(self) -> Path | None:
        """The engine's own log file (a launched server's), if it keeps one apart from this process."""

    def forget_finished(self) -> None:
        """Drop what the drafter keeps of finished requests to draft from (suffix decoding's shared
        response cache), so that the warm-up request's answer drafts nothing for the pass; a no-op
        for drafters that draw on each request's own tokens, and where the engine cannot reach it."""

    def close(self) -> None: ...


# Starts an engine for a model folder with a speculative config (None: plain decoding).
EngineFactory = Callable[[Path, "dict[str, Any] | None"], Engine]
