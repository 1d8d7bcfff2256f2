"""What a figure is: where it came from (measured, synthetic, fake, replayed, estimated, derived,
predicted), which engine computed it and under what (runner, version, dtype, model runner, the
settings axis, the requests held in flight, the prompt lengths, a context extension).

One record, written into every file that holds figures (summary.json, speculation profiles,
curves, ranking rows, serve.json, whatif.json, wandb) and read by every report: two figures are
paired, or one chosen over another, only where their identity (IDENTITY_FIELDS) agrees but for the
axis under study, and a figure that was not measured never headlines as measured.
"""

from __future__ import annotations

import json
from dataclasses import asdict, field, replace
from typing import Any, Iterable

from speclens.errors import SpeclensError
from speclens.schema import record

# Acceptance measured by the target verifying a real drafter's drafts.
MEASURED = "measured"
# Drafts accepted at rates the user set (acceptance.synthetic): a drafter's speed at that acceptance.
SYNTHETIC = "synthetic"
# The scripted engine (runner=fake): figures of a script, not of a model.
FAKE = "fake"
# Acceptance replayed exactly from recorded target outputs (evals.replay, exact drafters).
REPLAYED = "replayed"
# Replayed where the drafter's proposals are approximated (evals.replay, estimated drafters).
ESTIMATED = "estimated"
# Computed from a figure measured elsewhere (AL at a smaller D from the rates measured at a larger one).
DERIVED = "derived"
# The speedup model's or the GPU model's prediction.
PREDICTED = "predicted"
SOURCES = (MEASURED, SYNTHETIC, FAKE, REPLAYED, ESTIMATED, DERIVED, PREDICTED)

# The runners whose engine is vLLM itself (in process, or its OpenAI server).
VLLM_RUNNERS = ("vllm", "server")

# What must agree for two figures to be paired or one chosen over another, in the order a label
# names them. `setting` is the settings axis (SETTING_KEYS below) and is compared by
# the reader that studies it.
IDENTITY_FIELDS = ("source", "runner", "engine", "dtype", "model_runner", "setting")
# How a label names each field: as the command line names the key where there is one.
FIELD_NAMES = {
    "source": "source",
    "runner": "runner",
    "engine": "engine",
    "dtype": "engine.dtype",
    "model_runner": "engine.model_runner",
    "setting": "setting",
}
# The columns every table speclens hands out carries beside its figures (read_sweep's frames,
# curves, ranking rows): what each row is.
IDENTITY_COLUMNS = IDENTITY_FIELDS
# An identity field a record does not know (an attached server's model runner, the fake's), in a table.
UNKNOWN = "unknown"


@record
class Provenance:
    """What one figure (or every figure of one record) is."""

    source: str
    runner: str
    # The engine that computed it ("vllm", "fake", a server's dialect) and its version.
    engine: str | None = None
    engine_version: str | None = None
    dtype: str | None = None
    # vLLM's model runner that computed every pass ("v1", "v2"), else what the config asked for.
    model_runner: str | None = None
    # The settings changed from their defaults (reports/runs.py setting_label; '': none).
    setting: str = ""
    # The requests held in flight at each operating point (what the engine steps show).
    batch_sizes: list[int] = field(default_factory=list)
    # The prompt lengths (input tokens) where the prompts state them; [] otherwise.
    lengths: list[int] = field(default_factory=list)
    # e.g. "yarn x4.0 from 8192" where the target ran past its own window; None otherwise.
    context_extension: str | None = None

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"source {self.source!r} is not one of {', '.join(SOURCES)}")

    @property
    def measured(self) -> bool:
        return self.source == MEASURED

    def identity(self, but: tuple[str, ...] = ()) -> tuple[Any, ...]:
        """Its IDENTITY_FIELDS' values, but for those in `but` (the axis under study)."""
        return tuple(getattr(self, name) for name in IDENTITY_FIELDS if name not in but)

    def but(self, **changes: Any) -> Provenance:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def columns(self) -> dict[str, str]:
        """Its IDENTITY_COLUMNS, as a table's row carries them: never null, so that a groupby over
        them keeps every row (a field the record does not know is `unknown`; setting '': defaults)."""
        return {name: UNKNOWN if getattr(self, name) is None else str(getattr(self, name)) for name in IDENTITY_COLUMNS}

    def label(self) -> str:
        """One line: `measured (vllm 0.32.0, bfloat16, v1)`, `fake (scripted engine)`, ..."""
        if self.source == FAKE:
            return "fake (scripted engine, runner=fake)"
        engine = " ".join(p for p in (self.engine, self.engine_version) if p)
        parts = [p for p in (engine, self.dtype, self.model_runner, self.setting, self.extension_label()) if p]
        return f"{self.source} ({', '.join(parts)})" if parts else self.source

    def identity_label(self) -> str:
        """Every identity field it states, as the command line names it: `source=fake, runner=fake,
        engine=fake, engine.dtype=bfloat16, setting=kv_cache_dtype=fp8`."""
        return ", ".join(field_label(self, name) for name in IDENTITY_FIELDS if getattr(self, name) not in (None, ""))

    def extension_label(self) -> str:
        return f"context extended: {self.context_extension}" if self.context_extension else ""


