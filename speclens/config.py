"""The typed config schema: `python -m evals.run` composes one RunConfig from conf/ and the command
line (Hydra's structured configs). A mistyped key or a value outside a choice fails at composition,
naming the key and what it allows, before any engine starts.

Components chosen by name (drafter=, dataset=, runner=, logger=) are one config class each,
registered under their name (evals/pipeline/compose.py): the name is their identity, nowhere restated.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from omegaconf import MISSING

from speclens.errors import ConfigError

# vLLM's rejection sampler handles at most this many draft tokens per step
# (vllm/v1/sample/rejection_sampler.py, MAX_SPEC_LEN).
VLLM_MAX_SPEC_LEN = 128


class Choice(str, Enum):
    """A config value from a fixed set; reads and prints as its plain value."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @classmethod
    def of(cls, value: Any, key: str) -> "Choice":
        """`value` as a member (configs built in code may hold the plain string), or a ConfigError
        naming `key` and the choices."""
        try:
            return cls(value)
        except ValueError:
            raise ConfigError(f"{key}={value!r} is unknown; choose one of {', '.join(m.value for m in cls)}.") from None


@dataclass
class TargetConfig:
    # Local folder or hub id.
    model: str = MISSING
    # Key of a target speclens builds itself when `model` points at its cache folder.
    embedded: str | None = None
    # The chat template prompts are rendered with: null, the target's own (a target without one is
    # refused); a Jinja file to use instead; or `plain`, the turns as plain text (base models).
    chat_template: str | None = None


@dataclass
class SamplingConfig:
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 128
    # Every answer runs to max_tokens, past its end of sequence (fixed output lengths, as load
    # generators set them: evals.load against a peer's synthetic requests).
    ignore_eos: bool = False


class Dtype(Choice):
    """The weights' and activations' dtype, as vLLM's --dtype takes it."""

    auto = "auto"
    half = "half"
    float16 = "float16"
    bfloat16 = "bfloat16"
    float = "float"
    float32 = "float32"


# engine.max_model_len where the user sets none and the target's window allows it.
DEFAULT_MAX_MODEL_LEN = 4096
DEFAULT_DTYPE = "bfloat16"


@dataclass
class EngineConfig:
    # null: the smaller of default_max_model_len and the target's context window, raised to the
    # longest prompt with its answer where that is longer (evals/pipeline/capacity.py).
    max_model_len: int | None = None
    # The window fitted where max_model_len is null (engine=gpu: 8192).
    default_max_model_len: int = DEFAULT_MAX_MODEL_LEN
    # null: the dtype the target's checkpoint was saved in (bfloat16 where it names none).
    dtype: Dtype | None = None
    enforce_eager: bool = True
    max_num_seqs: int = 64
    max_num_batched_tokens: int | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    # VLLM_CPU_KVCACHE_SPACE in GiB (CPU builds only; start-up fails without it). null: the
    # environment's VLLM_CPU_KVCACHE_SPACE, else fitted to what the prompts need (at least 4).
    cpu_kvcache_space_gib: int | None = None
    gpu_memory_utilization: float = 0.9
    # vLLM's batch-invariant kernels (VLLM_BATCH_INVARIANT=1, GPU attention backends that have
    # them): greedy bf16 outputs then do not move with batch shapes, so the lossless check and the
    # replay are exact in bf16. Refused on CPU, which has none (use dtype=float32 there).
    batch_invariant: bool = False
    # vLLM's model runner for every pass of a run: auto (V2 where vLLM would choose it: Triton is
    # present and every pass's method runs on it; else V1), v1 or v2 (runners/model_runner.py).
    model_runner: str = "auto"
    # A context extension beyond the target's own window, e.g. {rope_type: yarn, factor: 4.0}
    # (YaRN, through vLLM's hf_overrides; speclens fills in the target's rope_theta and window).
    # Every figure measured with it says so (summary.json's context_window). {}: the own window.
    rope_scaling: dict[str, Any] = field(default_factory=dict)
    # The KV cache's element type (vLLM's kv_cache_dtype): auto (the model's dtype) or an FP8
    # format; an axis of curves and comparisons (evals/pipeline/kv_cache.py checks it before any engine).
    kv_cache_dtype: str = "auto"
    # Any other vLLM engine argument, passed through unchanged.
    extra_args: dict[str, Any] = field(default_factory=dict)


