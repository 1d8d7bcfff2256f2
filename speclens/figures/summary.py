"""summary.json and replay.json as typed records (their file format, with the reader that migrates
every earlier schema version, is speclens/file_formats/summary_file.py).

Every type is a `record` (speclens/schema.py): frozen, its fields' ranges declared with their
types, validated by pydantic when a file is read. A summary is built once, at the end of a run
(evals/pipeline/summarise.py), and never changed after.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from speclens.figures.account import SpeedupAccount
from speclens.figures.costs import StepTiming
from speclens.figures.diagnostics import Diagnostic
from speclens.figures.latency import Latency
from speclens.figures.metrics import OMITTED_WHEN_NONE, GroupFigures, PositionBin, SegmentFigures
from speclens.figures.peer_figures import PeerFigures
from speclens.generation import SpecCounters
from speclens.provenance import Provenance, of_stamp
from speclens.schema import AL, Count, DraftLength, NonNegative, Rate, Seconds, record, to_plain

# The group of every request, beside the domains in by_domain, curves.csv and the tables: no prompt
# set's category may take its name (evals/datasets/selection.py check_group_names).
WHOLE_RUN_GROUP = "all"
RESERVED_GROUP_NAMES = frozenset({WHOLE_RUN_GROUP})


@record
class DomainPoint(GroupFigures):
    """A group's figures at one operating point, with the speedup the step costs predict."""

    predicted_speedup: float | None = None
    predicted_speedup_range: list[float] | None = None
    # The prediction times the operating point's measured corrections (speclens/figures/account.py).
    predicted_corrected: float | None = None
    predicted_corrected_range: list[float] | None = None


@record
class LengthPoint(DomainPoint):
    """A length bucket at one operating point: its acceptance (GroupFigures' length fields), and
    what its own steps measured, since a pass runs one length at a time: throughput, the step
    costs (speclens/figures/costs.py) and, with a baseline, the measured speedup."""

    output_tokens_per_s: NonNegative | None = None
    baseline_output_tokens_per_s: NonNegative | None = None
    speedup: NonNegative | None = None
    t_verif: StepTiming | None = None
    t_step: StepTiming | None = None
    t_verif_spec: StepTiming | None = None
    t_draft_ms: float | None = None
    # The most requests this length's pass held in flight, where that is not the point's B.
    batch_size_held: Count | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    # The idle pass's step and the K=0 tax at this length (speclens/figures/costs.py; since version 12).
    t_idle: StepTiming | None = None
    k0_tax: float | None = None
    k0_tax_range: list[float] | None = None


@record
class ContextWindow:
    """The window the target ran with. `native`: its checkpoint's own (max_position_embeddings);
    `window`: the one it ran with, larger than `native` only under a context extension the user
    named (`extension`, e.g. "yarn x4.0 from 8192"), which every figure measured past `native`
    depends on; `max_model_len`: the engine's limit within it."""

    native: int | None
    window: int | None
    max_model_len: int
    extension: str | None = None

    @property
    def extended(self) -> bool:
        return self.extension is not None

    def label(self) -> str:
        """One line for tables and reports, e.g. "window 32768 (extended: yarn x4.0 from 8192)"."""
        if self.extension is None:
            return f"window {self.window or self.max_model_len}"
        return f"window {self.window} (extended: {self.extension})"


@record
class Mismatch:
    """A greedy output that differs from plain decoding: where, plain decoding's top-2 margin
    there, and why (speclens/lossless.py: near_tie | divergence | unexplained)."""

    request_id: str
    turn: int
    batch_size: int
    first_divergence: int
    top2_margin: float | None
    classification: str


@record
class LosslessCheck:
    """Greedy speculative outputs against plain decoding, token for token."""

    checked: bool
    identical: bool | None
    n_compared: Count
    n_identical: Count
    mismatched: list[str]
    # Each mismatch explained (at most MISMATCHES_SHOWN), and the counts of each kind.
    mismatches: list[Mismatch] = field(default_factory=list)
    n_near_ties: Count = 0
    n_divergences: Count = 0
    # The dtype the engine ran in and its near-tie bound (top-2 log-probability margin).
    dtype: str | None = None
    near_tie_bound: float | None = None


