"""vLLM in-process, stepped one engine step at a time, capturing every drafted step.

Why in-process: the per-request speculative metrics live in the scheduler, so
after each `LLMEngine.step()` the growth of a request's `per_step_accepted`
says whether that step drafted for it, and its output tokens so far give the
step's exact start position. (vLLM's own `LLM.generate` runs the same
`while has_unfinished_requests(): step()` loop, so this costs nothing extra.)
"""

from __future__ import annotations

import contextlib
import gc
import os
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from runners.chat import ChatTokenizer
from runners.engine import ProgressFn
from runners.gpu_facts import gpu_facts
from runners.model_runner import runner_in_use
from runners.vllm_compat import make_kernel_registration_safe
from speclens.errors import ConfigError
from speclens.generation import (
    COUNTER_NAMES,
    DraftedStep,
    EngineStep,
    RecordGranularity,
    SamplingSpec,
    SpecCounters,
    TurnRequest,
    TurnResult,
)
from speclens.lossless import top2_margin

COUNTER_PREFIX = "vllm:spec_decode_"


def set_process_env(
    cpu_kvcache_space_gib: int | None, batch_invariant: bool = False, model_runner: str | None = None
) -> None:
    """Environment vLLM reads at import and start-up; call before anything imports vllm."""
    if batch_invariant:  # engine.batch_invariant; refused on CPU before this (vllm_runner.check_support)
        os.environ["VLLM_BATCH_INVARIANT"] = "1"
    if model_runner is not None:  # read by vLLM at each engine's start (runners/model_runner.py)
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1" if model_runner == "v2" else "0"
    # In-process engine core: required to reach the scheduler between steps.
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    # engine.cpu_kvcache_space_gib (the plan fits it from the environment's where unset) wins over
    # the environment, so stamp.json records what ran; None: not fitted yet (before the plan).
    if cpu_kvcache_space_gib is not None:
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(cpu_kvcache_space_gib)
    # vLLM's INFO lines would bury the progress bar; VLLM_LOGGING_LEVEL=INFO brings them back.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