@dataclass
class NoLoggerConfig:
    """logger=none: results stay in the run dir only."""


@dataclass
class WandbLoggerConfig:
    """logger=wandb: each run (and each sweep's curves and ranking) logged to Weights & Biases."""

    project: str = "speclens"
    entity: str | None = None
    # Runs of one group are compared together; default: the sweep dir's name in a multirun.
    group: str | None = None
    tags: list[str] = field(default_factory=list)


LOGGERS: dict[str, type] = {"none": NoLoggerConfig, "wandb": WandbLoggerConfig}


@dataclass
class DatasetConfig:
    """Keys every prompt set has; sets with more keys subclass it (evals/datasets/)."""

    path: str | None = None
    # A deterministic, seeded subset of this many prompts, balanced across categories.
    num_requests: int | None = None
    # Keep only these source categories (null: all).
    categories: list[str] | None = None


@dataclass
class ReasoningConfig:
    """Where a reasoning target's thinking ends in each output, so that acceptance is measured per
    segment (thinking, answer; speclens/segments.py). Set `parser` or `end`, not both; neither: no split."""

    # One of vLLM's reasoning parsers, by name (vllm.reasoning.ReasoningParserManager), built on
    # the target's tokenizer: thinking ends where it says (is_reasoning_end / extract_content_ids).
    parser: str | None = None
    # Or delimiters matched on the decoded output, for any model: thinking ends with `end` ...
    end: str | None = None
    # ... and, where set, an output thinks only if the prompt's template opened thinking (its last
    # delimiter is `start`) or the output holds `start` itself.
    start: str | None = None


@dataclass
class AcceptanceConfig:
    """Time the drafter at an acceptance set here instead of its own (vLLM's synthetic rejection
    sampler: each draft position accepted with a set probability, the drafter's drafting and the
    target's verification computed as usual; evals/pipeline/synthetic.py)."""

    # The marginal per-position rates (P(the first k+1 drafts accepted), one per draft position, as
    # vLLM's synthetic_acceptance_rates takes them), or a speculation_profile.json / run dir whose
    # measured profile for this drafter, d and domain `all` gives them. null: measured acceptance.
    synthetic: Any = None


@dataclass
class VerifyConfig:
    """How the target verifies drafts (vLLM's rejection_sample_method): standard, one draft token
    at a time; block, the drafts jointly as a block (Sun et al.; vLLM's Model Runner V2 only). And
    how a model drafter samples its drafts (vLLM's draft_sample_method): greedy, its argmax, taken
    as one-hot in verification; probabilistic, sampled, its probabilities kept for the ratio test.
    draft_sampling is folded into drafter.sample_method when composed (evals/pipeline/compose.py), so the
    two spellings are one run; null: the drafter's own."""

    method: str = "standard"
    draft_sampling: str | None = None


