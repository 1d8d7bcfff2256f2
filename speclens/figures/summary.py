"""summary.json and replay.json as typed records, with the one reader every report, nightly and
self-check uses.

The reader takes every schema version this project has written, migrating older layouts in
memory (`MIGRATIONS`), and refuses a newer version than it knows, naming both. Writers only
write the current version.

Schema versions of summary.json:
1  first release: no operating points, no AL by context position.
2  operating points (per batch size), AL by context position, the config fingerprint.
3  the runner that measured (`runner`: vllm | fake | ...).
4  latency per operating point (`operating_points[].latency`: TTFT, TPOT, ITL, end to end).
5  `record_granularity`: step | request | domain (how finely the engine reported acceptance).
6  `operating_points[].speedup_account` (the measured speedup as the model times named
   corrections) and, per domain, `predicted_corrected` with its range; `speedup_range` and
   `speedup_repeats` (repeats=N); `timing.warmup_s`; `schedule` (drafter.schedule);
   `lossless.mismatches` (each explained as a near-tie or a divergence) with their counts.
7  `numerics`: the engine's dtype, its thread count and batch-invariant kernels, the CPU, and
   whether its greedy outputs are a fixed function of the config (`reproducible`).
8  with a reasoning boundary (reasoning.*): `by_segment` (thinking, answer), overall and under
   every domain, and `reasoning` (how the boundary was found, how many outputs closed thinking);
   both absent otherwise. On agent trajectories (dataset=agentic): `by_turn`, the figures per
   assistant-turn index of the trajectories; absent otherwise.
9  `context_window` (the target's own window, the engine's max_model_len and any context
   extension it ran with); where the prompts state their lengths (long context, SPEED-Bench's
   throughput splits), `by_length` overall and under every operating point, each length with its
   own throughput, step costs and speedup (the pass runs one length at a time); absent otherwise.
10 `draft_share` (drafted steps / target passes), overall and in every group's figures
   (domains, lengths, turns); absent where the passes were not counted. `synthetic_acceptance`
   where drafts were accepted at set rates (acceptance.synthetic): its AL is set, not measured,
   and no lossless check was made; absent otherwise.
11 `provenance` (speclens/provenance.py): what the run's figures are (measured, synthetic, fake),
   the engine, dtype and model runner that computed them, the settings axis, the requests held in
   flight, the lengths and any context extension; and, per operating point and length, the
   requests held in flight (`batch_size_held`). Read from the stamp for older summaries.
12 the K=0 tax, per operating point and length: `t_idle` (the steady step of the idle pass:
   speculation on at D, nothing proposed at any step), `k0_tax` = T_idle(B) / T_verif(B) − 1 and
   `k0_tax_range` (both at opposite quartiles); null where no idle pass ran beside the baseline,
   with the reason in `k0_tax_note` (a server, Model Runner V2, too few steady steps); and
   `speedup_account.k0_tax` / `k0_tax_share` beside the factors. All absent (None) before 12.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from speclens.errors import CorruptRecord, SpeclensError
from speclens.figures.account import SpeedupAccount
from speclens.figures.costs import StepTiming
from speclens.figures.diagnostics import Diagnostic
from speclens.figures.latency import Latency
from speclens.figures.metrics import OMITTED_WHEN_NONE, GroupFigures, PositionBin, SegmentFigures
from speclens.figures.peer_figures import PeerFigures
from speclens.files import non_finite_at, numbers_at, write_json_atomic
from speclens.generation import SpecCounters
from speclens.provenance import Provenance, of_stamp

SUMMARY_FILE = "summary.json"
# The group of every request, beside the domains in by_domain, curves.csv and the tables: no prompt
# set's category may take its name (evals/datasets/selection.py check_group_names).
WHOLE_RUN_GROUP = "all"
RESERVED_GROUP_NAMES = frozenset({WHOLE_RUN_GROUP})
SUMMARY_VERSION = 12
REPLAY_FILE = "replay.json"
# replay.json: 1 had no version field (summary and stamp only); 2 carries `schema_version`, the
# config fingerprint and the runner; 3 a head replay's `near_ties`.
REPLAY_VERSION = 3


@dataclass
class DomainPoint(GroupFigures):
    """A group's figures at one operating point, with the speedup the step costs predict."""

    predicted_speedup: float | None = None
    predicted_speedup_range: list[float] | None = None
    # The prediction times the operating point's measured corrections (speclens/figures/account.py).
    predicted_corrected: float | None = None
    predicted_corrected_range: list[float] | None = None