@record
class SyntheticAcceptance:
    """Drafts accepted at set rates by vLLM's synthetic rejection sampler (acceptance.synthetic):
    the run's speed is the drafter's at this acceptance, its AL is set, not measured."""

    # The marginal per-position rates, as vLLM's synthetic_acceptance_rates takes them.
    rates: list[Rate]
    # 1 + the sum of the rates: the AL the sampler draws toward.
    expected_al: AL
    # "given" (the command line), or the profile the rates were read from.
    source: str
    # Accepted drafts are emitted whether or not the target agrees: outputs are not its own.
    lossless_check: str = "not made: synthetic acceptance emits drafts the target did not choose"


# Dtypes in which greedy decoding on CPU gives the same tokens whatever the thread count and batch
# shape: a top-2 margin small enough for their rounding to flip (speclens/lossless.py) is rare enough
# that no check of this project has met one.
REPRODUCIBLE_DTYPES = frozenset({"float32", "float"})


@record
class Numerics:
    """What a run's greedy outputs depend on beyond its config.

    In bfloat16 or float16 on CPU they move with the engine's thread count and batch shapes
    (near-ties flip, speclens/lossless.py), so two runs, or a server and the in-process engine, can
    part; in float32, or with batch-invariant kernels on a GPU (engine.batch_invariant), they are
    a function of the prompts and the config: `reproducible`."""

    dtype: str
    # Threads the engine computed with (None where it cannot be seen: an attached server, the fake).
    threads: int | None
    batch_invariant: bool
    reproducible: bool
    # The CPU it computed on (speclens/machine.py; None where that is not this machine): runs are
    # reproducible between machines of one cpu only.
    cpu: str | None = None
    # vLLM's model runner that computed every pass ("v1", "v2"; None where it cannot be seen: an
    # attached server, the fake): n-gram drafts differently on each (drafters/ngram.py).
    model_runner: str | None = None
    # The GPU it computed on: name, count, driver, cuda, torch, attention_backend, cuda_graphs
    # (runners/gpu_facts.py); None on a CPU or where it cannot be seen.
    gpu: dict[str, Any] | None = None
    # engine.kv_cache_dtype where it is not the model's own (an FP8 cache); absent otherwise.
    kv_cache_dtype: str | None = field(default=None, metadata=OMITTED_WHEN_NONE)

    @classmethod
    def of(
        cls,
        dtype: str,
        threads: int | None,
        batch_invariant: bool = False,
        cpu: str | None = None,
        model_runner: str | None = None,
        gpu: dict[str, Any] | None = None,
        kv_cache_dtype: str = "auto",
    ) -> "Numerics":
        reproducible = batch_invariant or dtype in REPRODUCIBLE_DTYPES
        kv = None if kv_cache_dtype == "auto" else kv_cache_dtype
        return cls(dtype, threads, batch_invariant, reproducible, cpu, model_runner, gpu, kv)


@record
class ReasoningSplit:
    """How a run's outputs were split into thinking and answer (speclens/segments.py)."""

    # How the boundary was found: "parser <name>" or "text '<end>'" (reasoning.*).
    boundary: str
    n_outputs: Count
    # Outputs in which thinking ended.
    n_closed: Count
    # Outputs that think to their end (cut by sampling.max_tokens): all thinking.
    n_unclosed: Count
    # Outputs with no thinking at all (all answer).
    n_without_thinking: Count