class VllmEngine:
    record_granularity = RecordGranularity.step
    counted = COUNTER_NAMES

    def __init__(
        self,
        model: str,
        speculative_config: dict[str, Any] | None,
        engine_args: dict[str, Any],
        cpu_kvcache_space_gib: int | None = 4,
        batch_invariant: bool = False,
        chat_template_kwargs: dict[str, Any] | None = None,
        model_runner: str | None = None,
        chat_template: str | None = None,
    ) -> None:
        set_process_env(cpu_kvcache_space_gib, batch_invariant, model_runner)

        # vllm reads VLLM_* variables at import: imported after set_process_env, never at module load.
        from vllm import LLM

        make_kernel_registration_safe()
        self.speculative = speculative_config is not None
        extra: dict[str, Any] = {}
        if self.speculative:
            extra["speculative_config"] = speculative_config
            extra["per_request_spec_decode_metrics"] = "detailed"
        # vLLM runs a full garbage collection five times while it starts (and freezes the heap only
        # after them): on a process already holding a large heap (a sweep, the test suite: ~700k
        # objects) that is ~0.7 s each. Frozen here, uncollected, what predates the engine is not
        # traversed again (the last engine's close collected its garbage); close() unfreezes
        # everything, so nothing stays frozen past the engine (objects frozen at exit make nanobind
        # report leaks).
        gc.freeze()
        # Async scheduling overlaps steps, which breaks the step <-> draft alignment.
        self.llm = LLM(model=model, disable_log_stats=False, async_scheduling=False, **engine_args, **extra)
        self.engine = self.llm.llm_engine
        import torch  # loaded by vLLM already

        # In-process, the worker computes in this process with the threads vLLM bound for it.
        self.threads: int | None = torch.get_num_threads()
        self.model_runner: str | None = runner_in_use(self._worker_part("model_runner"))
        self.gpu: dict[str, Any] | None = gpu_facts(self.engine.vllm_config, self._worker_part("model_runner"))
        self.engine_name, self.engine_version = "vllm", vllm_version()
        self.scheduler = self.engine.engine_core.engine_core.scheduler
        self.tokenizer = ChatTokenizer(Path(model), chat_template_kwargs, chat_template)
        self._counters_at_start = self._read_counters()
        self._steps: list[EngineStep] = []
        self._last_schedule: Any = None
        schedule = self.scheduler.schedule

        def capture_schedule(*args: Any, **kwargs: Any) -> Any:
            # What the step carried: vLLM hands it to the model runner and keeps no copy.
            self._last_schedule = schedule(*args, **kwargs)
            return self._last_schedule

        self.scheduler.schedule = capture_schedule

    def chat_token_ids(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> list[int]:
        return self.tokenizer.chat_token_ids(messages, tools)

    def generate(
        self,
        requests: Sequence[TurnRequest],
        sampling: SamplingSpec,
        progress: ProgressFn | None = None,
        max_concurrency: int | None = None,
        offsets_s: Sequence[float] | None = None,
    ) -> list[TurnResult]:
        if offsets_s is not None:
            raise ConfigError(
                "open-loop load (request arrival times) needs runner=server: the in-process engine runs "
                "the requests it is given as one batch."
            )
        # vllm reads VLLM_* variables at import: imported after set_process_env, never at module load.
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        params = SamplingParams(
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_tokens,
            seed=sampling.seed if sampling.temperature > 0 else None,
            ignore_eos=sampling.ignore_eos,
            logprobs=2 if sampling.top2 else None,
            output_kind=RequestOutputKind.DELTA,
        )
        tracked: dict[str, _Tracked] = {}
        # A progress that shows prefill (evals/run.py TqdmProgress) is told each step's prefilled
        # prompt tokens, and first this call's total: a 32K prompt takes minutes before its first token.
        prefill = getattr(progress, "prefill", None)
        planned = sum(len(req.prompt_token_ids) for req in requests) if prefill else 0
        prefilled = 0
        pending = [(f"{i}:{req.key}", req) for i, req in enumerate(requests)]
        pending.reverse()
        limit = max_concurrency or len(pending)
        in_flight = 0

        def start_next() -> None:
            nonlocal in_flight
            external, req = pending.pop()
            internal = self.engine.add_request(external, {"prompt_token_ids": list(req.prompt_token_ids)}, params)
            tracked[external] = _Tracked(req, self.scheduler.requests[internal])
            in_flight += 1

        while pending and in_flight < limit:
            start_next()
        while self.engine.has_unfinished_requests():
            self._last_schedule = None
            before = time.perf_counter()
            outputs = self.engine.step()
            now = time.perf_counter()
            self._log_step(now - before)
            new_tokens = 0
            for out in outputs:
                state = tracked[out.request_id]
                delta = list(out.outputs[0].token_ids)
                state.observe_step(delta, out.outputs[0].logprobs if sampling.top2 else None)
                new_tokens += len(delta)
                if out.finished:
                    state.latency_s = now - state.started
                    state.finish_reason = out.outputs[0].finish_reason
                    in_flight -= 1
            if prefill:
                done = sum(state.prefilled() for state in tracked.values())
                if done > prefilled or planned:
                    prefill(done - prefilled, planned)
                prefilled, planned = done, 0
            if progress and new_tokens:
                progress(new_tokens)
            # A finished request's slot goes to the next one: the batch stays at the limit.
            while pending and in_flight < limit:
                start_next()
        return [state.result(self.tokenizer) for state in tracked.values()]  # started in request order

    def _log_step(self, wall_s: float) -> None:
        out = self._last_schedule
        if out is None or not out.num_scheduled_tokens:
            return
        drafts = sum(len(ids) for ids in out.scheduled_spec_decode_tokens.values())
        self._steps.append(EngineStep(wall_s, len(out.num_scheduled_tokens), out.total_num_scheduled_tokens, drafts))

    def step_log(self) -> list[EngineStep]:
        return list(self._steps)

    @property
    def scheduler_limits(self) -> tuple[int, int]:
        """(max_num_seqs, max_num_batched_tokens): how many requests and tokens one step takes."""
        sched = self.engine.vllm_config.scheduler_config
        return sched.max_num_seqs, sched.max_num_batched_tokens

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(token_ids)

    def stop_token_ids(self) -> set[int]:
        # What vLLM itself stops on: the tokenizer's EOS plus generation_config's eos ids.
        params = self.llm.get_default_sampling_params()
        ids = set(params.stop_token_ids or ())
        eos = self.tokenizer.tokenizer.eos_token_id
        if eos is not None:
            ids.add(eos)
        generation_eos = self.engine.model_config.hf_config.eos_token_id
        ids.update(
            generation_eos
            if isinstance(generation_eos, list)
            else [generation_eos]
            if generation_eos is not None
            else []
        )
        return ids

    def greedy_predictions(self, sequences: Sequence[Sequence[int]]) -> list[list[int]]:
        # vllm reads VLLM_* variables at import: imported after set_process_env, never at module load.
        from vllm import SamplingParams

        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=1, detokenize=False)
        outputs = self.llm.generate([{"prompt_token_ids": list(s)} for s in sequences], params, use_tqdm=False)
        predictions = []
        for out in outputs:
            # prompt_logprobs[j] is the distribution of token j given tokens[:j]; [0] is None.
            row = [next(t for t, lp in entry.items() if lp.rank == 1) for entry in out.prompt_logprobs[1:]]
            row.append(out.outputs[0].token_ids[0])  # the prediction after the whole sequence
            predictions.append(row)
        return predictions

    def _read_counters(self) -> SpecCounters:
        # vllm reads VLLM_* variables at import: imported after set_process_env, never at module load.
        from vllm.v1.metrics.reader import Vector

        totals: dict[str, Any] = {}
        for metric in self.llm.get_metrics():
            if not metric.name.startswith(COUNTER_PREFIX):
                continue
            name = metric.name[len(COUNTER_PREFIX) :]
            if isinstance(metric, Vector):
                previous = totals.get(name, [0] * len(metric.values))
                totals[name] = [a + b for a, b in zip(previous, metric.values)]
            else:
                totals[name] = totals.get(name, 0) + int(metric.value)
        return SpecCounters(
            num_drafts=totals.get("num_drafts", 0),
            num_draft_tokens=totals.get("num_draft_tokens", 0),
            num_accepted_tokens=totals.get("num_accepted_tokens", 0),
            num_accepted_tokens_per_pos=list(totals.get("num_accepted_tokens_per_pos", [])),
        )

    def counters(self) -> SpecCounters | None:
        """Counters since this engine started (vLLM's registry is process-wide)."""
        if not self.speculative:
            return None
        return self._read_counters().since(self._counters_at_start)

    def load_gauges(self) -> dict[str, float] | None:
        return None  # open-loop load needs a server

    def log_file(self) -> Path | None:
        return None  # vLLM logs to this process's own output

    def forget_finished(self) -> None:
        """Drop the answers of finished requests that the drafter keeps to draft from: suffix
        decoding's response cache, shared by every request of the engine (the others draft from
        the prompt and the request's own tokens only)."""
        cache = getattr(self._drafter(), "suffix_cache", None)
        if cache is None:
            return
        for request_id in list(cache.active_requests):
            cache.stop_request(request_id)
        for request_id in list(cache.cached_requests):
            cache.evict_cached_response(request_id)

    def _drafter(self) -> Any:
        """The proposer inside vLLM's in-process worker (None where the layout is not 0.32's)."""
        return getattr(self._worker_part("model_runner"), "drafter", None)

    def _worker_part(self, name: str) -> Any:
        """`name` of vLLM's in-process worker (None where the layout is not 0.32's)."""
        found: Any = self.engine
        for part in ("engine_core", "engine_core", "model_executor", "driver_worker", "worker", name):
            found = getattr(found, part, None)
        return found

    def close(self) -> None:
        engine_core = getattr(self.engine, "engine_core", None)
        if engine_core is not None:
            with one_collection_after():
                engine_core.shutdown()
        del self.llm, self.engine, self.scheduler
        gc.unfreeze()
        gc.collect()
        release_cached_device_memory()


