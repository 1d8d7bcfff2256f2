"""`python -m evals.whatif [RUN_DIR | SWEEP_DIR | speculation_profile.json] gpu=<name> [key=value …]`
(also `speclens whatif`): speedup predicted on a GPU from acceptance measured anywhere.

Acceptance: a run or sweep dir (its speculation_profile.json; `domain=` picks a domain, default
all), or `drafter=<name>` with `al=<AL> d=<D>` or `acceptance=[c1,c2,…]` (conditional per position), and
optionally `draft_share=` (the share of target passes that verify a draft, default 1; a lookup
drafter given without it gets a note: it drafts only where it finds a match) and
`model_runner=v1|v2` (what a step without a draft costs: a plain step, or a full verify on V2).
A drafter's profile is chosen by its whole identity (provenance: source, runner, dtype, model
runner, settings): where a folder holds several (a sweep over settings, fake and real runs), the
one measured under the defaults is taken where exactly one is, and the others named in a note;
otherwise whatif refuses, listing how they differ, and `setting=<label>` picks one (`setting=`
or `setting=defaults`: the defaults; a label the refusal names, e.g. `verify.method=block`,
`engine.dtype=float32`). A serial drafter's AL at a D below its profile's is derived from its
rates and marked `derived`; a profile measured at its own D only (`measured_per_k`: parallel
drafting, Model-Optimizer's accept_length_model measured_per_k) gives AL at that D only. D is at most
128 (vLLM's limit on num_speculative_tokens). Every point says what it is (`source`: predicted;
`al_source`: measured, derived, fake, synthetic or given), whatif.json's `provenance` what its
acceptance and step costs are, and the terminal and whatif.html mark every AL not measured.
Architecture: `target.model=<folder or hub id>` (default: the run's target), `drafter.model=…`
(default: the run's draft; EAGLE heads without one are taken as one target-shaped layer),
`arch.<config field>=<value>` applied to the target's config before anything is derived.
Hardware: `gpu=<name>` (`--list-gpus`) or `gpu=custom gpu.bf16_tflops=… gpu.hbm_tb_s=… gpu.memory_gb=…
[gpu.fp8_tflops=… gpu.nvlink_gb_s=…]`, `tp=N`, `weights=bf16|fp8`, `expert_weights=bf16|fp8|nvfp4|mxfp4`
(a MoE target's experts; default: the checkpoint's quantization_config, else weights=), `eff.<field>=…`
(speclens/gpu_model/step_cost.py).
Engine: `engine=vllm|sglang|trtllm` (default vllm): its overlap scheduling under each drafter and
its in-graph drafting (speclens/gpu_model/engines.py), printed with every prediction.
`slo.tokens_per_s_per_user=N` answers in one line what to serve, and up to which B, for N tokens/s
per user. Operating points: `batch_sizes=[…]` (default 1 … 256), `context_len=` one or a list (default 4096),
`d=` one or a list (default every D with acceptance). A run or sweep measured at several prompt
lengths (long context) gives acceptance per length: each point takes the AL measured at the length
nearest its context_len (of two equally near, the shorter), named in the point as `al_measured_at`;
context_len defaults to the measured lengths, and whatif.json's `by_length` states guidelines 2 and
3 at each measured length with the share of the step attention takes there and the best D per B
(all predicted). `calibrate=<run or sweep dir measured with
baseline=true>` fits the model to that machine's step costs and predicts for it (gpu=measured),
printing each point's error, fitted and held out; beside them it fits the K=0 tax (what an
undrafted step costs beyond a plain one, from the idle pass's T_idle; none before summary.json
version 12, and said) and T_draft (a model drafter's per-pass overhead, a lookup's cost per
request; a kind no run measured keeps the GPU constant, and said), each with its held-out error. Writes whatif.json to `out=` (default: the run
or sweep dir, else outputs/whatif/<date>/<time>/) and prints the best (drafter, D) per B.
Every predicted speedup carries `speedup_interval`, the 80% range derived on published GPU speedups
held out by source, with the share of them it held when built without their source
(speclens/gpu_model/model_error.py); where the path was never scored (calibrate=, an engine= term
that moves the drafter's steps, cost_model=aiconfigurator, eff.*) it is widened and marked *.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from drafters import REGISTRY
from reports.profile import (
    PROFILE_FILE,
    check_al_by_k,
    dynamo_cut_note,
    dynamo_flags,
    profile_provenance,
    read_profiles,
)
from reports.profile_choice import choose_profiles, identity_of
from reports.runs import Run, find_runs
from reports.table import text_table
from reports.whatif_page import acceptance_lines, write_page
from speclens import checkpoints, costs
from speclens import provenance as prov
from speclens.acceptance import al_at, check_rates, marginal_from_conditional
from speclens.config import VLLM_MAX_SPEC_LEN
from speclens.errors import ConfigError, CorruptRecord, guarded
from speclens.files import output_dir, output_path, write_json_atomic
from speclens.gpu_model import calibrate
from speclens.gpu_model.calibrate import Measured
from speclens.gpu_model.draft_cost import MECHANISMS, drafter_shape, needs_draft_config
from speclens.gpu_model.engines import DEFAULT_ENGINE, engine_named
from speclens.gpu_model.gpu_guidelines import at_length
from speclens.gpu_model.gpus import GPUS, gpu_named
from speclens.gpu_model.measured_ops import AiconfiguratorOps
from speclens.gpu_model.model_error import (
    HELD_OUT,
    TOKENS_PER_S_DERIVED_ON,
    interval_for,
    tokens_per_s_interval,
)
from speclens.gpu_model.model_shape import ModelShape, shape_of
from speclens.gpu_model.step_cost import Efficiency, Hardware, check_tp, expert_format, measurable
from speclens.gpu_model.whatif import (
    DEFAULT_BATCH_SIZES,
    Drafting,
    best,
    best_label,
    check_fits,
    mean_context,
    predict,
    schedule,
    serve_at_slo,
    undrafted_step,
)
from speclens.metrics import conditional_acceptance, length_label
from speclens.model_facts import ModelFacts, text_config
from speclens.options import nearest, number, parse_value, strict_json_loads
from speclens.provenance import Provenance, mark
from speclens.records import read_parquet
from speclens.run_files import ENGINE_STEPS_FILE, REQUESTS_FILE, read_stamp
from speclens.summary import read_summary

WHATIF_FILE = "whatif.json"
DEFAULT_CONTEXT_LEN = 4096
KEYS = ("gpu", "tp", "weights", "batch_sizes", "context_len", "d", "al", "acceptance", "drafter", "domain", "out")
KEYS += ("target.model", "drafter.model", "calibrate", "slo.tokens_per_s_per_user", "cost_model", "engine")
KEYS += ("expert_weights", "draft_share", "model_runner", "setting")
TEXT_KEYS = ("target.model", "drafter.model", "out", "gpu", "calibrate", "cost_model", "engine", "expert_weights")
TEXT_KEYS += ("model_runner", "drafter", "domain", "weights", "setting")
MODEL_RUNNERS = ("v1", "v2")


def parse(argv: list[str]) -> tuple[Path | None, dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The source path, the options, and the arch.*, gpu.* and eff.* overrides."""
    source, options, arch, gpu, eff = None, {}, {}, {}, {}
    for arg in argv:
        if "=" not in arg:
            if source is not None:
                raise ConfigError(f"{arg}: give one run dir, sweep dir or {PROFILE_FILE}, then key=value settings.")
            source = Path(arg).expanduser()
            continue
        key, text = arg.split("=", 1)
        for prefix, into in (("arch.", arch), ("gpu.", gpu), ("eff.", eff)):  # slo.… is one key
            if key.startswith(prefix) and key not in KEYS:
                into[key.removeprefix(prefix)] = parse_value(text, key)
                break
        else:
            if key not in KEYS:
                raise ConfigError(f"{key}= is not a whatif setting; see `python -m evals.whatif --help`.")
            options[key] = text if key in TEXT_KEYS else parse_value(text, key)
    return source, options, arch, gpu, eff


def ints(value: Any, key: str) -> list[int]:
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values):
        raise ConfigError(f"{key}={json.dumps(value)}: one whole number or a list of them (>= 1).")
    return sorted(set(values))