@record
class OperatingPoint(DomainPoint):
    """One batch size: acceptance, throughput, step costs and both speedups."""

    batch_size: Count = 0
    # Open-loop load (requests/s) when the pass ran at a request rate instead of B at a time.
    request_rate: NonNegative | None = None
    output_tokens_per_s: NonNegative = 0.0
    generate_s: Seconds = 0.0
    # Start to end of the pass: the engine's steps plus the harness between them.
    elapsed_s: Seconds = 0.0
    baseline_output_tokens_per_s: NonNegative | None = None
    # With repeats: the median repeat's speedup, the range over all repeats and each repeat's.
    speedup: float | None = None
    speedup_range: list[float] | None = None
    speedup_repeats: list[float] | None = None
    # Plain decoding's median TPOT over the speculative pass's, at the same B (what a user of the
    # served model feels; `speedup` is the throughput ratio).
    latency_speedup: float | None = None
    speedup_gap: float | None = None
    gap_above_tolerance: bool = False
    t_verif: StepTiming | None = None
    t_step: StepTiming | None = None
    t_verif_spec: StepTiming | None = None
    t_draft_ms: float | None = None
    lossless: LosslessCheck | None = None
    by_domain: dict[str, DomainPoint] = field(default_factory=dict)
    latency: Latency | None = None
    speedup_account: SpeedupAccount | None = None
    # Each length bucket (prompts that state their length), keyed by its label ("1k", "32k").
    by_length: dict[str, LengthPoint] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    # The most requests its speculative pass held in flight (engine steps), where that is not
    # batch_size: a length pass of fewer prompts than B, a pass of fewer requests (absent: B).
    batch_size_held: Count | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    # The idle pass's steady step T_idle(B) (speculation on, nothing proposed) and the K=0 tax
    # T_idle(B) / T_verif(B) − 1 with its quartile range (speclens/figures/costs.py; since version 12) ...
    t_idle: StepTiming | None = None
    k0_tax: float | None = None
    k0_tax_range: list[float] | None = None
    # ... and, where the baseline ran but the tax is null, why (a server, Model Runner V2, too few steps).
    k0_tax_note: str | None = field(default=None, metadata=OMITTED_WHEN_NONE)

    @property
    def held(self) -> int:
        """The requests in flight it measured: what B its figures are of."""
        return self.batch_size_held or self.batch_size


@record
class Fingerprints:
    target: str | None
    draft: str | None
    dataset: str | None


@record
class Timing:
    generate_s: Seconds
    output_tokens_per_s: NonNegative
    load_s: Seconds | None = None
    baseline_generate_s: Seconds | None = None
    baseline_output_tokens_per_s: NonNegative | None = None
    # Seconds of the untimed warm-up request each engine got before its pass (all passes together).
    warmup_s: Seconds | None = None