@contextlib.contextmanager
def one_collection_after() -> Iterator[None]:
    """vLLM's shutdown unfreezes the whole heap and runs two full collections while the engine is
    still referenced; the caller's one collection, after it drops the engine, frees the same and
    more. Held off inside (each is ~0.7 s on a large heap, three per engine otherwise)."""
    unfreeze, collect = gc.unfreeze, gc.collect
    gc.unfreeze = lambda: None  # type: ignore[assignment]
    gc.collect = lambda generation=2: 0  # type: ignore[assignment]
    try:
        yield
    finally:
        gc.unfreeze, gc.collect = unfreeze, collect  # type: ignore[assignment]


def release_cached_device_memory() -> None:
    """What the collection freed goes back to the device (vLLM's shutdown did this before its own
    collection, which now runs after it): the next engine's memory profile counts cached blocks."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class _Tracked:
    """One request's progress through the step loop."""

    def __init__(self, request: TurnRequest, scheduled: Any) -> None:
        self.request = request
        # vLLM's scheduler request and its spec-decode accumulator; both outlive its removal.
        self.scheduled = scheduled
        self.spec_metrics = scheduled.spec_decode_metrics
        self.seen_drafted = 0
        self.output: list[int] = []
        self.steps: list[DraftedStep] = []
        self.target_steps = 0
        self.started = time.perf_counter()
        self.latency_s = 0.0
        self.chunk_times: list[float] = []
        self.top2_margins: list[float] = []
        self.finish_reason: str | None = None

    def prefilled(self) -> int:
        """Prompt tokens the engine has computed so far (chunked prefill takes a long one in parts)."""
        return min(self.scheduled.num_computed_tokens, self.scheduled.num_prompt_tokens)

    def observe_step(self, delta: list[int], logprobs: Any = None) -> None:
        """Called for each engine step that produced tokens for this request (`logprobs`: each new
        token's top log-probabilities, when asked for)."""
        if logprobs is not None:
            for top in logprobs:
                self.top2_margins.append(top2_margin(p.logprob for p in top.values()))
        self.target_steps += 1
        self.chunk_times.append(time.perf_counter())
        if self.spec_metrics is not None:
            drafted = len(self.spec_metrics.per_step_accepted)
            if drafted > self.seen_drafted:
                position = len(self.request.prompt_token_ids) + len(self.output)
                self.steps.append(
                    DraftedStep(
                        position=position,
                        num_drafted=self.spec_metrics.per_step_drafted[-1],
                        num_accepted=self.spec_metrics.per_step_accepted[-1],
                    )
                )
                self.seen_drafted = drafted
        self.output.extend(delta)

    def result(self, tokenizer: ChatTokenizer) -> TurnResult:
        return TurnResult(
            request_id=self.request.request_id,
            turn=self.request.turn,
            prompt_tokens=len(self.request.prompt_token_ids),
            output_token_ids=self.output,
            output_text=tokenizer.decode(self.output),
            steps=self.steps,
            target_steps=self.target_steps,
            latency_s=self.latency_s,
            ttft_s=self.chunk_times[0] - self.started if self.chunk_times else None,
            chunk_gaps_s=[b - a for a, b in zip(self.chunk_times, self.chunk_times[1:])],
            top2_margins=self.top2_margins or None,
            finish_reason=self.finish_reason,
        )


def vllm_version() -> str | None:
    """The vLLM computing in this process, as its package says (vllm-cpu on the CPU build)."""
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None