def from_dict(data: dict[str, Any]) -> Provenance:
    known = {k: v for k, v in data.items() if k in Provenance.__dataclass_fields__}
    return Provenance(**known)


def derived_from(source: str) -> str:
    """The source of a figure derived from one of `source`: `derived`, or `derived from fake` where
    what it came from was not measured either (a derivation never launders its source)."""
    return DERIVED if source == MEASURED else f"{DERIVED} from {source}"


def is_derived(source: str) -> bool:
    return source.split(" ", 1)[0] == DERIVED


def mark(source: str) -> str:
    """What a figure's headline carries beside it: '' for a measured figure, ` [fake]` otherwise."""
    return "" if source == MEASURED else f" [{source}]"


def differences(a: Provenance, b: Provenance, fields: tuple[str, ...] = IDENTITY_FIELDS) -> list[str]:
    """Every identity field two figures differ in, each with both values, in label order:
    ["runner: fake vs vllm", "engine.dtype: float32 vs bfloat16"] (the engine where the runners
    agree: a different runner says it already)."""
    return [
        f"{FIELD_NAMES[name]}: {_shown(getattr(a, name))} vs {_shown(getattr(b, name))}"
        for name in fields
        if getattr(a, name) != getattr(b, name) and not (name == "engine" and a.runner != b.runner)
    ]


# The identity fields a label names where the figures read together differ in them (the settings
# axis is named always, as changed from its defaults).
LABELLED_FIELDS = ("source", "runner", "engine", "dtype", "model_runner")


def check_one_identity(frame: Any, what: str = "these rows") -> None:
    """Refuse a table (a pandas frame) that pools rows of different identities: a figure over it
    would be one of no run (docs/api.md). Tables without identity columns are one run's own."""
    mixed = []
    for name in IDENTITY_COLUMNS:
        if name in getattr(frame, "columns", ()):
            values = sorted({str(v) for v in frame[name].dropna().unique()})
            if len(values) > 1:
                mixed.append(f"{FIELD_NAMES[name]}: {', '.join(v or 'defaults' for v in values)}")
    if mixed:
        raise SpeclensError(
            f"{what} pool runs of different identities ({'; '.join(mixed)}): a figure over them is no run's. "
            f"Group by {', '.join(IDENTITY_COLUMNS)} as well (speclens.IDENTITY_COLUMNS), or select one."
        )


def mixed_fields(found: Iterable[Provenance | None], fields: tuple[str, ...] = LABELLED_FIELDS) -> tuple[str, ...]:
    """The fields among `fields` that the records differ in; a field a record does not say (None) is
    unknown there, not one more value."""
    known = [p for p in found if p is not None]

    def mixed(name: str) -> bool:
        if name == "engine":  # named only where one runner met several engines (servers of each kind)
            return any(len({p.engine for p in known if p.runner == r} - {None}) > 1 for r in {p.runner for p in known})
        return len({getattr(p, name) for p in known} - {None}) > 1

    return tuple(name for name in fields if mixed(name))


def label_among(found: Provenance, shown: tuple[str, ...]) -> str:
    """`runner=fake, engine.dtype=float32, kv_cache_dtype=fp8`: the `shown` fields (mixed_fields of
    the records read with it), then its setting ('' for none)."""
    return ", ".join([field_label(found, name) for name in shown] + ([found.setting] if found.setting else []))


def field_label(found: Provenance, name: str) -> str:
    """`engine.dtype=float32`: one identity field as a setting label names it."""
    return f"{FIELD_NAMES[name]}={_shown(getattr(found, name))}"


def _shown(value: Any) -> str:
    if value == "":
        return "defaults"
    return value if isinstance(value, str) else json.dumps(value)