@record
class RunSummary:
    """Every headline figure of one run; written last, so a run dir without it is incomplete."""

    schema_version: int
    drafter: str
    d: DraftLength | None
    target: str
    dataset: str
    n_requests: Count
    al: AL | None
    al_ci95: list[AL] | None
    al_request_weighted: AL | None
    tokens_per_step: NonNegative | None
    per_position_acceptance: list[Rate] | None
    conditional_acceptance: list[Rate | None] | None
    acceptance_histogram: list[Count] | None
    al_by_position: list[PositionBin]
    n_steps: Count
    by_domain: dict[str, GroupFigures]
    vllm_counters: SpecCounters | None
    lossless: LosslessCheck | None
    speedup: float | None
    operating_points: list[OperatingPoint]
    timing: Timing
    versions: dict[str, str | None]
    fingerprints: Fingerprints
    git_sha: str | None
    # The runner that measured (runner=): required since version 3 (every earlier run was vLLM's).
    runner: str
    config_fingerprint: str | None = None
    # step: per-step records (per-position acceptance, histogram, AL by position); request: each
    # request's totals (AL and its interval, no per-position figures); domain: counter deltas of
    # one domain at a time (AL per domain, no interval).
    record_granularity: str = "step"
    # drafter.schedule: measured under vLLM's dynamic speculative decoding with this schedule
    # ([[start, end, k], ...]; d is its largest k).
    schedule: list[list[int]] | None = None
    numerics: Numerics | None = None
    # With a reasoning boundary: the figures per segment, and how the outputs were split.
    by_segment: dict[str, SegmentFigures] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    reasoning: ReasoningSplit | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    # On agent trajectories: the figures per assistant-turn index ("0", "1", ...).
    by_turn: dict[str, GroupFigures] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    # The spread of AL over the requests (speclens/figures/metrics.py al_spread); by_domain holds each domain's.
    al_per_request: dict[str, float] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    # What is odd about the run, with its evidence (speclens/figures/diagnostics.py); [] where nothing is.
    diagnostics: list[Diagnostic] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    # AL by generated-token index at each step's start (speclens/figures/metrics.py); by_domain holds each domain's.
    al_by_output_position: list[PositionBin] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    # AL over the tokens the outputs kept, and the accepted tokens AL counts (as vLLM's counters do)
    # that max_tokens or the end of sequence cut (step records only).
    al_emitted: AL | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    accepted_tokens_cut: Count | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    # Other tools' figures, each by its own formula over these records (speclens/figures/peer_figures.py).
    peer_figures: PeerFigures | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    # The figures per length bucket ("1k", "32k"), where the prompts state their lengths.
    by_length: dict[str, GroupFigures] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    # The window the target ran with, and the context extension where one was named.
    context_window: ContextWindow | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    # The share of target passes that verified a draft (docs/definitions.md#draft-share).
    draft_share: Rate | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    # Where drafts were accepted at set rates (acceptance.synthetic): AL set, not measured.
    synthetic_acceptance: SyntheticAcceptance | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    # What its figures are (absent before version 11: provenance_of reads it from the stamp).
    provenance: Provenance | None = field(default=None, metadata=OMITTED_WHEN_NONE)

    def provenance_of(self, stamp: dict[str, Any]) -> Provenance:
        """Its provenance as written, else as its stamp and figures say (summaries before 11)."""
        if self.provenance is not None:
            return self.provenance
        numerics = self.numerics
        lengths = [g.input_tokens for g in (self.by_length or {}).values() if g.input_tokens is not None]
        return of_stamp(
            stamp,
            runner=self.runner,
            synthetic=self.synthetic_acceptance is not None,
            dtype=numerics.dtype if numerics else None,
            model_runner=numerics.model_runner if numerics else None,
            batch_sizes=sorted({p.held for p in self.operating_points}),
            lengths=lengths,
            context_extension=self.context_window.extension if self.context_window else None,
        )

    @property
    def label(self) -> str:
        return self.mechanism + (f" d={self.d}" if self.d is not None else "")

    @property
    def mechanism(self) -> str:
        """The drafter, marked when it ran a draft-length schedule rather than a fixed D."""
        return self.drafter + (" (schedule)" if self.schedule else "")

    def groups(self) -> dict[str, GroupFigures]:
        """`all` (this summary's own figures) and every domain."""
        overall = GroupFigures(
            self.al,
            self.al_ci95,
            self.tokens_per_step,
            self.n_requests,
            self.n_steps,
            self.by_segment,
            self.al_per_request,
            self.al_by_output_position,
            draft_share=self.draft_share,
        )
        return {WHOLE_RUN_GROUP: overall} | self.by_domain

    def to_dict(self) -> dict[str, Any]:
        return to_plain(self)


@record
class ReplaySummary:
    drafter: str
    d_max: DraftLength
    fingerprints: Fingerprints
    # exact | estimated (drafters/base.py ReplayKind)
    replay: str
    elapsed_s: Seconds
    # The runner whose target outputs were replayed (version 1 wrote none: vLLM's).
    runner: str
    # Since replay.json version 2: what evals.replay recognises a finished replay by.
    config_fingerprint: str | None = None
    # Since version 3, for a head's replay (runners/head_chain.py): the chained drafts from the
    # positions a run drafts from whose top-2 logit margin is under the near-tie bound of the dtype
    # (speclens/lossless.py); only there can a measured run's kernels pick another draft. None: no head.
    near_ties: Count | None = None


@record
class ReplayRecord:
    """replay.json: what a replay measured (its curves are curves.parquet beside it)."""

    schema_version: int
    summary: ReplaySummary
    # The resolved config, as a run's stamp.json holds it.
    stamp: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return to_plain(self)