@dataclass
class LengthPoint(DomainPoint):
    """A length bucket at one operating point: its acceptance (GroupFigures' length fields), and
    what its own steps measured, since a pass runs one length at a time: throughput, the step
    costs (speclens/figures/costs.py) and, with a baseline, the measured speedup."""

    output_tokens_per_s: float | None = None
    baseline_output_tokens_per_s: float | None = None
    speedup: float | None = None
    t_verif: StepTiming | None = None
    t_step: StepTiming | None = None
    t_verif_spec: StepTiming | None = None
    t_draft_ms: float | None = None
    # The most requests this length's pass held in flight, where that is not the point's B.
    batch_size_held: int | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    # The idle pass's step and the K=0 tax at this length (speclens/figures/costs.py; since version 12).
    t_idle: StepTiming | None = None
    k0_tax: float | None = None
    k0_tax_range: list[float] | None = None


@dataclass
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


@dataclass
class Mismatch:
    """A greedy output that differs from plain decoding: where, plain decoding's top-2 margin
    there, and why (speclens/lossless.py: near_tie | divergence | unexplained)."""

    request_id: str
    turn: int
    batch_size: int
    first_divergence: int
    top2_margin: float | None
    classification: str


@dataclass
class LosslessCheck:
    """Greedy speculative outputs against plain decoding, token for token."""

    checked: bool
    identical: bool | None
    n_compared: int
    n_identical: int
    mismatched: list[str]
    # Each mismatch explained (at most MISMATCHES_SHOWN), and the counts of each kind.
    mismatches: list[Mismatch] = field(default_factory=list)
    n_near_ties: int = 0
    n_divergences: int = 0
    # The dtype the engine ran in and its near-tie bound (top-2 log-probability margin).
    dtype: str | None = None
    near_tie_bound: float | None = None


@dataclass
class SyntheticAcceptance:
    """Drafts accepted at set rates by vLLM's synthetic rejection sampler (acceptance.synthetic):
    the run's speed is the drafter's at this acceptance, its AL is set, not measured."""

    # The marginal per-position rates, as vLLM's synthetic_acceptance_rates takes them.
    rates: list[float]
    # 1 + the sum of the rates: the AL the sampler draws toward.
    expected_al: float
    # "given" (the command line), or the profile the rates were read from.
    source: str
    # Accepted drafts are emitted whether or not the target agrees: outputs are not its own.
    lossless_check: str = "not made: synthetic acceptance emits drafts the target did not choose"


# Dtypes in which greedy decoding on CPU gives the same tokens whatever the thread count and batch
# shape: a top-2 margin small enough for their rounding to flip (speclens/lossless.py) is rare enough
# that no check of this project has met one.
REPRODUCIBLE_DTYPES = frozenset({"float32", "float"})


@dataclass
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


@dataclass
class ReasoningSplit:
    """How a run's outputs were split into thinking and answer (speclens/segments.py)."""

    # How the boundary was found: "parser <name>" or "text '<end>'" (reasoning.*).
    boundary: str
    n_outputs: int
    # Outputs in which thinking ended.
    n_closed: int
    # Outputs that think to their end (cut by sampling.max_tokens): all thinking.
    n_unclosed: int
    # Outputs with no thinking at all (all answer).
    n_without_thinking: int