def source_of(runner: str, synthetic: bool, replay_kind: str | None = None) -> str:
    """The source of a run's acceptance figures: set rates, the scripted engine (a replay of its
    outputs too: a script's, not a model's), a replay's kind, or measured."""
    if synthetic:  # set rates, whatever engine drew them
        return SYNTHETIC
    if runner == FAKE:
        return FAKE
    if replay_kind is not None:
        return REPLAYED if replay_kind == "exact" else ESTIMATED
    return MEASURED


def engine_of(runner: str) -> str:
    return "vllm" if runner in VLLM_RUNNERS else runner


# Settings that are an axis of their own (issue 49: the KV cache, verification, draft sampling,
# parallel drafting, the checkpoints' quantization), like the temperature and the chat template: a
# run's setting names those it changed from the default, and curves, rankings and serve.json hold
# one line per setting; the report pairs each against the default's run (reports/settings.py).
# Dotted as a stamp holds them (`config.` the resolved config, `quantization.` the checkpoints').
SETTING_KEYS = {
    "config.engine.kv_cache_dtype": "kv_cache_dtype",
    "config.verify.method": "verify.method",
    # verify.draft_sampling is stored as drafter.sample_method (evals/pipeline/verify.py fold_draft_sampling).
    "config.drafter.sample_method": "verify.draft_sampling",
    "config.drafter.parallel_drafting": "drafter.parallel_drafting",
    # The checkpoints' weight quantization, from their config.json (stamp.json `quantization`).
    "quantization.target": "target.quantization",
    "quantization.draft": "drafter.quantization",
}
# Each setting's default (also what a stamp from before the key existed meant).
SETTING_DEFAULTS: dict[str, Any] = {
    "config.engine.kv_cache_dtype": "auto",
    "config.verify.method": "standard",
    # A drafter without probabilities (n-gram, suffix) drafts as greedy drafting does: one-hot.
    "config.drafter.sample_method": "greedy",
    "config.drafter.parallel_drafting": False,
    # Unquantized checkpoints (stamps before the stamp said).
    "quantization.target": None,
    "quantization.draft": None,
}


def setting_label(values: dict[str, Any]) -> str:
    """`kv_cache_dtype=fp8, verify.method=block`: the SETTING_KEYS (dotted) a run changed from their
    defaults, by their short names ('': every default)."""
    changed = [
        f"{name}={values[key] if isinstance(values[key], str) else json.dumps(values[key])}"
        for key, name in SETTING_KEYS.items()
        if values.get(key) is not None and values[key] != SETTING_DEFAULTS[key]
    ]
    return ", ".join(changed)


def _dotted(node: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def config_setting(config: dict[str, Any], quantization: dict[str, Any] | None = None) -> str:
    """setting_label of a resolved run config (a stamp's `config`) and its checkpoints'
    quantization (a stamp's `quantization`)."""
    found = {"config": config, "quantization": quantization or {}}
    return setting_label({key: _dotted(found, key) for key in SETTING_KEYS})


def of_stamp(
    stamp: dict[str, Any],
    *,
    runner: str,
    synthetic: bool = False,
    replay_kind: str | None = None,
    dtype: str | None = None,
    model_runner: str | None = None,
    batch_sizes: list[int] | None = None,
    lengths: list[int] | None = None,
    context_extension: str | None = None,
) -> Provenance:
    """A run's (or replay's) provenance from its stamp and what its engine reported: the dtype and
    model runner that computed it where known, else what the config asked for."""
    config = stamp.get("config") or {}
    engine = config.get("engine") or {}
    versions = stamp.get("versions") or {}
    asked_runner = engine.get("model_runner")
    # the engine as it named itself (a server's own, since issue 66), else the runner's
    served = stamp.get("served_by") if isinstance(stamp.get("served_by"), dict) else {}
    return Provenance(
        source=source_of(runner, synthetic, replay_kind),
        runner=runner,
        engine=served.get("engine") or engine_of(runner),
        engine_version=served.get("version") if served else (None if runner == FAKE else versions.get("vllm")),
        dtype=dtype or engine.get("dtype"),
        # what ran (the stamp's `model_runner`, written once the engine said), else what was asked
        model_runner=model_runner
        or stamp.get("model_runner")
        or (None if asked_runner in (None, "auto") else asked_runner),
        setting=config_setting(config, stamp.get("quantization")),
        batch_sizes=sorted(batch_sizes or []),
        lengths=sorted(lengths or []),
        context_extension=context_extension,
    )