def _stamps(source: Path) -> list[tuple[str | None, dict[str, Any]]]:
    """Each run's drafter (its summary's; None where it has none) and stamp under `source`."""
    files = [source / "stamp.json"] if (source / "stamp.json").is_file() else sorted(source.rglob("stamp.json"))
    found = []
    for file in files:
        found.append((_summary_drafter(file.parent), read_stamp(file.parent)))
    return found


def _summary_drafter(run_dir: Path) -> str | None:
    """The drafter a run's summary.json names (None where it has no summary), read for that field
    alone: a summary that is not JSON, or names no drafter by a string, is a CorruptRecord."""
    path = run_dir / "summary.json"
    if not path.is_file():
        return None
    try:
        data = strict_json_loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise CorruptRecord(f"{path} is unreadable ({exc})") from None
    drafter = data.get("drafter") if isinstance(data, dict) else None
    if not isinstance(drafter, str):
        raise CorruptRecord(f"{path} names no drafter (its field drafter is {drafter!r})")
    return drafter


def _read_config(ref: str, key: str) -> dict[str, Any]:
    return checkpoints.read_config(checkpoints.resolve(ref, key, config_only=True), key)


@dataclass(frozen=True)
class Share:
    """A drafter's share of target passes that verify a draft (speclens/gpu_model/whatif.py): `value` measured (its
    profile's) or given (draft_share=), None where its profile predates the share (taken as 1, and
    said); per length bucket where measured per length; the model runner that measured it."""

    value: float | None = 1.0
    model_runner: str | None = None
    by_length: dict[int, float] | None = None

    @property
    def undrafted(self) -> str:
        return undrafted_step(self.model_runner)


# What an AL given on the command line (al=, acceptance=) is: neither measured nor derived here.
GIVEN = "given"


@dataclass(frozen=True)
class Acceptance:
    """AL at each D one source holds, and what each figure is: the source's own (measured, fake,
    synthetic, given) or derived from its rates at a larger D (a serial drafter's acceptance at a
    smaller D is a prefix of its acceptance at D). A parallel drafter's (`measured_per_k`) holds the
    D it measured only."""

    al_by_d: dict[int, float]
    source_by_d: dict[int, str]
    # the per-position rates (marginal) where known: Dynamo's flags
    marginal: list[float] | None = None
    measured_per_k: bool = False

    @property
    def own_ds(self) -> list[int]:
        """The D whose AL the source states itself (not derived here)."""
        return sorted(d for d, source in self.source_by_d.items() if not prov.is_derived(source))


def serial_acceptance(marginal: list[float], source: str, derived_below: bool = True) -> Acceptance:
    """A chain's AL at every D up to its rates' (at most vLLM's limit): at the rates' own D the
    source's figure; below it derived from them (`derived_below`), or the source's where the rates
    were given per position (acceptance=)."""
    top = min(len(marginal), VLLM_MAX_SPEC_LEN)
    ds = range(1, top + 1)
    return Acceptance(
        {d: al_at(marginal, d) for d in ds},
        {d: source if d == len(marginal) or not derived_below else prov.derived_from(source) for d in ds},
        marginal,
    )


def profile_acceptance(profiles: list[dict[str, Any]], source: str, where: str) -> Acceptance:
    """The acceptance of one drafter's profiles of one identity: a serial drafter's from the rates
    of its longest D; a parallel drafter's (measured_per_k) AL at each D its profiles measured."""
    longest = max(profiles, key=lambda p: p["d"])
    marginal = check_rates(longest["marginal"], f"{where}: drafter={longest['drafter']} d={longest['d']} marginal")
    if not any(p.get("measured_per_k") for p in profiles):
        chain = serial_acceptance(marginal, source)
        # a D a profile measured itself is its own figure, not one derived from the longest's rates
        own = {p["d"]: float(p["al"]) for p in profiles if p["d"] in chain.al_by_d}
        return replace(chain, al_by_d=chain.al_by_d | own, source_by_d=chain.source_by_d | dict.fromkeys(own, source))
    al: dict[int, float] = {}
    for p in sorted(profiles, key=lambda p: p["d"]):
        al |= {
            int(k): v
            for k, v in check_al_by_k(p.get("acceptance_length_by_k") or {str(p["d"]): p["al"]}, where).items()
        }
    kept = {d: v for d, v in sorted(al.items()) if d <= VLLM_MAX_SPEC_LEN}
    if not kept:
        raise ConfigError(
            f"{where}: drafter={longest['drafter']} was measured at D={', '.join(map(str, sorted(al)))} only, above "
            f"{VLLM_MAX_SPEC_LEN} (vLLM's limit on num_speculative_tokens); its AL at a smaller D is not known."
        )
    return Acceptance(kept, {d: source for d in kept}, marginal, measured_per_k=True)


@dataclass(frozen=True)
class DrafterInput:
    """One drafter's acceptance as whatif takes it: pooled and per measured length bucket, its
    share of drafting steps, what its figures are (whatif.json `provenance.acceptance`), and the
    notes a reader needs (what was passed over, what was assumed)."""

    acceptance: Acceptance
    share: Share
    what: dict[str, Any]
    by_length: dict[int, Acceptance] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def profile_folder(source: Path) -> Path:
    folder = source.parent if source.name == PROFILE_FILE else source
    if not (folder / PROFILE_FILE).is_file():
        raise ConfigError(f"{source}: holds no {PROFILE_FILE} (a run or sweep dir speclens wrote, with a drafter).")
    return folder


def whole_output(p: dict[str, Any]) -> bool:
    return p.get("segment", "all") == "all"


def measured_acceptance(source: Path, domain: str, setting: str | None = None) -> dict[str, DrafterInput]:
    """Per drafter, its acceptance from the profiles of one identity (reports/profile.py
    choose_profiles: the one `setting=` names, else the only one, else the one measured under the
    defaults): the rates of its longest D, a parallel drafter's AL at each D measured, and where
    measured per length (domain all only: a long-context domain is one length already) the same
    per length bucket."""
    folder = profile_folder(source)
    where = str(folder / PROFILE_FILE)
    profiles = read_profiles(folder)
    pooled = [p for p in profiles if p["domain"] == domain and whole_output(p) and "input_tokens" not in p]
    if not pooled:
        domains = sorted({p["domain"] for p in profiles})
        raise ConfigError(f"{source}: no acceptance profile for domain={domain}; it has {', '.join(domains)}.")
    chosen: dict[str, DrafterInput] = {}
    for drafter in dict.fromkeys(p["drafter"] for p in pooled):
        mine, what, note = choose_profiles([p for p in pooled if p["drafter"] == drafter], drafter, setting, where)
        figures = what.source if what is not None else prov.MEASURED
        lengths = length_groups(profiles, drafter, identity_of(what), where) if domain == "all" else {}
        by_length = {tokens: profile_acceptance(found, figures, where) for tokens, found in lengths.items()}
        longest = {tokens: max(found, key=lambda p: p["d"]) for tokens, found in lengths.items()}
        share = measured_share(max(mine, key=lambda p: p["d"]), longest)
        acceptance = profile_acceptance(mine, figures, where)
        notes = [note] if note else []
        chosen[drafter] = DrafterInput(
            acceptance, share, profile_what(what, acceptance, where), by_length, notes + what_notes(drafter, what)
        )
    return chosen


def length_groups(
    profiles: list[dict[str, Any]], drafter: str, identity: tuple[Any, ...], where: str
) -> dict[int, list[dict[str, Any]]]:
    """A drafter's length profiles of all prompts (reports/profile.py) of one identity, per bucket's
    input tokens, shortest first."""
    out: dict[int, list[dict[str, Any]]] = {}
    for p in profiles:
        if p["drafter"] != drafter or "input_tokens" not in p or not whole_output(p):
            continue
        if identity_of(profile_provenance(p, where)) == identity:
            out.setdefault(int(p["input_tokens"]), []).append(p)
    return dict(sorted(out.items()))


def profile_what(what: Provenance | None, acceptance: Acceptance, where: str) -> dict[str, Any]:
    """What a chosen profile's figures are, as whatif.json states them."""
    recorded = what is not None
    found = what if recorded else prov.Provenance(source=prov.MEASURED, runner="unknown")
    return found.to_dict() | {
        "label": found.label() if recorded else "measured (taken as: its profile records no provenance)",
        "recorded": recorded,
        "profile": where,
        "measured_per_k": acceptance.measured_per_k,
        "own_d": acceptance.own_ds,
        "derived_d": sorted(set(acceptance.al_by_d) - set(acceptance.own_ds)),
    }