@dataclass
class OperatingPoint(DomainPoint):
    """One batch size: acceptance, throughput, step costs and both speedups."""

    batch_size: int = 0
    # Open-loop load (requests/s) when the pass ran at a request rate instead of B at a time.
    request_rate: float | None = None
    output_tokens_per_s: float = 0.0
    generate_s: float = 0.0
    # Start to end of the pass: the engine's steps plus the harness between them.
    elapsed_s: float = 0.0
    baseline_output_tokens_per_s: float | None = None
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
    batch_size_held: int | None = field(default=None, metadata=OMITTED_WHEN_NONE)
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


@dataclass
class Fingerprints:
    target: str | None
    draft: str | None
    dataset: str | None


@dataclass
class Timing:
    generate_s: float
    output_tokens_per_s: float
    load_s: float | None = None
    baseline_generate_s: float | None = None
    baseline_output_tokens_per_s: float | None = None
    # Seconds of the untimed warm-up request each engine got before its pass (all passes together).
    warmup_s: float | None = None


@dataclass
class RunSummary:
    """Every headline figure of one run; written last, so a run dir without it is incomplete."""

    schema_version: int
    drafter: str
    d: int | None
    target: str
    dataset: str
    n_requests: int
    al: float | None
    al_ci95: list[float] | None
    al_request_weighted: float | None
    tokens_per_step: float | None
    per_position_acceptance: list[float] | None
    conditional_acceptance: list[float | None] | None
    acceptance_histogram: list[int] | None
    al_by_position: list[PositionBin]
    n_steps: int
    by_domain: dict[str, GroupFigures]
    vllm_counters: SpecCounters | None
    lossless: LosslessCheck | None
    speedup: float | None
    operating_points: list[OperatingPoint]
    timing: Timing
    versions: dict[str, str | None]
    fingerprints: Fingerprints
    git_sha: str | None
    config_fingerprint: str | None = None
    runner: str = "vllm"
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
    al_emitted: float | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    accepted_tokens_cut: int | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    # Other tools' figures, each by its own formula over these records (speclens/figures/peer_figures.py).
    peer_figures: PeerFigures | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    # The figures per length bucket ("1k", "32k"), where the prompts state their lengths.
    by_length: dict[str, GroupFigures] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    # The window the target ran with, and the context extension where one was named.
    context_window: ContextWindow | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    # The share of target passes that verified a draft (docs/definitions.md#draft-share).
    draft_share: float | None = field(default=None, metadata=OMITTED_WHEN_NONE)
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

    def write(self, run_dir: Path) -> None:
        write_json_atomic(self.to_dict(), run_dir / SUMMARY_FILE)


@dataclass
class ReplaySummary:
    drafter: str
    d_max: int
    fingerprints: Fingerprints
    # exact | estimated (drafters/base.py ReplayKind)
    replay: str
    elapsed_s: float
    # Since replay.json version 2: what evals.replay recognises a finished replay by.
    config_fingerprint: str | None = None
    runner: str = "vllm"
    # Since version 3, for a head's replay (runners/head_chain.py): the chained drafts from the
    # positions a run drafts from whose top-2 logit margin is under the near-tie bound of the dtype
    # (speclens/lossless.py); only there can a measured run's kernels pick another draft. None: no head.
    near_ties: int | None = None


@dataclass
class ReplayRecord:
    """replay.json: what a replay measured (its curves are curves.parquet beside it)."""

    schema_version: int
    summary: ReplaySummary
    # The resolved config, as a run's stamp.json holds it.
    stamp: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return to_plain(self)

    def write(self, run_dir: Path) -> None:
        write_json_atomic(self.to_dict(), run_dir / REPLAY_FILE)


# -- plain JSON <-> typed ----------------------------------------------------------------------

# JSON keys that are Python keywords are held with a trailing underscore.
_KEYWORDS = {"from_": "from"}


