"""Finding and reading finished runs (run dirs holding summary.json) and replays under a folder."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Collection, Hashable, Iterable, Sequence, TypeVar

from speclens import provenance as prov
from speclens.errors import SpeclensError
from speclens.figures.summary import Fingerprints, ReplayRecord, RunSummary
from speclens.file_formats.run_files import holding, read_stamp
from speclens.file_formats.summary_file import REPLAY_FILE, SUMMARY_FILE, read_replay, read_summary
from speclens.options import dotted_get
from speclens.provenance import SETTING_DEFAULTS, SETTING_KEYS, Provenance, setting_label

# What must be the same across runs that are drawn or ranked together.
CONSISTENT_KEYS = (
    "fingerprints.target",
    "fingerprints.dataset",
    "config.sampling.temperature",
    "config.sampling.top_p",
    "config.sampling.max_tokens",
    "config.seed",
    # Where thinking ends: segment figures split one way only.
    "config.reasoning",
)
# Keys added to run configs after runs were first stored, with the value older stamps meant.
LATER_KEY_DEFAULTS: dict[str, Any] = {
    "config.reasoning": {"parser": None, "end": None, "start": None},
    "config.chat_template_kwargs": {},
    "config.engine.model_runner": "auto",
    **SETTING_DEFAULTS,
}


@dataclass(frozen=True)
class RecordView:
    """A run or a replay: where it is, what it measured with (fingerprints) and its stamp."""

    path: Path
    fingerprints: Fingerprints
    stamp: dict[str, Any]
    # The identity fields its setting names beside the settings axis (shown_identity).
    shown: tuple[str, ...] = field(default=(), kw_only=True)
    # Whether the runs read with it differ in their source (measured, fake, synthetic, replayed): its
    # label names it then (a source is no axis: replayed points fill in a measured curve).
    shown_source: bool = field(default=False, kw_only=True)
    # Where its name and setting are another's too (the same mechanism and D measured twice under
    # one identity): its dir, which tells them apart in every view ('' otherwise).
    tag: str = field(default="", kw_only=True)

    @property
    def provenance(self) -> Provenance:
        raise NotImplementedError

    @property
    def name(self) -> str:
        """What it measured: the mechanism and D (a replay: its drafter's curve)."""
        raise NotImplementedError

    @property
    def label(self) -> str:
        """How every view names it: what it measured, then each identity field and setting the
        runs shown with it differ in, then its dir where that alone tells it from another:
        `ngram d=3 (source=fake, runner=fake, kv_cache_dtype=fp8)`."""
        return self.name + self.qualifier

    @property
    def qualifier(self) -> str:
        """What its label adds to what it measured: ` (source=fake, engine.dtype=float32) [dir]`."""
        parts = [*([prov.field_label(self.provenance, "source")] if self.shown_source else []), self.setting]
        named = ", ".join(p for p in parts if p)
        return (f" ({named})" if named else "") + (f" [{self.tag}]" if self.tag else "")

    @property
    def temperature(self) -> float:
        """The sampling temperature it was measured at (0: greedy)."""
        return float(self.get("config.sampling.temperature") or 0.0)

    @property
    def template(self) -> str:
        """The chat_template_kwargs it rendered prompts with, as `key=value, ...` ('': the
        template's defaults). Like the temperature, an axis: runs in different modes (thinking on,
        off) are never drawn in one curve or ranked in one table."""
        return template_label(self.get("config.chat_template_kwargs") or {})

    @property
    def axis_setting(self) -> str:
        """The settings it changed from their defaults (setting_label; '': none)."""
        return setting_label({key: self.get(key) for key in SETTING_KEYS})

    @property
    def setting(self) -> str:
        """The settings it changed from their defaults, and the identity fields the runs read with
        it differ in (shown_identity): an axis like the temperature. Runs with an FP8 KV cache, or
        on the fake engine, are never drawn in one curve with the defaults' real ones."""
        found = self.provenance
        identity = [prov.field_label(found, name) for name in self.shown]
        return ", ".join([*identity, *([self.axis_setting] if self.axis_setting else [])])

    def get(self, dotted: str) -> Any:
        node = dotted_get(
            {
                "fingerprints": asdict(self.fingerprints),
                "config": self.stamp.get("config", {}),
                "quantization": self.stamp.get("quantization") or {},
            },
            dotted,
        )
        return LATER_KEY_DEFAULTS.get(dotted) if node is None else node


def template_label(kwargs: dict[str, Any]) -> str:
    """chat_template_kwargs as `key=value, ...` (JSON values, keys sorted; '' for none)."""
    return ", ".join(f"{k}={json.dumps(v, sort_keys=True)}" for k, v in sorted(kwargs.items()))


# Runs at different sampling temperatures are one more axis of curves and rankings, not a conflict.
CONSISTENT_ACROSS_TEMPERATURES = tuple(k for k in CONSISTENT_KEYS if k != "config.sampling.temperature")
# The identity fields (speclens/provenance.py) a setting label names where the runs read together
# differ in them: the settings axis itself is named always, as changed from its defaults.
SHOWN_WHEN_MIXED = tuple(name for name in prov.LABELLED_FIELDS if name != "source")


def shown_identity(runs: Sequence[M]) -> list[M]:
    """`runs`, each naming in its `setting` every identity field (SHOWN_WHEN_MIXED) the runs differ
    in: a fake run beside a vLLM one, a float32 run beside a bfloat16 one, are lines and rows of
    their own, labelled so. Their labels also name the source where the runs differ in it (a
    synthetic run beside a fake one), and runs that would still share a label are tagged with
    their dirs."""
    # a field a record does not say (a replay's model runner) is unknown, not one more value
    found = [r.provenance for r in runs]
    mixed = prov.mixed_fields(found, SHOWN_WHEN_MIXED)
    sources = bool(prov.mixed_fields(found, ("source",)))
    return _tagged([replace(run, shown=mixed, shown_source=sources) for run in runs])


def _tagged(runs: list[M]) -> list[M]:
    by_name: dict[tuple, list[int]] = {}
    for i, run in enumerate(runs):
        key = (run.name, run.setting, run.provenance.source if run.shown_source else "", run.temperature, run.template)
        by_name.setdefault(key, []).append(i)
    out = list(runs)
    for members in by_name.values():
        if len(members) > 1:
            paths = [runs[i].path.resolve() for i in members]
            common = Path(os.path.commonpath(paths))
            for i, path in zip(members, paths):
                out[i] = replace(runs[i], tag=path.relative_to(common).as_posix() or path.name)
    return out


M = TypeVar("M", bound=RecordView)


@dataclass(frozen=True)
class RunView(RecordView):
    summary: RunSummary

    @property
    def provenance(self) -> Provenance:
        assert self.summary.provenance is not None  # the reader gives every summary its provenance
        return self.summary.provenance

    @property
    def name(self) -> str:
        return self.summary.label


@dataclass(frozen=True)
class Replay(RecordView):
    record: ReplayRecord

    @property
    def provenance(self) -> Provenance:
        return prov.of_stamp(self.stamp, runner=self.record.summary.runner, replay_kind=self.record.summary.replay)

    @property
    def name(self) -> str:
        return f"{self.record.summary.drafter} replay d<={self.record.summary.d_max}"


def _found(root: Path, name: str, exclude: Collection[Path]) -> list[Path]:
    """The folders under `root` holding `name`, but for those in (or under) `exclude`."""
    left_out = {Path(p).resolve() for p in exclude}
    folders = []
    for folder in holding(root, name):
        resolved = folder.resolve()
        if resolved not in left_out and left_out.isdisjoint(resolved.parents):
            folders.append(folder)
    return folders


def find_runs(root: Path, exclude: Collection[Path] = ()) -> list[RunView]:
    """Every finished run under `root` (a run dir, or a sweep dir holding several), but for those
    in `exclude` (a sweep's jobs that failed: what their dirs hold is not this sweep's result)."""
    if not root.is_dir():
        raise SpeclensError(f"{root}: no such folder.")
    runs = []
    for run_dir in _found(root, SUMMARY_FILE, exclude):
        summary = read_summary(run_dir)
        runs.append(RunView(run_dir, summary.fingerprints, read_stamp(run_dir), summary))
    return shown_identity(runs)


def measured_runs(runs: list[RunView]) -> list[RunView]:
    """The runs whose acceptance was measured: a run at synthetic acceptance (acceptance.synthetic)
    timed a drafter at rates the user set, which no curve, ranking or comparison of acceptance takes."""
    return [run for run in runs if run.summary.synthetic_acceptance is None]


def find_replays(root: Path, exclude: Collection[Path] = ()) -> list[Replay]:
    """Every replay (replay.json beside its curves) under `root`, but for those in `exclude`."""
    replays = []
    for replay_dir in _found(root, REPLAY_FILE, exclude):
        record = read_replay(replay_dir)
        replays.append(Replay(replay_dir, record.summary.fingerprints, record.stamp, record))
    return shown_identity(replays)


def check_consistent(runs: list[RecordView], keys: tuple[str, ...] = CONSISTENT_KEYS) -> None:
    """Refuse runs measured under different settings, naming each differing key and its values."""
    differing = []
    for key in keys:
        values = {json.dumps(run.get(key), sort_keys=True) for run in runs}
        if len(values) > 1:
            by_value: dict[str, list[str]] = {}
            for run in runs:
                by_value.setdefault(json.dumps(run.get(key)), []).append(run.path.name)
            shown = "; ".join(
                f"{v} in {', '.join(names[:3])}{' …' if len(names) > 3 else ''}" for v, names in by_value.items()
            )
            differing.append(f"{key} differs ({shown})")
    if differing:
        raise SpeclensError(
            "these runs were measured under different settings and cannot be compared: "
            + " | ".join(differing)
            + ". Aggregate each setting from its own sweep dir."
        )


def _flat(node: Any, prefix: str = "") -> dict[str, str]:
    """Dotted key -> JSON value of every leaf of a nested dict."""
    if not isinstance(node, dict):
        return {prefix: json.dumps(node, sort_keys=True)}
    flat: dict[str, str] = {}
    for key, value in node.items():
        flat |= _flat(value, f"{prefix}.{key}" if prefix else str(key))
    return flat


def settings(run: RecordView) -> dict[str, str]:
    """Everything a run was measured with, flattened: its config keys (as the command line names
    them), the runner and the content fingerprints."""
    return (
        _flat(run.stamp.get("config", {}))
        | {"runner": json.dumps(run.stamp.get("runner"))}
        | _flat(asdict(run.fingerprints), "fingerprints")
    )


def differing_settings(a: RecordView, b: RecordView, shown: int = 4) -> str:
    """The keys two runs were measured with different values of, each with both values."""
    mine, theirs = settings(a), settings(b)
    keys = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
    if not keys:
        return "the same settings"
    listed = "; ".join(f"{k}: {mine.get(k, 'unset')} vs {theirs.get(k, 'unset')}" for k in keys[:shown])
    return f"different {', '.join(keys[:shown])}{f' (and {len(keys) - shown} more keys)' if len(keys) > shown else ''} ({listed})"


def check_one_each(
    runs: list[RecordView],
    keys_of: Callable[[RecordView], Iterable[Hashable]],
    describe: Callable[[Hashable], str],
    advice: str,
) -> None:
    """Refuse two runs that give the same entry (`keys_of`: the entries a run gives), naming the
    settings they differ in, rather than silently keeping one of them."""
    seen: dict[Hashable, RecordView] = {}
    for run in runs:
        for key in keys_of(run):
            other = seen.setdefault(key, run)
            if other is not run:
                raise SpeclensError(
                    f"{describe(key)} was measured twice ({other.path} and {run.path}), with "
                    f"{differing_settings(other, run)}; {advice}"
                )