def what_notes(drafter: str, what: Provenance | None) -> list[str]:
    """What a reader of the predictions needs told about the acceptance they start from."""
    if what is None:
        return [
            f"{drafter}: its profile records no provenance (written before speclens recorded it): its AL is taken "
            "as measured; whether it was measured, synthetic or from the scripted engine is not known"
        ]
    out = []
    if what.source == prov.FAKE:
        out.append(
            f"{drafter}: its acceptance is the scripted engine's (runner=fake): these predictions are of a script, "
            "not of any model"
        )
    elif not what.measured:
        out.append(f"{drafter}: its acceptance is {what.source}, not measured: {what.label()}")
    if what.setting:
        out.append(f"{drafter}: its profile was measured under {what.setting}: the predictions are of that setting")
    return out


def measured_share(chosen: dict[str, Any], by_length: dict[int, dict[str, Any]]) -> Share:
    """The share of drafting steps a drafter's profiles measured (overall and per length)."""
    shares = {tokens: p["draft_share"] for tokens, p in by_length.items() if p.get("draft_share") is not None}
    return Share(chosen.get("draft_share"), chosen.get("model_runner"), shares or None)


def given_share(options: dict[str, Any]) -> Share:
    """draft_share= beside drafter= and al= / acceptance= (default 1: every step drafts), and the
    model runner that measured it (model_runner=v1|v2: what a step without a draft costs)."""
    value = options.get("draft_share", 1.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ConfigError(
            f"draft_share={json.dumps(value)}: the share of target passes that verify a draft, a number in (0, 1] "
            "(a run's summary.json draft_share)."
        )
    runner = options.get("model_runner")
    if runner is not None and runner not in MODEL_RUNNERS:
        raise ConfigError(
            f"model_runner={runner}: one of {', '.join(MODEL_RUNNERS)} (the run's numerics.model_runner)."
        )
    return Share(float(value), runner)


def draft_lengths(value: Any) -> list[int]:
    """d= checked: whole numbers from 1 to vLLM's limit on num_speculative_tokens."""
    ds = ints(value, "d")
    if ds[-1] > VLLM_MAX_SPEC_LEN:
        raise ConfigError(
            f"d={json.dumps(value)}: D={ds[-1]} is above {VLLM_MAX_SPEC_LEN}, vLLM's limit on num_speculative_tokens "
            "(no engine serves it); give D from 1 to 128."
        )
    return ds


def given_acceptance(options: dict[str, Any]) -> dict[str, DrafterInput]:
    """drafter= with al= at one d=, or acceptance= (conditional rates per position): AL given, not
    measured (with draft_share= and model_runner= where given)."""
    drafter = options.get("drafter")
    if drafter is None:
        raise ConfigError("give drafter=<name> with al= or acceptance= (or a run dir measured with one).")
    if "al" in options and "acceptance" in options:
        raise ConfigError("give al= (with one d=) or acceptance=[…], not both.")
    if "acceptance" in options:
        rates = check_rates(options["acceptance"], "acceptance")
        acceptance = serial_acceptance(marginal_from_conditional(rates), GIVEN, derived_below=False)
        said = f"acceptance={json.dumps(options['acceptance'])}"
    else:
        ds = draft_lengths(options.get("d")) if "d" in options else []
        al = options["al"]
        if len(ds) != 1 or not isinstance(al, (int, float)) or isinstance(al, bool) or not 1 <= al <= 1 + ds[0]:
            raise ConfigError(f"al={al} needs one d= and 1 <= al <= 1 + d.")
        acceptance = Acceptance({ds[0]: float(al)}, {ds[0]: GIVEN})
        said = f"al={al:g} at d={ds[0]}"
    what = {"source": GIVEN, "label": f"given ({said})", "own_d": acceptance.own_ds, "derived_d": []}
    share = given_share(options)
    return {drafter: DrafterInput(acceptance, share, what, notes=lookup_notes(drafter, options))}


def drafts_on_a_match_only(drafter: str) -> bool:
    """Whether a drafter drafts only where it finds a match (a lookup: n-gram, suffix), so on
    Model Runner V1 some steps verify no draft (drafters' facts: generation "one lookup")."""
    cls = REGISTRY.get(drafter)
    return cls is not None and cls.facts.generation == "one lookup"


def lookup_notes(drafter: str, options: dict[str, Any]) -> list[str]:
    """The note a given AL of a lookup drafter needs where no share of drafting steps was given."""
    if "draft_share" in options or options.get("model_runner") == "v2" or not drafts_on_a_match_only(drafter):
        return []
    return [
        f"{drafter}: the prediction assumes every step drafts (draft_share=1), but {drafter} drafts only where its "
        "lookup finds a match; give draft_share=<share of target passes that draft> (a run's summary.json "
        "draft_share) to set it"
    ]


def resolve_inputs(source: Path | None, options: dict[str, Any], arch: dict[str, Any]):
    """The target's config (arch.* applied), per drafter its acceptance (pooled and per measured
    length bucket, with what it is), and its draft config."""
    stamps = _stamps(source) if source is not None and source.is_dir() else []
    if "al" in options or "acceptance" in options:
        if "setting" in options:
            raise ConfigError(
                "setting= picks among a run or sweep's profiles; al= and acceptance= are given, not chosen."
            )
        inputs = given_acceptance(options)
    elif source is not None:
        for key in ("draft_share", "model_runner"):
            if key in options:
                raise ConfigError(
                    f"{key}= goes with drafter= and al= or acceptance=; a run's profile measured its own."
                )
        setting = options.get("setting")
        inputs = measured_acceptance(source, options.get("domain", "all"), None if setting is None else str(setting))
    else:
        raise ConfigError(
            "no acceptance: give a run or sweep dir, or drafter=<name> with al=<AL> d=<D> or acceptance=[…]."
        )
    for drafter in inputs:
        if drafter not in MECHANISMS:
            raise ConfigError(f"drafter={drafter}: no draft-cost model for it; choose one of {', '.join(MECHANISMS)}.")
    if "target.model" in options:
        target_ref = str(options["target.model"])
    elif stamps and stamps[0][1].get("target_dir"):
        target_ref = str(stamps[0][1]["target_dir"])
    else:
        raise ConfigError("give target.model=<folder or hub id> (a folder holding its config.json is enough).")
    target_config = _read_config(target_ref, "target.model")
    text = text_config(target_config)
    for field_name, value in arch.items():
        if field_name not in text and field_name not in checkpoints.COUNT_FIELDS:
            known = sorted(set(text) | set(checkpoints.COUNT_FIELDS))
            raise ConfigError(f"arch.{field_name}: the target's config has no such field{nearest(field_name, known)}.")
        text[field_name] = value
    checkpoints.check_config(target_config, "the target's config with the arch. overrides")
    draft_configs: dict[str, dict[str, Any] | None] = {}
    for drafter in inputs:
        ref = options.get("drafter.model") if len(inputs) == 1 else None
        for name, stamp in stamps:
            if ref is None and name == drafter:
                ref = (stamp.get("config", {}).get("drafter") or {}).get("model")
        if ref is None and needs_draft_config(drafter):
            raise ConfigError(f"drafter={drafter}: give drafter.model=<folder or hub id> for its config.json.")
        draft_configs[drafter] = _read_config(ref, "drafter.model") if ref else None
        longest = max(draft_lengths(options["d"])) if "d" in options else max(inputs[drafter].acceptance.al_by_d)
        check_pair(drafter, longest, target_ref, target_config, ref, draft_configs[drafter])
    return target_config, inputs, draft_configs


def check_pair(
    drafter: str, d: int, target_ref: str, target_config: dict, draft_ref: str | None, draft_config: dict | None
) -> None:
    """What evals.run refuses about this target and drafter at this D from their configs (the
    vocabulary, a head built for another target, MTP layers, the checkpoint's kind: drafters'
    check_pair), refused here too. An EAGLE head given no config.json is estimated, so not checked."""
    cls = REGISTRY[drafter]
    if cls.needs_checkpoint and draft_config is None:
        return
    target = ModelFacts.from_config(target_ref, target_config)
    draft = None if draft_config is None else ModelFacts.from_config(str(draft_ref), draft_config)
    cls(drafter, cls.config_class()).check_pair(d, target, draft)


def _hardware(options: dict[str, Any], gpu_fields: dict[str, Any], eff_fields: dict[str, Any]) -> Hardware:
    if "gpu" not in options:
        raise ConfigError(f"give gpu=<name> (one of {', '.join(GPUS)}) or gpu=custom with its figures.")
    known = [f.name for f in fields(Efficiency)]
    unknown = sorted(set(eff_fields) - set(known))
    if unknown:
        raise ConfigError(
            f"eff.{unknown[0]} is not an efficiency{nearest(unknown[0], known)} (any of {', '.join(known)})."
        )
    eff_fields = {k: number(v, f"eff.{k}", at_least=0) for k, v in eff_fields.items()}
    return Hardware(
        gpu_named(options["gpu"], gpu_fields),
        tp=ints(options.get("tp", 1), "tp")[0],
        weights=str(options.get("weights", "bf16")),
        eff=Efficiency(**eff_fields),
        expert_weights=options.get("expert_weights"),
        engine=engine_named(str(options.get("engine", DEFAULT_ENGINE))),
    )


def hardware_from(settings: dict[str, str]) -> Hardware:
    """The hardware of `gpu=… tp=… weights=… gpu.<field>=… eff.<field>=…` settings (key -> text)."""
    options = {k: (v if k == "gpu" else parse_value(v, k)) for k, v in settings.items() if "." not in k}
    gpu_fields = {k.removeprefix("gpu."): parse_value(v, k) for k, v in settings.items() if k.startswith("gpu.")}
    eff_fields = {k.removeprefix("eff."): parse_value(v, k) for k, v in settings.items() if k.startswith("eff.")}
    return _hardware(options, gpu_fields, eff_fields)


def calibration_runs(folder: Path) -> list[Run]:
    """The runs under `folder` measured with baseline=true (step costs to fit)."""
    runs = [r for r in find_runs(folder) if any(op.t_verif for op in r.summary.operating_points)]
    if not runs:
        raise ConfigError(f"calibrate={folder}: no run there was measured with baseline=true (no step costs).")
    return runs


def calibration_what(folder: Path) -> dict[str, Any]:
    """What the step costs a calibration fits are: each run's provenance label, and whether any
    came from the scripted engine (runner=fake), whose step times are a script's."""
    found = [r.provenance for r in calibration_runs(folder)]
    sources = sorted({p.source for p in found})
    return {"sources": sources, "runs": sorted({p.label() for p in found}), "fake": prov.FAKE in sources}


def calibration_points(folder: Path) -> tuple[list[Measured], str | None]:
    """The measured T_verif of every run under `folder` measured with baseline=true: plain steps
    at each B (D = 0) and the zero-cost verify pass's at B·(1+D); context: each B's requests' mean
    prompt plus half their output. Points measured by several runs are averaged. With the
    runs' target folder (None where the stamp names none)."""
    runs = calibration_runs(folder)
    found: dict[tuple[int, int, int], list[float]] = {}
    for run in runs:
        requests = read_parquet(run.path / REQUESTS_FILE)
        for op in run.summary.operating_points:
            mine = requests[requests.batch_size == op.batch_size]
            context = mean_context(mine.prompt_tokens, mine.output_tokens)
            # the step costs are of the requests held in flight (fewer than B where a pass had fewer)
            if op.t_verif is not None:
                found.setdefault((op.held, 0, context), []).append(op.t_verif.median_ms)
            if op.t_verif_spec is not None and run.summary.d:
                found.setdefault((op.held, run.summary.d, context), []).append(op.t_verif_spec.median_ms)
    points = [Measured(b, d, c, sum(ts) / len(ts)) for (b, d, c), ts in sorted(found.items())]
    return points, runs[0].stamp.get("target_dir")


@dataclass(frozen=True)
class CalibrationSteps:
    """What the runs under a calibrate= folder measured besides T_verif: the undrafted steps
    (T_verif(B) beside T_idle(B)) the K=0 tax is fitted on, each speculative pass's drafting cost
    (`drafted`: calibrate.Drafted's fields but its shape, with `draft_ref`, the drafter's
    checkpoint, to read it from) the T_draft fits are on, and what was taken in place of a missing
    figure (`notes`)."""

    undrafted: list[calibrate.Undrafted]
    drafted: list[dict[str, Any]]
    notes: list[str]


def steady_spec_steps(engine_steps: Any, batch_size: int) -> tuple[float, float] | None:
    """The speculative pass's steady steps at B (as speclens/costs.py counts them: as many requests
    as it held, no prefill): the share that drafted, s, and the mean step as their mixture,
    s·median(drafted) + (1 − s)·median(undrafted) (each median robust to a slow step, the mixture
    what the model's mean step is). None where the pass shows no steady steps."""
    steps = engine_steps[
        (engine_steps["mode"] == costs.PassMode.speculative) & (engine_steps["batch_size"] == batch_size)
    ]
    if steps.empty:
        return None
    steady = steps[
        (steps["num_requests"] == costs.in_flight(steps))
        & (steps["num_tokens"] == steps["num_requests"] + steps["num_draft_tokens"])
    ]
    if len(steady) < costs.MIN_STEADY_STEPS:
        return None
    drafted = steady["num_draft_tokens"] > 0
    share = float(drafted.mean())
    walls = [steady.loc[part, "wall_s"].median() * 1e3 for part in (drafted, ~drafted) if part.any()]
    t_step = share * walls[0] + (1 - share) * walls[-1] if len(walls) == 2 else walls[0]
    return share, float(t_step)


def calibration_steps(folder: Path) -> CalibrationSteps:
    """Per operating point of the runs under `folder` measured with baseline=true: T_verif(B) and
    T_idle(B) (schema 12's idle pass) for the K=0 tax, and the drafting cost measured on the
    speculative pass, T_step − [s·T_verif(B·(1+D)) + (1 − s)·T_undrafted(B)], s the share of its
    steady steps that drafted and T_undrafted the idle pass's T_idle(B) (Model Runner V2: the
    verify, which an undrafted step is there; a run before schema 12, or whose idle pass did not
    run: plain decoding's T_verif(B), and a note says so). Points measured by several runs are
    averaged; the context is as calibration_points takes it."""
    taxes: dict[tuple[int, int], list[tuple[float, float]]] = {}
    drafting: dict[tuple[str, int, int, int, str | None], list[tuple[float, float]]] = {}
    plain_for_idle = 0
    for run in calibration_runs(folder):
        requests = read_parquet(run.path / REQUESTS_FILE)
        steps_file = run.path / ENGINE_STEPS_FILE
        engine_steps = read_parquet(steps_file) if steps_file.is_file() else None
        summary = run.summary
        v2 = bool(summary.numerics and summary.numerics.model_runner == "v2")
        draft_ref = (run.stamp.get("config", {}).get("drafter") or {}).get("model")
        for op in summary.operating_points:
            if op.t_verif is None:
                continue
            mine = requests[requests.batch_size == op.batch_size]
            context = mean_context(mine.prompt_tokens, mine.output_tokens)
            plain = op.t_verif.median_ms
            if op.t_idle is not None:
                taxes.setdefault((op.held, context), []).append((plain, op.t_idle.median_ms))
            if not summary.d or op.t_step is None or op.t_verif_spec is None or summary.drafter not in MECHANISMS:
                continue
            verify = op.t_verif_spec.median_ms
            split = None if engine_steps is None else steady_spec_steps(engine_steps, op.batch_size)
            share, t_step = split or (1.0 if op.draft_share is None else op.draft_share, op.t_step.median_ms)
            if v2:
                undrafted = verify
            elif op.t_idle is not None:
                undrafted = op.t_idle.median_ms
            else:
                undrafted = plain
                plain_for_idle += share < 1
            t_draft = t_step - (share * verify + (1 - share) * undrafted)
            key = (summary.drafter, summary.d, op.held, context, draft_ref)
            drafting.setdefault(key, []).append((t_draft, t_step))
    undrafted_points = [
        calibrate.Undrafted(b, c, sum(p for p, _ in ts) / len(ts), sum(i for _, i in ts) / len(ts))
        for (b, c), ts in sorted(taxes.items())
    ]
    drafted = [
        {"drafter": m, "batch_size": b, "d": d, "context": c, "draft_ref": ref}
        | {"t_draft_ms": sum(t for t, _ in ts) / len(ts), "t_step_ms": sum(s for _, s in ts) / len(ts)}
        for (m, d, b, c, ref), ts in sorted(drafting.items(), key=lambda kv: (*kv[0][:4], kv[0][4] or ""))
    ]
    notes = []
    if not undrafted_points:
        notes.append(
            "no run there measured T_idle (the idle pass: baseline=true on summary.json version 12 or later, Model "
            "Runner V1): an undrafted step is priced as plain decoding's, with no K=0 tax"
        )
    if plain_for_idle:
        notes.append(
            f"{plain_for_idle} operating point(s) without T_idle: their undrafted steps were taken at plain decoding's "
            "cost in the T_draft fit"
        )
    return CalibrationSteps(undrafted_points, drafted, notes)


def fit_beside(
    fitted: calibrate.Fit, target: ModelShape, steps: CalibrationSteps, weights: str
) -> tuple[calibrate.Fit, dict[str, Any]]:
    """The K=0 tax and T_draft fitted beside the three constants (speclens/gpu_model/calibrate.py),
    in the Fit whose hardware predicts; with the record whatif.json's `calibration` holds: each
    fitted value, its points' errors fitted and held out, and what was kept where nothing measured it."""
    record: dict[str, Any] = {"notes": list(steps.notes)}
    if steps.undrafted:
        tax = calibrate.fit_tax(steps.undrafted)
        fitted = replace(fitted, k0_tax_ms=tax.ms, k0_tax_us_per_request=tax.us_per_request)
        record["k0_tax"] = {
            "ms": tax.ms,
            "us_per_request": tax.us_per_request,
            "form": tax.form,
            "points": [
                {**asdict(p), "tax_ms": p.tax_ms, "error": round(e, 4), "held_out_error": nan_none(h)}
                for p, e, h in calibrate.tax_errors(steps.undrafted, tax)
            ],
        }
    else:
        record["k0_tax"] = None
    configs: dict[str, dict[str, Any] | None] = {}
    by_kind: dict[str, list[calibrate.Drafted]] = {}
    for raw in steps.drafted:
        ref = raw["draft_ref"]
        if ref is not None and ref not in configs:
            try:
                configs[ref] = _read_config(ref, "drafter.model")
            except ConfigError as exc:
                configs[ref] = None
                record["notes"].append(f"{raw['drafter']}'s draft {ref} is unreadable ({exc}): its T_draft not fitted")
        config = None if ref is None else configs[ref]
        if config is None and needs_draft_config(raw["drafter"]):
            note = f"{raw['drafter']}'s run names no draft checkpoint: its T_draft not fitted"
            if ref is None and note not in record["notes"]:
                record["notes"].append(note)
            continue
        shape = drafter_shape(raw["drafter"], target, config)
        point = calibrate.Drafted(**{k: v for k, v in raw.items() if k != "draft_ref"}, draft=shape)
        by_kind.setdefault(calibrate.draft_kind(raw["drafter"]), []).append(point)
    record["t_draft"] = {}
    for kind in ("draft_pass_overhead_ms", "lookup_us_per_request"):
        points = by_kind.get(kind, [])
        if not points:
            record["t_draft"][kind] = {"fitted": False, "value": getattr(Efficiency(), kind)}
            continue
        value = calibrate.fit_draft(target, fitted, points, weights)
        rows = calibrate.draft_errors(target, fitted, points, weights, everything=value)
        fitted = replace(fitted, **{kind: value})
        record["t_draft"][kind] = {
            "fitted": True,
            "value": value,
            "points": [
                {
                    **{k: v for k, v in asdict(p).items() if k != "draft"},
                    "error": round(e, 4),
                    "held_out_error": nan_none(h),
                }
                for p, e, h in rows
            ],
        }
    return fitted, record


def nan_none(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 4)


def fitted_beside_line(record: dict[str, Any]) -> str:
    """What calibrate= fitted beside the three constants, and what it kept, in one line."""
    parts = []
    tax = record["k0_tax"]
    if tax is None:
        parts.append("K=0 tax not measured (an undrafted step costs a plain one)")
    else:
        per_request = f" + {tax['us_per_request']:.4g} us a request" if tax["us_per_request"] else ""
        measured = sum(p["tax_ms"] for p in tax["points"]) / len(tax["points"])
        below = f"; measured {measured:+.2f} ms on average, taken as 0" if measured < 0 else ""
        parts.append(f"K=0 tax {tax['ms']:.4g} ms a step{per_request} ({tax['form']}{below})")
    for kind, unit in (("draft_pass_overhead_ms", "ms"), ("lookup_us_per_request", "us")):
        fit = record["t_draft"][kind]
        if fit["fitted"]:
            parts.append(f"T_draft: {kind} {fit['value']:.4g} {unit} fitted")
        else:
            parts.append(f"T_draft: {kind} {fit['value']:g} {unit} kept (the GPU constant: no such drafter measured)")
    return "; ".join(parts)


def beside_lines(calibration: dict[str, Any]) -> list[str]:
    """The terminal's lines for the K=0 tax and T_draft fitted beside the three constants."""

    def held(value: float | None) -> str:
        return "-" if value is None else f"{value:+.1%}"

    lines = [f"fitted beside: {calibration['fitted_beside']}"]
    for p in (calibration.get("k0_tax") or {}).get("points", []):
        lines.append(
            f"  K=0 tax B={p['batch_size']} context {p['context']}: plain {p['t_plain_ms']:.2f} ms, idle "
            f"{p['t_idle_ms']:.2f} ms ({p['tax_ms']:+.2f} ms); T_idle fit {p['error']:+.1%}, held out {held(p['held_out_error'])}"
        )
    for kind, fit in calibration["t_draft"].items():
        for p in fit.get("points", []):
            lines.append(
                f"  T_draft {p['drafter']} B={p['batch_size']} D={p['d']} context {p['context']}: measured "
                f"{p['t_draft_ms']:.2f} ms of a {p['t_step_ms']:.2f} ms step; off by {p['error']:+.1%} of the step "
                f"fitted, {held(p['held_out_error'])} held out ({kind})"
            )
    return lines


def run_point(run_dir: Path, batch_size: int, *settings: str) -> dict[str, Any]:
    """whatif's point for one operating point of a run: the run's target and drafter, its AL, D and
    that B's draft share and context (mean prompt plus half the output, as calibration takes it),
    on the machine `settings` name (`gpu=…` or `calibrate=…`), at the requests that operating point
    held in flight (OperatingPoint.held). What a measured speed is set beside."""
    (point,) = run_result(run_dir, batch_size, *settings)["points"]
    return point


def run_result(run_dir: Path, batch_size: int, *settings: str) -> dict[str, Any]:
    """The whole whatif result whose one point run_point gives (its `calibration` record with it)."""
    summary, stamp = read_summary(run_dir), read_stamp(run_dir)
    (op,) = [op for op in summary.operating_points if op.batch_size == batch_size]
    requests = read_parquet(run_dir / REQUESTS_FILE)
    mine = requests[requests.batch_size == batch_size]
    argv = [
        f"target.model={stamp['target_dir']}",
        f"drafter={summary.drafter}",
        f"al={summary.al}",
        f"d={summary.d}",
        *([f"draft_share={op.draft_share}"] if op.draft_share is not None else []),  # none recorded: every step
        *(
            [f"model_runner={summary.numerics.model_runner}"]
            if summary.numerics and summary.numerics.model_runner
            else []
        ),
        f"batch_sizes=[{op.held}]",  # the requests it held in flight: what its speed is of
        f"context_len={mean_context(mine.prompt_tokens, mine.output_tokens)}",
        *settings,
    ]
    draft = (stamp.get("config", {}).get("drafter") or {}).get("model")
    if draft:
        argv.append(f"drafter.model={draft}")
    result, _ = build(argv)
    return result


COST_MODELS = ("roofline", "aiconfigurator")


def cost_label(hw: Hardware, calibrated: bool, target: ModelShape) -> str:
    if calibrated:
        return "roofline, calibrated"
    if hw.ops is None:
        return "roofline"
    if not measurable(target):
        return f"roofline ({hw.ops.label} hold no MoE or MLA GEMMs: the target's stay on the roofline)"
    return f"{hw.ops.label}: the target's GEMMs and all-reduces; attention and drafting: roofline"


def build(argv: list[str]) -> tuple[dict[str, Any], Path | None]:
    source, options, arch, gpu_fields, eff_fields = parse(argv)
    cost_model = str(options.get("cost_model", "roofline"))
    if cost_model not in COST_MODELS:
        raise ConfigError(f"cost_model={cost_model}: choose one of {', '.join(COST_MODELS)}.")
    if cost_model == "aiconfigurator" and "calibrate" in options:
        raise ConfigError("cost_model=aiconfigurator predicts for a GPU of its tables; calibrate= fits this machine.")
    ds = draft_lengths(options["d"]) if "d" in options else None
    calibration, calibrated_on = None, None
    if "calibrate" in options:
        if options.get("gpu", "measured") != "measured":
            raise ConfigError(
                f"calibrate= predicts for the machine it measured: gpu=measured, not gpu={options['gpu']}."
            )
        if "engine" in options:
            raise ConfigError(
                f"calibrate= fits the engine that measured its runs, overheads included; engine={options['engine']} "
                "is for a GPU of the table."
            )
        if not str(options["calibrate"]).strip():  # (Path("") is the current folder: never meant)
            raise ConfigError("calibrate= is empty; give the run or sweep dir measured with baseline=true.")
        calibration, measured_target = calibration_points(Path(options["calibrate"]).expanduser())
        calibrated_on = calibration_what(Path(options["calibrate"]).expanduser())
        beside_steps = calibration_steps(Path(options["calibrate"]).expanduser())
        if "target.model" not in options and source is None and measured_target is not None:
            options["target.model"] = measured_target
    else:
        hw = _hardware(options, gpu_fields, eff_fields)  # checked before any config is read
        if cost_model == "aiconfigurator":
            hw = replace(hw, ops=AiconfiguratorOps(str(options["gpu"]), str(options.get("engine", "vllm"))))
    target_config, inputs, draft_configs = resolve_inputs(source, options, arch)
    target = shape_of(target_config, "target.model")
    fitted, calibration_warnings = None, []
    if calibration is not None:  # the machine measured, in place of a GPU of the table
        weights = str(options.get("weights", "bf16"))
        fitted = calibrate.fit(target, calibration, weights)
        calibrated = calibrate.errors(target, calibration, weights, everything=fitted)
        calibration_warnings = calibrate.implausible(fitted, [h for _, _, h in calibrated])
        fitted, beside = fit_beside(fitted, target, beside_steps, weights)
        hw = fitted.hardware(weights, ints(options.get("tp", 1), "tp")[0], options.get("expert_weights"))
    check_tp(target, hw.tp)
    draftings = []
    for drafter, found in inputs.items():
        draft = drafter_shape(drafter, target, draft_configs[drafter])
        if draft is not None:
            check_tp(draft, hw.tp, "the draft")
        drafting = drafting_of(drafter, found.acceptance, found.by_length, ds, draft)
        draftings.append(with_share(drafting, found.share))
    measured_lengths = sorted({length for d in draftings for length in d.al_by_length or {}})
    batch_sizes = ints(options.get("batch_sizes", DEFAULT_BATCH_SIZES), "batch_sizes")
    context_lens = ints(options.get("context_len", measured_lengths or DEFAULT_CONTEXT_LEN), "context_len")
    if 0 in batch_sizes or 0 in context_lens:
        raise ConfigError("batch_sizes and context_len are whole numbers >= 1.")
    points = predict(draftings, target, hw, batch_sizes, context_lens, ds)
    with_intervals(points, hw)
    with_sources(points, draftings, inputs)
    if not any(p["fits"] for p in points):
        least = min(points, key=lambda p: p["memory_gb"])
        check_fits(hw, least["memory_gb"], least["batch_size"], least["context_len"])
    result = {
        "gpu": gpu_record(hw),
        "tp": hw.tp,
        "weights": hw.weights,
        "expert_weights": expert_format(target, hw) if target.experts else None,
        "efficiency": asdict(hw.eff),
        "model": {
            "arch_overrides": arch,
            "layers": target.layers,
            "hidden_size": target.hidden,
            "g": target.g,
            "mla": target.mla,
            "active_params": target.active_params(),
            "total_params": target.total_params(),
        },
        "cost_model": cost_label(hw, fitted is not None, target),
        "engine": None if hw.engine is None else hw.engine.as_dict(),
        "speedup_interval": interval_source(points),
        "calibration": None
        if fitted is None
        else {
            "source": str(options["calibrate"]),
            "fit": asdict(fitted),
            "points": [
                {**asdict(p), "error": round(in_fit, 4), "held_out_error": None if math.isnan(h) else round(h, 4)}
                for p, in_fit, h in calibrated
            ],
            "held_out_bound": calibrate.HELD_OUT_BOUND,
            # fitted beside the three: the K=0 tax and T_draft, each point's error fitted and held out
            **beside,
            "fitted_beside": fitted_beside_line(beside),
            "warnings": calibration_warnings,
            "provenance": calibrated_on,
        },
        "provenance": {
            "source": prov.PREDICTED,
            "acceptance": {drafter: found.what for drafter, found in inputs.items()},
            "step_costs": step_costs_what(hw, calibrated_on, None if fitted is None else fitted_beside_line(beside)),
        },
        "draft_shares": {
            d.drafter: {
                "draft_share": inputs[d.drafter].share.value,
                "model_runner": inputs[d.drafter].share.model_runner,
                "undrafted_step": inputs[d.drafter].share.undrafted,
                **(
                    {"by_length": {length_label(t): v for t, v in d.share_by_length.items()}}
                    if d.share_by_length
                    else {}
                ),
            }
            for d in draftings
        },
        "notes": [f"calibration: {w}" for w in calibration_warnings]
        + calibration_notes(calibrated_on)
        + ([] if fitted is None else [f"calibration: {n}" for n in beside["notes"]])
        + [note for found in inputs.values() for note in found.notes]
        + share_notes(draftings, {drafter: found.share for drafter, found in inputs.items()}, hw),
        # the same acceptance as Dynamo's planner and mocker take it (reports/profile.py dynamo_flags)
        "dynamo_flags": {
            drafter: dynamo_flags(conditional_acceptance(found.acceptance.marginal), len(found.acceptance.marginal))
            for drafter, found in inputs.items()
            if found.acceptance.marginal is not None
        },
        # what those flags leave out: AIC's five slots hold five positions
        "dynamo_flags_notes": {
            drafter: note
            for drafter, found in inputs.items()
            if found.acceptance.marginal is not None
            and (note := dynamo_cut_note(found.acceptance.marginal)) is not None
        },
        "points": points,
        "best": with_best_sources(best(points), points),
        "schedules": {d.drafter: schedule(points, d.drafter, context_lens[0]) for d in draftings},
        "schedules_by_context_len": {
            str(c): {d.drafter: schedule(points, d.drafter, c) for d in draftings} for c in context_lens
        },
    }
    if measured_lengths:
        result["by_length"] = [
            length_section(length, draftings, inputs, target, hw, batch_sizes, ds) for length in measured_lengths
        ]
    if "slo.tokens_per_s_per_user" in options:
        wanted = options["slo.tokens_per_s_per_user"]
        if isinstance(wanted, bool) or not isinstance(wanted, (int, float)) or wanted <= 0:
            raise ConfigError(f"slo.tokens_per_s_per_user={wanted}: a number of tokens/s above 0.")
        chosen = serve_at_slo(points, hw.tp, context_lens[0], float(wanted))
        if chosen is not None:  # predicted absolute rates, with the range published figures put on them
            chosen = chosen | {
                "source": prov.PREDICTED,
                "output_tokens_per_s_interval": tokens_per_s_interval(chosen["output_tokens_per_s"]),
                "tokens_per_s_per_request_interval": tokens_per_s_interval(chosen["tokens_per_s_per_request"]),
                "interval_derived_on": TOKENS_PER_S_DERIVED_ON,
            }
        result["slo"] = {"tokens_per_s_per_user": wanted, "context_len": context_lens[0], "serve": chosen}
    if "out" in options:
        out = output_path(options["out"], "out")
    elif source is not None:
        out = source.parent if source.name == PROFILE_FILE else source
    else:
        out = Path("outputs/whatif") / datetime.now().strftime("%Y-%m-%d/%H-%M-%S")
    return result, out


def drafting_of(
    drafter: str, acceptance: Acceptance, by_length: dict[int, Acceptance], ds: list[int] | None, draft
) -> Drafting:
    """A drafter's AL by D (and per measured length where it has lengths) at the asked D (default:
    every D its acceptance holds at every length, up to vLLM's limit)."""
    held = set(acceptance.al_by_d).intersection(*(set(found.al_by_d) for found in by_length.values()))
    wanted = ds if ds is not None else sorted(held)
    for d in wanted:
        if d not in held:
            raise ConfigError(missing_d(drafter, d, acceptance, by_length))
    al_by_d = {d: acceptance.al_by_d[d] for d in wanted}
    if not by_length:
        return Drafting(drafter, al_by_d, draft)
    al_by_length = {tokens: {d: found.al_by_d[d] for d in wanted} for tokens, found in by_length.items()}
    labels = {tokens: length_label(tokens) for tokens in by_length}
    return Drafting(drafter, al_by_d, draft, al_by_length, labels)


def missing_d(drafter: str, d: int, acceptance: Acceptance, by_length: dict[int, Acceptance]) -> str:
    """Why a D asked for has no AL: a parallel drafter's profile holds the D it measured only; a
    serial one's rates end before it."""
    short = next((found for found in (acceptance, *by_length.values()) if d not in found.al_by_d), acceptance)
    if short.measured_per_k:
        measured = ", ".join(map(str, sorted(short.al_by_d)))
        return (
            f"drafter={drafter} was measured at D={measured} only (measured_per_k: it drafts in parallel, so its AL at "
            f"another D is measured there, never derived); D={d} was not measured: give d={measured.split(', ')[-1]}."
        )
    return f"acceptance is known for {max(short.al_by_d)} positions; D={d} needs {d}."


def al_source(found: DrafterInput, drafting: Drafting, d: int, context: int) -> str:
    """What the AL of a point at (D, context) is: the source's own figure or derived."""
    length = drafting.measured_at(context)
    acceptance = found.acceptance if length is None else found.by_length[length]
    return acceptance.source_by_d[d]


def with_sources(points: list[dict[str, Any]], draftings: list[Drafting], inputs: dict[str, DrafterInput]) -> None:
    """Each point says what it is: its speedup predicted, its AL measured, derived, fake, given…"""
    by_drafter = {d.drafter: d for d in draftings}
    for p in points:
        p["source"] = prov.PREDICTED
        p["al_source"] = al_source(inputs[p["drafter"]], by_drafter[p["drafter"]], p["d"], p["context_len"])


def with_best_sources(chosen: list[dict[str, Any]], points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The best per (B, context) with the AL and its source of the point each took (none for plain)."""
    at = {(p["batch_size"], p["context_len"], p["drafter"], p["d"]): p for p in points}
    out = []
    for b in chosen:
        point = at.get((b["batch_size"], b["context_len"], b["drafter"], b["d"]))
        out.append(b if point is None else b | {"al": point["al"], "al_source": point["al_source"]})
    return out


def step_costs_what(hw: Hardware, calibrated_on: dict[str, Any] | None, beside: str | None = None) -> str:
    """What the step costs the predictions rest on are (calibrated: with what was fitted beside
    the three constants, `beside`)."""
    if calibrated_on is None:
        return f"the step-cost model for {hw.gpu.name}"
    fake = " (runner=fake: a script's step times, not a machine's)" if calibrated_on["fake"] else ""
    fitted = "" if beside is None else f" ({beside})"
    return "fitted to the step costs of " + ", ".join(calibrated_on["runs"]) + fitted + fake


def calibration_notes(calibrated_on: dict[str, Any] | None) -> list[str]:
    if calibrated_on is None or not calibrated_on["fake"]:
        return []
    return [
        "calibration: fitted on runs of the scripted engine (runner=fake): their step times are a script's, so the "
        "machine predicted is no real one [fake]"
    ]


def interval_source(points: list[dict[str, Any]]) -> str:
    """What every point's speedup_interval is, and which points' path no published case scored."""
    unscored = sorted({p["speedup_interval_derived_on"] for p in points} - {HELD_OUT.derived_on})
    widened = "".join(f"; ranges marked *: {u.removeprefix(HELD_OUT.derived_on + '; ')}" for u in unscored)
    return f"each point's speedup_interval: the {HELD_OUT.describe()}{widened}"


def with_intervals(points: list[dict[str, Any]], hw: Hardware) -> None:
    """Each point's speedup_interval and the kind of case it was derived on
    (speclens/gpu_model/model_error.py interval_for: widened where the path was never scored), its
    top held at the point's tokens per step, which no speedup exceeds (a verify costs at least a
    plain step on any real engine, whatever the model's error)."""
    for p in points:
        p["speedup_interval"], p["speedup_interval_derived_on"] = interval_for(
            p["speedup"], p["tokens_per_step"], hw, p["drafter"]
        )


def interval_label(interval: list[float] | None, unscored: bool = False) -> str:
    """`[low, high]`, with `*` where the interval was widened for a path no published case scored."""
    return "-" if not interval else f"[{interval[0]:.2f}, {interval[1]:.2f}]" + ("*" if unscored else "")


def with_share(drafting: Drafting, share: Share) -> Drafting:
    """The drafting with its share of drafting steps (1 where its profile did not record one)."""
    return replace(
        drafting,
        draft_share=1.0 if share.value is None else share.value,
        share_by_length=share.by_length,
        undrafted=share.undrafted,
    )


def gpu_record(hw: Hardware) -> dict[str, Any]:
    """The GPU as whatif.json holds it: a calibrated machine's memory is not known (every point is
    taken to fit), so it is null, not Infinity, which is not JSON."""
    record = asdict(hw.gpu)
    if not math.isfinite(record["memory_gb"]):
        record["memory_gb"] = None
        record["memory_gb_unknown"] = "a calibrated machine: its memory is not modelled, every point is taken to fit"
    return record


def share_notes(draftings: list[Drafting], shares: dict[str, Share], hw: Hardware | None = None) -> list[str]:
    """What the predictions assume of each drafter's drafting steps, where a reader needs telling
    (with `hw`, the K=0 tax a plain undrafted step pays where it is not 0: calibrate=)."""
    out = []
    taxed = hw is not None and (hw.eff.k0_tax_ms or hw.eff.k0_tax_us_per_request)
    for drafting in draftings:
        share = shares[drafting.drafter]
        if share.value is None:
            out.append(
                f"{drafting.drafter}: its profile does not record the share of passes that draft (written "
                "before speclens did): every step is taken as drafting, so its speedups are upper bounds"
            )
        elif share.value < 1:
            runner = f" on Model Runner {share.model_runner.upper()}" if share.model_runner else ""
            cost = "a full verify" if share.undrafted == "verify" else "a plain step"
            if taxed and share.undrafted == "plain":
                cost += " plus the K=0 tax fitted (calibration)"
            out.append(
                f"{drafting.drafter}: drafts on {share.value:.0%} of target passes{runner}; tokens per step = "
                f"1 + {share.value:.2f}·(AL − 1), and a step without a draft costs {cost}"
            )
    return out


PREDICTED = "predicted by the step-cost model from the acceptance measured at this length"


def length_section(
    length: int,
    draftings: list[Drafting],
    inputs: dict[str, DrafterInput],
    target: ModelShape,
    hw: Hardware,
    batch_sizes: list[int],
    ds,
) -> dict[str, Any]:
    """At one measured length: the AL measured there (at the D measured only; what its source is
    where not measured) and the AL the points derive from its rates at a smaller D, guidelines 2 and
    3 with the share of the step attention takes, and the best (drafter, D) per B, all but the AL
    predicted."""
    guidelines = at_length(target, hw, length, batch_sizes)
    points = predict(draftings, target, hw, batch_sizes, [length], ds)
    with_intervals(points, hw)
    with_sources(points, draftings, inputs)
    here = {drafter: found.by_length[length] for drafter, found in inputs.items() if length in found.by_length}
    used = {d.drafter: d.al_by_length[length] for d in draftings if d.al_by_length and length in d.al_by_length}
    return {
        "length": length_label(length),
        "context_len": length,
        "source": PREDICTED,
        "al_measured": {drafter: {str(d): found.al_by_d[d] for d in found.own_ds} for drafter, found in here.items()},
        "al_measured_source": {drafter: found.source_by_d[found.own_ds[-1]] for drafter, found in here.items()},
        "al_derived": {
            drafter: {
                str(d): al for d, al in sorted(used[drafter].items()) if prov.is_derived(here[drafter].source_by_d[d])
            }
            for drafter in here
            if drafter in used
        },
        "g": guidelines.g,
        "guideline_2_d": guidelines.starting_d,
        "guideline_3_ds": guidelines.tile_aligned,
        "by_batch_size": [asdict(b) for b in guidelines.by_batch],
        "best": with_best_sources(best(points), points),
    }


def length_lines(result: dict[str, Any]) -> list[str]:
    """Per measured length: guidelines 2 and 3, the attention share and the best D, one block each."""
    out = []
    for section in result.get("by_length") or []:
        al = "; ".join(measured_there(section, drafter) for drafter in section["al_measured"])
        g2 = section["guideline_2_d"]
        out.append(
            f"at {section['length']} ({section['context_len']} tokens; AL measured there: {al}): guideline 2 "
            + (f"D={g2}" if g2 is not None else "does not apply")
            + f" (G={section['g']}), guideline 3 D in {section['guideline_3_ds'][:4]}; predicted:"
        )
        best_at = {b["batch_size"]: b for b in section["best"]}
        for b in section["by_batch_size"]:
            knees = ", ".join(map(str, b["knees"][:4])) or "none up to D=64"
            chosen = best_at.get(b["batch_size"])
            what = best_label(chosen)
            at_g2 = "" if g2 is None else f", {b['attention_share_at_starting_d']:.0%} at D={g2}"
            out.append(
                f"  B={b['batch_size']}: attention {b['attention_share_plain']:.0%} of T_verif(B){at_g2}; "
                f"T_verif steps up after D = {knees}; best {what}"
            )
    return out


def measured_there(section: dict[str, Any], drafter: str) -> str:
    """`eagle3 D=3: 1.80 (D=1, 2 derived from its rates [derived])`: the AL a length's profile
    measured, marked where its source is not a measurement, and the D derived from it."""
    measured = section["al_measured"][drafter]
    source = section.get("al_measured_source", {}).get(drafter, prov.MEASURED)
    text = f"{drafter} " + ", ".join(f"D={d}: {v:.2f}" for d, v in measured.items()) + mark(source)
    derived = section.get("al_derived", {}).get(drafter)
    if derived:
        text += f" (D={', '.join(derived)} derived from its rates{mark(prov.derived_from(source))})"
    return text


def table(result: dict[str, Any]) -> str:
    """The best per (B, context length), predicted; where plain decoding wins, its own step. With
    acceptance per length, the length whose AL each row took."""
    by_length = any("al_measured_at" in p for p in result["points"])
    rows = []
    for b in result["best"]:
        here = [
            p for p in result["points"] if (p["batch_size"], p["context_len"]) == (b["batch_size"], b["context_len"])
        ]
        chosen = next((p for p in here if (p["drafter"], p["d"]) == (b["drafter"], b["d"])), None)
        t_plain = here[0]["t_plain_ms"]
        al, per_step, t_step, bound = (
            (1.0, 1.0, t_plain, "-")
            if chosen is None
            else (chosen["al"], chosen["tokens_per_step"], chosen["t_step_ms"], chosen["bound"])
        )
        al_mark = "" if chosen is None else mark(chosen.get("al_source", prov.MEASURED))
        what = "plain" if b["drafter"] == "none" else f"{b['drafter']} d={b['d']}"
        rows.append([str(b["batch_size"]), str(b["context_len"]), what, f"{al:.2f}{al_mark}", f"{per_step:.2f}"])
        interval = None if chosen is None else chosen["speedup_interval"]
        unscored = chosen is not None and chosen.get("speedup_interval_derived_on", "") != HELD_OUT.derived_on
        shown = interval_label(interval, unscored)
        rows[-1] += [f"{t_plain:.2f}", f"{t_step:.2f}", f"{b['speedup']:.2f}", shown, bound]
        if by_length:
            rows[-1].append("-" if chosen is None else chosen.get("al_measured_at", "-"))
    header = [
        "B",
        "context",
        "best",
        "AL",
        "tokens/step",
        "T_verif(B) ms",
        "T_step ms",
        "speedup",
        "80% range",
        "bound",
    ]
    return text_table(header + (["AL measured at"] if by_length else []), rows)


def slo_line(result: dict[str, Any]) -> str | None:
    """The one-line answer to slo.tokens_per_s_per_user= (None where it was not asked)."""
    slo = result.get("slo")
    if slo is None:
        return None
    wanted, context, serve = slo["tokens_per_s_per_user"], slo["context_len"], slo["serve"]
    if serve is None:
        return f"no setting gives {wanted:g} tokens/s per user at context {context} on {result['gpu']['name']}"
    what = "plain decoding" if serve["mechanism"] == "plain" else f"{serve['mechanism']} d={serve['d']}"
    gpu_low, gpu_high = serve.get("output_tokens_per_s_interval") or (None, None)
    user_low, user_high = serve.get("tokens_per_s_per_request_interval") or (None, None)
    line = (
        f"serve {what} up to B={serve['batch_size']}: {serve['output_tokens_per_s']:,.0f} tokens/s per GPU"
        + ("" if gpu_low is None else f" [{gpu_low:,.0f}, {gpu_high:,.0f}]")
        + f", {serve['tokens_per_s_per_request']:.0f} tokens/s per user"
        + ("" if user_low is None else f" [{user_low:.0f}, {user_high:.0f}]")
        + f" (>= {wanted:g}) at context {context}, predicted"
    )
    if user_low is not None and user_low < wanted:
        line += f"; its 80 % range reaches below {wanted:g} tokens/s per user: measure before relying on it"
    return line


@guarded
def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    if "--list-gpus" in argv:
        header = ["gpu", "bf16 TFLOPS", "fp8 TFLOPS", "HBM TB/s", "memory GB", "NVLink GB/s"]
        rows = [
            [g.name, f"{g.bf16_tflops:g}", f"{g.fp8_tflops:g}" if g.fp8_tflops else "-", f"{g.hbm_tb_s:g}"]
            + [f"{g.memory_gb:g}", f"{g.nvlink_gb_s:g}" if g.nvlink_gb_s else "- (PCIe)"]
            for g in GPUS.values()
        ]
        print(text_table(header, rows))
        return 0
    result, out = build(argv)
    output_dir(output_path(out, "out"), "out")
    write_json_atomic(result, out / WHATIF_FILE)
    gpu = result["gpu"]["name"]
    experts = f", experts {result['expert_weights']}" if result["expert_weights"] else ""
    engine = "the engine calibrated" if result["engine"] is None else result["engine"]["label"]
    print(
        f"speclens whatif: {gpu}, tp={result['tp']}, weights={result['weights']}{experts}; engine: {engine}; "
        f"cost model: {result['cost_model']}"
    )
    for line in acceptance_lines(result):
        print(line)
    if result["model"]["arch_overrides"]:
        print("arch overrides: " + ", ".join(f"{k}={v}" for k, v in result["model"]["arch_overrides"].items()))
    if result["calibration"] is not None:
        fitted = result["calibration"]["fit"]
        fake = mark(prov.FAKE) if (result["calibration"].get("provenance") or {}).get("fake") else ""
        print(
            f"calibrated on {result['calibration']['source']}{fake}: {fitted['hbm_tb_s'] * 1e3:.1f} GB/s, "
            f"{fitted['tflops']:.3f} TFLOPS, {fitted['overhead_ms']:.2f} ms a pass, attention "
            + ("in 128-row tiles" if fitted["tile_rows"] else "on the real query rows")
        )
        for p in result["calibration"]["points"]:
            held = "-" if p["held_out_error"] is None else f"{p['held_out_error']:+.1%}"
            print(
                f"  B={p['batch_size']} D={p['d']} context {p['context']}: measured {p['t_ms']:.2f} ms, "
                f"fit {p['error']:+.1%}, held out {held}"
            )
        for line in beside_lines(result["calibration"]):
            print(line)
    print(table(result))
    print(f"predicted; {result['speedup_interval']}")
    for line in result["notes"]:
        print(line)
    for drafter, flags in result["dynamo_flags"].items():
        print(f"{drafter} for Dynamo's planner and mocker: {flags}")
        if drafter in result["dynamo_flags_notes"]:
            print(f"  {result['dynamo_flags_notes'][drafter]}")
    for line in length_lines(result):
        print(line)
    left_out = sum(not p["fits"] for p in result["points"])
    if left_out:
        print(f"{left_out} points left out: weights and KV cache above 90% of the GPU's memory")
    line = slo_line(result)
    if line:
        print(line)
    page = write_page(result, out, line)
    print(f"written: {out / WHATIF_FILE}, {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