def to_plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {
            _KEYWORDS.get(f.name, f.name): to_plain(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not (f.metadata.get("omit_when_none") and getattr(value, f.name) is None)
        }
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    return value


def from_plain(kind: Any, value: Any, where: str) -> Any:
    """`value` (parsed JSON) as `kind` (a dataclass, container or scalar type hint)."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (types.UnionType, typing.Union):
        if value is None:
            return None
        return from_plain(next(a for a in args if a is not type(None)), value, where)
    if origin is list:
        return [from_plain(args[0], v, f"{where}[{i}]") for i, v in enumerate(_expect(value, list, where))]
    if origin is dict:
        return {k: from_plain(args[1], v, f"{where}.{k}") for k, v in _expect(value, dict, where).items()}
    if dataclasses.is_dataclass(kind):
        data = _expect(value, dict, where)
        hints = typing.get_type_hints(kind)
        names = {_KEYWORDS.get(f.name, f.name): f.name for f in dataclasses.fields(kind)}
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise SpeclensError(f"{where}: unknown key(s) {', '.join(unknown)}")
        return kind(**{names[k]: from_plain(hints[names[k]], v, f"{where}.{k}") for k, v in data.items()})
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is Any or isinstance(value, kind):
        return value
    raise SpeclensError(f"{where}: expected {getattr(kind, '__name__', kind)}, found {value!r}")


def _expect(value: Any, kind: type, where: str) -> Any:
    if not isinstance(value, kind):
        raise SpeclensError(f"{where}: expected {kind.__name__}, found {type(value).__name__}")
    return value


# -- reading any version ------------------------------------------------------------------------


def _summary_1_to_2(data: dict[str, Any]) -> dict[str, Any]:
    return {"al_by_position": [], "operating_points": [], "config_fingerprint": None, **data}


def _summary_2_to_3(data: dict[str, Any]) -> dict[str, Any]:
    # Early version-2 runs predate AL by context position; runs before version 3 were all vLLM's.
    return {"al_by_position": [], "config_fingerprint": None, **data, "runner": "vllm"}


def _summary_3_to_4(data: dict[str, Any]) -> dict[str, Any]:
    return data  # latency was not measured: operating points keep latency = null


def _summary_4_to_5(data: dict[str, Any]) -> dict[str, Any]:
    return data | {"record_granularity": "step"}  # every earlier runner recorded every step


def _summary_5_to_6(data: dict[str, Any]) -> dict[str, Any]:
    return data  # no account was kept: operating points keep speedup_account = null


def _summary_6_to_7(data: dict[str, Any]) -> dict[str, Any]:
    return data  # the engine's numerics were not recorded: numerics = null


def _summary_7_to_8(data: dict[str, Any]) -> dict[str, Any]:
    return data  # no reasoning boundary could be configured: no by_segment, no reasoning


def _summary_8_to_9(data: dict[str, Any]) -> dict[str, Any]:
    return data  # no length buckets, and the window was not recorded: no by_length, no context_window


def _summary_9_to_10(data: dict[str, Any]) -> dict[str, Any]:
    return data  # the share of drafting steps was not recorded: draft_share absent (None)


def _summary_10_to_11(data: dict[str, Any]) -> dict[str, Any]:
    return data  # provenance absent: read from the stamp (RunSummary.provenance_of)


def _summary_11_to_12(data: dict[str, Any]) -> dict[str, Any]:
    return data  # no idle pass ran: t_idle, k0_tax and the account's k0 figures absent (None)


# version -> the step from that version to the next.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    1: _summary_1_to_2,
    2: _summary_2_to_3,
    3: _summary_3_to_4,
    4: _summary_4_to_5,
    5: _summary_5_to_6,
    6: _summary_6_to_7,
    7: _summary_7_to_8,
    8: _summary_8_to_9,
    9: _summary_9_to_10,
    10: _summary_10_to_11,
    11: _summary_11_to_12,
}


def _read_json(path: Path) -> dict[str, Any]:
    """A record's JSON object; a non-finite figure (NaN, Infinity) makes it corrupt: no figure
    speclens writes can be one, and downstream arithmetic would carry it silently."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))  # NaN and Infinity read as floats, found below
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptRecord(f"{path} is unreadable ({exc})") from None
    if not isinstance(data, dict):
        raise CorruptRecord(f"{path} is not a JSON object")
    key = non_finite_at(data)
    if key is not None:
        raise CorruptRecord(f"{path} holds a non-finite figure at {key}: a corrupt record; measure the run again")
    return data


def _migrated(path: Path, data: dict[str, Any], current: int, steps: dict[int, Callable]) -> dict[str, Any]:
    version = data.get("schema_version")
    if not isinstance(version, int) or version < 1:
        raise CorruptRecord(f"{path} has no valid schema_version ({version!r})")
    if version > current:
        raise SpeclensError(
            f"{path}: schema version {version} is newer than this speclens reads (up to {current}); "
            "upgrade speclens to read it."
        )
    while version < current:
        data = steps[version](data) | {"schema_version": version + 1}
        version += 1
    return data


def read_summary(run_dir: Path) -> RunSummary:
    """The run's summary.json in the current layout, whatever version wrote it."""
    path = run_dir / SUMMARY_FILE
    data = _migrated(path, _read_json(path), SUMMARY_VERSION, MIGRATIONS)
    summary = _typed(RunSummary, data, path)
    check_ranges(data, path)
    return summary


# The figures a summary holds by name (the last key of their path), and the range each must lie in:
# a layout of the right types can still hold an AL of 0.5, a rate above 1 or a negative count.
# (Tokens per step is left out: a segment's, thinking or answer, can pass 1 + d where a step
# straddles the boundary.)
AT_MOST_1_PLUS_D = ("al", "al_ci95", "al_request_weighted", "al_emitted")
RATES = ("per_position_acceptance", "conditional_acceptance", "draft_share", "rates")
COUNTS = (
    "acceptance_histogram", "n", "n_requests", "n_steps", "n_compared", "n_identical", "n_near_ties",
    "n_divergences", "num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos",
    "accepted_tokens_cut",
)  # fmt: skip
STEP_TIMES = ("median_ms", "p25_ms", "p75_ms")


def check_ranges(data: dict[str, Any], path: Path) -> None:
    """Every figure of `data` (a summary, parsed) in its range, else a CorruptRecord naming the
    field and the rule: an AL in [1, 1 + d], a rate in [0, 1], a count a
    whole number >= 0, a step time >= 0, d a whole number >= 1."""
    d = data.get("d")
    top = 1 + d if isinstance(d, int) and not isinstance(d, bool) else float("inf")
    for key, value in numbers_at(data):
        name = key.rsplit(".", 1)[-1].split("[", 1)[0]
        if name in AT_MOST_1_PLUS_D:
            broken = not 1 - 1e-9 <= value <= top + 1e-9
            rule = f"an AL is in [1, 1 + d] = [1, {top:g}]"
        elif name in RATES:
            broken, rule = not 0 <= value <= 1, "a rate is in [0, 1]"
        elif name in COUNTS or key == "d":
            low = 1 if key == "d" else 0
            broken, rule = value != int(value) or value < low, f"a count is a whole number >= {low}"
        elif name in STEP_TIMES:
            broken, rule = value < 0, "a step time is >= 0 ms"
        else:
            continue
        if broken:
            raise CorruptRecord(f"{path}: field {key}={value!r}: {rule}; a corrupt record, measure the run again")


def _replay_1_to_2(data: dict[str, Any]) -> dict[str, Any]:
    """Also 2 -> 3: each added only fields with defaults (near_ties: None, no head counted)."""
    return data


def read_replay(run_dir: Path) -> ReplayRecord:
    path = run_dir / REPLAY_FILE
    data = _read_json(path)
    data = {"schema_version": 1, **data}  # version 1 wrote none
    data = _migrated(path, data, REPLAY_VERSION, {1: _replay_1_to_2, 2: _replay_1_to_2})
    return _typed(ReplayRecord, data, path)


def _typed(kind: type, data: dict[str, Any], path: Path) -> Any:
    try:
        return from_plain(kind, data, path.name)
    except (SpeclensError, TypeError, ValueError) as exc:
        raise CorruptRecord(f"{path} does not have the layout of a {kind.__name__} ({exc})") from None
