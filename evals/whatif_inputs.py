"""What `evals.whatif` predicts from, per drafter: its acceptance (measured profiles, chosen by
identity, per length where measured per length; or given: al=, acceptance=, draft_share=) and
its share of target passes that draft, with the notes a reader needs about either."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from drafters import REGISTRY
from reports.profile_choice import choose_profiles, identity_of
from speclens import checkpoints
from speclens import provenance as prov
from speclens.config import VLLM_MAX_SPEC_LEN
from speclens.errors import ConfigError, CorruptRecord
from speclens.figures.acceptance import al_at, check_rates, marginal_from_conditional
from speclens.file_formats.profile_file import (
    PROFILE_FILE,
    check_al_by_k,
    profile_provenance,
    read_profiles,
)
from speclens.file_formats.run_files import read_stamp
from speclens.gpu_model.draft_cost import MECHANISMS, needs_draft_config
from speclens.gpu_model.whatif import (
    undrafted_step,
)
from speclens.model_facts import ModelFacts, text_config
from speclens.options import nearest, strict_json_loads
from speclens.provenance import Provenance

MODEL_RUNNERS = ("v1", "v2")


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


def read_checkpoint_config(ref: str, key: str) -> dict[str, Any]:
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
class AcceptanceInput:
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


def serial_acceptance(marginal: list[float], source: str, derived_below: bool = True) -> AcceptanceInput:
    """A chain's AL at every D up to its rates' (at most vLLM's limit): at the rates' own D the
    source's figure; below it derived from them (`derived_below`), or the source's where the rates
    were given per position (acceptance=)."""
    top = min(len(marginal), VLLM_MAX_SPEC_LEN)
    ds = range(1, top + 1)
    return AcceptanceInput(
        {d: al_at(marginal, d) for d in ds},
        {d: source if d == len(marginal) or not derived_below else prov.derived_from(source) for d in ds},
        marginal,
    )


def profile_acceptance(profiles: list[dict[str, Any]], source: str, where: str) -> AcceptanceInput:
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
    return AcceptanceInput(kept, {d: source for d in kept}, marginal, measured_per_k=True)


@dataclass(frozen=True)
class DrafterInput:
    """One drafter's acceptance as whatif takes it: pooled and per measured length bucket, its
    share of drafting steps, what its figures are (whatif.json `provenance.acceptance`), and the
    notes a reader needs (what was passed over, what was assumed)."""

    acceptance: AcceptanceInput
    share: Share
    what: dict[str, Any]
    by_length: dict[int, AcceptanceInput] = field(default_factory=dict)
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


def profile_what(what: Provenance | None, acceptance: AcceptanceInput, where: str) -> dict[str, Any]:
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
        acceptance = AcceptanceInput({ds[0]: float(al)}, {ds[0]: GIVEN})
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
    target_config = read_checkpoint_config(target_ref, "target.model")
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
        draft_configs[drafter] = read_checkpoint_config(ref, "drafter.model") if ref else None
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