@dataclass
class RunConfig:
    target: TargetConfig = MISSING
    # A drafter's config class (drafters/<name>.py), chosen with drafter=<name>.
    drafter: Any = MISSING
    # A prompt set's config class (evals/datasets/), chosen with dataset=<name>.
    dataset: Any = MISSING
    sampling: SamplingConfig = MISSING
    engine: EngineConfig = MISSING
    # NoLoggerConfig or WandbLoggerConfig, chosen with logger=<name>.
    logger: Any = MISSING
    # A runner's config class (runners/), chosen with runner=<name>.
    runner: Any = MISSING
    d: int = 3
    seed: int = 0
    # Operating points: for each B, the prompts run B at a time (null: all at once, up to
    # engine.max_num_seqs).
    batch_sizes: list[int] | None = None
    # Open-loop load instead: requests arrive at this mean rate (per second, Poisson, seeded),
    # however many are in flight (runner=server).
    request_rate: float | None = None
    # Also run without speculation at each B (lossless check, measured speedup, T_verif(B)) and
    # with a zero-cost proposer (T_verif(B*(1+D)), hence T_draft): see speclens/figures/costs.py.
    baseline: bool = False
    # With baseline=true: run the speculative and plain passes this many times, interleaved; the
    # speedup is the median repeat's, with the range over all of them (null: once).
    repeats: int | None = None
    # Where thinking ends in the outputs: acceptance per segment (summary.json by_segment).
    reasoning: ReasoningConfig = field(default_factory=ReasoningConfig)
    # Passed to the target's chat template wherever speclens renders a prompt (in-process and
    # server runners alike), e.g. {enable_thinking: false} for Qwen3's.
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    # Drafts accepted at set rates instead of measured (acceptance.synthetic): speed at any AL.
    acceptance: AcceptanceConfig = field(default_factory=AcceptanceConfig)
    # How drafts are verified (evals/pipeline/verify.py checks it before any engine).
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    # Re-run even when the run dir already holds a finished run of this configuration.
    force: bool = False
    # Show vLLM's and torch's own output on the terminal (default: into the run dir's engine.log).
    verbose: bool = False


@dataclass
class ReplayConfig(RunConfig):
    """`python -m evals.replay`: the run keys plus the largest draft length of the curve."""

    d_max: int = 16


# Keys that say how to run or report, not what is measured: left out of the config fingerprint.
NOT_FINGERPRINTED = ("force", "logger", "runner", "verbose")
# Keys added after run dirs were first fingerprinted, with their default: they enter the
# fingerprint only when set otherwise, so a configuration that does not use them keeps the
# identity its finished runs were stored under.
FINGERPRINTED_WHEN_SET: dict[str, Any] = {
    "request_rate": None,
    "repeats": None,
    "drafter.schedule": None,
    "engine.batch_invariant": False,
    "engine.model_runner": "auto",
    "target.chat_template": None,
    "engine.default_max_model_len": DEFAULT_MAX_MODEL_LEN,
    "reasoning": {"parser": None, "end": None, "start": None},
    "chat_template_kwargs": {},
    "engine.rope_scaling": {},
    "acceptance": {"synthetic": None},
    "engine.kv_cache_dtype": "auto",
    "drafter.parallel_drafting": False,
    # Always null once composed (folded into drafter.sample_method); trimmed before `verify` is.
    "verify.draft_sampling": None,
    "verify": {"method": "standard"},
    "sampling.ignore_eos": False,
}


def config_fingerprint(resolved: dict[str, Any], names: dict[str, str]) -> str:
    """sha256 of the resolved run config, the identity a finished run is recognised by.

    `names` are the chosen components' names ({"drafter": "ngram", ...}); they enter the
    fingerprint as `<group>.name`, where configs before schema 3 held them, so run dirs
    measured then are still recognised."""
    measured = {k: v for k, v in resolved.items() if k not in NOT_FINGERPRINTED}
    for dotted, default in FINGERPRINTED_WHEN_SET.items():
        group, _, name = dotted.rpartition(".")
        holder = measured.get(group) if group else measured
        if isinstance(holder, dict) and name in holder and holder[name] == default:
            trimmed = {k: v for k, v in holder.items() if k != name}
            if group:
                measured[group] = trimmed
            else:
                measured = trimmed
    for group, name in names.items():
        if isinstance(measured.get(group), dict):
            measured[group] = {"name": name, **measured[group]}
    blob = json.dumps(measured, sort_keys=True, default=str)
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()
