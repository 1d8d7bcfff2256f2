"""speculation_profile.json, the file format (its reader, checks and writer; reports/profile.py
builds a run's profiles from its step records): per mechanism, D and domain, the acceptance
profile measured from the step records — AL, the marginal per-position acceptance (P(the first k+1 drafts all accepted),
what vLLM's synthetic rejection sampler takes as `synthetic_acceptance_rates`) and the conditional
one (P(draft k+1 accepted | the first k were)) — with the vLLM speculative config that reproduces
it on any target: the zero-cost proposer (D free proposals per step) verified by the synthetic
sampler, so verification can be timed at this acceptance without a trained drafter.

Each profile also carries the keys of the speculation_profile.json proposed for NVIDIA
Model-Optimizer's specdec_bench (PR #2247, not merged): `num_speculative_tokens`,
`marginal_accept_rates`, `conditional_accept_rates`, `mean_accept_length`, so one entry can be
handed to tools reading that layout (`marginal_accept_rates` for vLLM's synthetic mode,
`conditional_accept_rates` for Dynamo's mocker).

For NVIDIA's planners (Model-Optimizer PRs #2313, #2315, #2316), each profile also says `method`
(the drafter), `acceptance_length_by_k` (AL at every k up to D, from the marginal rates: a serial
drafter's acceptance at a smaller k is a prefix of its acceptance at D; a parallel drafter's,
drafter.parallel_drafting=true, is not, so its profile holds its own D only and says
`measured_per_k`: true), `max_num_speculative_tokens`
(the largest k the profile holds: its D) and `measurement_conditions` (target, drafter checkpoint,
dataset, temperature, model runner, engine and its version). `dynamo_flags` gives a profile as
Dynamo's planner and mocker take it (`--aic-nextn`, `--aic-nextn-accept-rates`: conditional rates
in AIC's five slots, Dynamo PR #10436). `read_profiles` also reads files in Model-Optimizer's
proposed layout (one profile or a list, keyed `num_speculative_tokens`, `marginal_accept_rates` or
`conditional_accept_rates`, `method`), so `evals.whatif` and `acceptance.synthetic=` take profiles
other tools wrote.

Each profile also has `draft_share` (drafted steps / target passes, metrics.draft_share),
`tokens_per_step` and the `model_runner` that measured them: a speedup follows tokens per step,
1 + draft_share·(AL − 1), and on Model Runner V1 a lookup drafter drafts on some steps only.

For the planners' newest forms each profile also has aiconfigurator's `nextn` (D) and
`nextn_accepted` (accepted draft tokens per decode step: (AL − 1)·draft_share; aiconfigurator PR
#1383), its SDK's `speculative_decoding_profile.expected_accepted_tokens` (the same figure, PR #1405)
and `dynamo` (`aic_nextn`, `aic_nextn_accept_rates`: the conditional rates in Dynamo's five slots).

Checked on writing: 1 + Σ marginal = AL and the marginal never increases; on reading, those and
every planner field against the profile's own figures (check_planner_fields).

Each profile also has `provenance` (speclens/provenance.py): what its figures are (measured,
synthetic, fake), the runner, engine, dtype and model runner that measured them and the settings
axis (`verify.method=block`, `kv_cache_dtype=fp8`), so a sweep's gathered file tells the profiles of
one drafter under different settings apart (reports/profile_choice.py picks one by that whole
identity or refuses, naming the differences). A run's file written before profiles carried it gets it on reading
from the run's summary and stamp. Model-Optimizer's schema "1.0" profile (one dict, as specdec_bench
writes it, or a list of them) is read with its own record: `measured: false` (a stub) and a failed
`validation` are refused, `verification_method: block` is the setting `verify.method=block`, and
`accept_length_model: measured_per_k` holds AL at the K it measured only (`measured_per_k`).

Where the prompts state their lengths (long context), a run also has one profile per length
bucket over all its prompts of that length (`domain` all, with `length` and `input_tokens`), and a
ranked sweep's file gains `num_speculative_tokens_by_context`: the (B, context) -> D table of the
serve.json beside it, one row per mechanism and length bucket with the contexts it serves and its
`num_speculative_tokens_per_batch_size` (speclens/file_formats/serve_file.py `context_table`). Files without lengths
are as before (schema version 1: readers of it ignore the added key).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from speclens import provenance as prov
from speclens.errors import CorruptRecord, SpeclensError
from speclens.figures import metrics
from speclens.figures.acceptance import marginal_from_conditional
from speclens.file_formats.run_files import read_stamp
from speclens.file_formats.summary_file import SUMMARY_FILE, read_summary
from speclens.files import write_json_atomic
from speclens.provenance import Provenance
from speclens.schema import AL, OPEN_RECORD_CONFIG, Count, DraftLength, Rate, parse, record

PROFILE_FILE = "speculation_profile.json"

PROFILE_VERSION = 1


def planner_fields(d: int, al: float, conditional: list[float | None], draft_share: float | None) -> dict[str, Any]:
    """A profile as the planners take it, beside Model-Optimizer's layout:
    - aiconfigurator (PR #1383): `nextn`, the draft length, and `nextn_accepted`, the average
      accepted draft tokens per decode step (each step yields 1 + it tokens): (AL − 1) times the
      share of steps that drafted, where a lookup drafter drafts on some steps only;
    - its SDK's SpeculativeDecodingProfile (PR #1405): `expected_accepted_tokens`, the same figure;
    - Dynamo's planner and mocker: `aic_nextn` and the conditional rates in its five slots
      (dynamo_flags; positions past five are cut).
    read_profiles checks each against the others and against AL (check_planner_fields)."""
    accepted = (al - 1.0) * (1.0 if draft_share is None else draft_share)
    slots = [0.0 if c is None else float(c) for c in conditional[:DYNAMO_SLOTS]]
    return {
        "nextn": d,
        "nextn_accepted": accepted,
        "speculative_decoding_profile": {"expected_accepted_tokens": accepted},
        "dynamo": {
            "aic_nextn": min(d, DYNAMO_SLOTS),
            "aic_nextn_accept_rates": slots + [0.0] * (DYNAMO_SLOTS - len(slots)),
        },
    }


def check_planner_fields(p: dict[str, Any], where: str) -> None:
    """A speclens profile's planner fields (planner_fields) agree with its own figures: the mean
    (1 + Σ marginal = AL), the marginal never rising, `nextn` its D, `nextn_accepted` in [0, nextn]
    and equal to its AL and draft share, the SDK's figure equal to it, Dynamo's slots its
    conditional rates. CorruptRecord naming the first that does not (profiles before these fields
    were written are read as they are)."""
    if "nextn" not in p:
        return
    marginal, al, d = p["marginal"], p["al"], p["d"]
    expected = planner_fields(d, al, p.get("conditional") or [], p.get("draft_share"))
    checks = {
        "mean_accept_length": abs(1.0 + sum(marginal) - al) <= 1e-6,
        "marginal": all(b <= a + 1e-12 for a, b in zip(marginal, marginal[1:])),
        "nextn": p["nextn"] == d,
        "nextn_accepted": _is_number(p.get("nextn_accepted"))
        and 0 <= p["nextn_accepted"] <= d
        and abs(p["nextn_accepted"] - expected["nextn_accepted"]) <= 1e-6,
        "speculative_decoding_profile": p.get("speculative_decoding_profile")
        == {"expected_accepted_tokens": p["nextn_accepted"]},
        "dynamo": p.get("dynamo") == expected["dynamo"],
    }
    bad = next((key for key, ok in checks.items() if not ok), None)
    if bad is not None:
        raise CorruptRecord(
            f"{where}: drafter={p['drafter']} d={d}: its {bad} ({p.get(bad, marginal)!r}) disagrees with its AL "
            f"{al:.4g}, rates and draft share (expected {expected.get(bad, 'a mean of 1 + Σ marginal, never rising')})"
        )


def read_stamp_or_empty(run_dir: Path) -> dict[str, Any]:
    """The stamp, or {} where it is missing or damaged: what a profile says of its conditions is then unknown."""
    try:
        return read_stamp(run_dir)
    except CorruptRecord:
        return {}


# Model-Optimizer's proposed layout: what one of its profiles holds (with one of its rate lists).
FOREIGN_KEYS = ("num_speculative_tokens",)

FOREIGN_RATES = ("marginal_accept_rates", "conditional_accept_rates")

# The runner a profile of Model-Optimizer's layout names (its specdec_bench measured it).
FOREIGN_RUNNER = "specdec_bench"

# Its verification methods that are speclens's default (Model-Optimizer's name, speclens's).
STANDARD_VERIFICATION = ("longest_prefix", "standard")

# Its accept_length_model: a chain extrapolates over K from the rates; measured_per_k does not.
ACCEPT_LENGTH_MODELS = ("chain_analytic", "measured_per_k")

# Model-Optimizer's own tolerance on 1 + Σ marginal against the mean (specdec_bench's
# `_consistency_check`), applied where a profile of its schema records no validation.
MEAN_TOLERANCE = 0.02


def from_foreign(entry: Any, path: Path, index: int | None = None) -> dict[str, Any]:
    """A profile in Model-Optimizer's layout as speclens's (domain `all`; the drafter its `method`,
    else `unknown`; `source_path` the file, and its place in a list), or CorruptRecord naming what
    it lacks or breaks: a stub (`measured: false`) and a profile whose own validation failed too."""
    where = str(path) if index is None else f"{path} (profile {index + 1})"
    if not isinstance(entry, dict) or "num_speculative_tokens" not in entry:
        raise CorruptRecord(f"{where}: a profile without num_speculative_tokens")
    _check_schema(entry, where)
    d = entry["num_speculative_tokens"]
    if not isinstance(d, int) or isinstance(d, bool) or d < 1:
        raise CorruptRecord(f"{where}: num_speculative_tokens={d!r} is not a draft length (a whole number >= 1)")
    if entry.get("measured") is False:
        raise CorruptRecord(
            f"{where}: measured: false, a placeholder written before any acceptance was measured (its rates "
            f"are no measurement, mean_accept_length {entry.get('mean_accept_length')}); measure "
            f"method={entry.get('method')} at num_speculative_tokens={d}, then give that profile."
        )
    if entry.get("marginal_accept_rates") is not None:
        marginal = entry["marginal_accept_rates"]
    elif entry.get("conditional_accept_rates") is not None:
        conditional = entry["conditional_accept_rates"]
        if not isinstance(conditional, list) or not all(_is_number(c) for c in conditional):
            raise CorruptRecord(f"{where}: conditional_accept_rates={conditional!r} is not a list of rates")
        marginal = marginal_from_conditional(list(conditional))
    else:
        raise CorruptRecord(f"{where}: a profile with neither marginal_accept_rates nor conditional_accept_rates")
    if (
        not isinstance(marginal, list)
        or len(marginal) != d
        or not all(_is_number(m) and 0 <= m <= 1 for m in marginal)
        or any(b > a + 1e-9 for a, b in zip(marginal, marginal[1:]))
    ):
        raise CorruptRecord(
            f"{where}: its acceptance rates are not {d} non-increasing rates in [0, 1] (num_speculative_tokens={d})"
        )
    marginal = [float(m) for m in marginal]
    _check_own_validation(entry, marginal, where)
    measured_per_k = _accept_length_model(entry, where) == "measured_per_k"
    al = 1.0 + sum(marginal)
    by_k = (
        _foreign_al_by_k(entry, d, al, where)
        if measured_per_k
        else {str(k): 1.0 + sum(marginal[:k]) for k in range(1, d + 1)}
    )
    drafter = str(entry.get("method") or "unknown")
    return {
        "drafter": drafter,
        "d": d,
        "domain": "all",
        "segment": "all",
        "al": al,
        "marginal": marginal,
        "conditional": metrics.conditional_acceptance(marginal),
        "acceptance_length_by_k": by_k,
        "measured_per_k": measured_per_k,
        "source_layout": "model-optimizer",
        "source_path": where,
        "provenance": foreign_provenance(entry, where).to_dict(),
        **{k: entry[k] for k in ("measurement_conditions",) if k in entry},
    }


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_schema(entry: dict[str, Any], where: str) -> None:
    """Model-Optimizer's schema "1.x" (or none: the layout it proposed first)."""
    version = entry.get("schema_version")
    if version is not None and not (isinstance(version, str) and version.split(".")[0] == "1"):
        raise CorruptRecord(f"{where}: schema_version {version!r} is not Model-Optimizer's 1.x, which speclens reads")


def _check_own_validation(entry: dict[str, Any], marginal: list[float], where: str) -> None:
    """Refuse a profile whose own self-checks failed (its `validation`), or, where a profile of the
    versioned schema records none, whose mean disagrees with its rates as those checks measure it:
    such rates were cut short of the K measured, so they describe another drafter than was measured."""
    implied = 1.0 + sum(marginal)
    mean = entry.get("mean_accept_length")
    validation = entry.get("validation")
    if isinstance(validation, dict):
        failed = [
            name for name, check in validation.items() if isinstance(check, dict) and check.get("passed") is False
        ]
        if failed:
            raise CorruptRecord(
                f"{where}: its own validation failed ({', '.join(failed)}): mean_accept_length {mean} against "
                f"{implied:.4g} from its acceptance rates; its rates do not describe what was measured "
                "(cut short of the K measured?), so it is not used."
            )
        return
    if "schema_version" in entry and _is_number(mean) and abs(mean - implied) > MEAN_TOLERANCE:
        raise CorruptRecord(
            f"{where}: mean_accept_length {mean:g} against {implied:.4g} from its acceptance rates (Model-Optimizer's "
            f"own check allows {MEAN_TOLERANCE:g}); its rates do not describe what was measured, so it is not used."
        )


def _accept_length_model(entry: dict[str, Any], where: str) -> str:
    model = entry.get("accept_length_model")
    if model is None:
        return "chain_analytic"
    if model not in ACCEPT_LENGTH_MODELS:
        raise CorruptRecord(f"{where}: accept_length_model={model!r} is not one of {', '.join(ACCEPT_LENGTH_MODELS)}")
    return str(model)


def _foreign_al_by_k(entry: dict[str, Any], d: int, al: float, where: str) -> dict[str, float]:
    """A measured_per_k profile's AL at each K it measured (its accept_length_by_k; its own K at least)."""
    found = entry.get("accept_length_by_k") or {}
    if not isinstance(found, dict):
        raise CorruptRecord(f"{where}: accept_length_by_k={found!r} is not a map of K to AL")
    return check_al_by_k(found | {str(d): al}, where)


def check_al_by_k(found: Any, where: str) -> dict[str, float]:
    """A profile's measured AL by K, checked: whole K >= 1, each AL in [1, 1 + K]."""
    if not isinstance(found, dict) or not found:
        raise CorruptRecord(f"{where}: its AL by K ({found!r}) is not a map of K to AL")
    out = {}
    for key, value in found.items():
        k = int(key) if isinstance(key, str) and key.isdigit() else None
        if k is None or k < 1 or not _is_number(value) or not 1 <= value <= 1 + k:
            raise CorruptRecord(f"{where}: AL {value!r} at K={key!r} is not an AL at a draft length (1 <= AL <= 1 + K)")
        out[str(k)] = float(value)
    return out


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def foreign_provenance(entry: dict[str, Any], where: str) -> Provenance:
    """What a Model-Optimizer profile is: measured by specdec_bench on the engine its conditions
    name, under block verification where it says so (the setting `verify.method=block`)."""
    conditions = entry.get("measurement_conditions")
    conditions = conditions if isinstance(conditions, dict) else {}
    method = entry.get("verification_method")
    if method is not None and not isinstance(method, str):
        raise CorruptRecord(f"{where}: verification_method={method!r} is not a method's name")
    setting = "" if method is None or method in STANDARD_VERIFICATION else f"verify.method={method}"
    return Provenance(
        source=prov.MEASURED,
        runner=FOREIGN_RUNNER,
        engine=_text(conditions.get("engine")),
        engine_version=_text(conditions.get("engine_version")),
        dtype=_text(conditions.get("dtype")),
        setting=setting,
    )


# Dynamo's planner and mocker take acceptance in AIC's five slots (Dynamo PR #10436).
DYNAMO_SLOTS = 5


def dynamo_flags(conditional: list[float | None], d: int) -> str:
    """A profile as Dynamo's mocker and planner take it (`--aic-nextn N --aic-nextn-accept-rates
    c1,…,c5`: conditional rates in AIC's five slots, zero-padded; N at most 5)."""
    slots = [0.0 if c is None else float(c) for c in conditional[:DYNAMO_SLOTS]]
    slots += [0.0] * (DYNAMO_SLOTS - len(slots))
    return f"--aic-nextn {min(d, DYNAMO_SLOTS)} --aic-nextn-accept-rates " + ",".join(f"{c:.4g}" for c in slots)


def dynamo_cut_note(marginal: list[float]) -> str | None:
    """What Dynamo's flags leave out of a profile measured past its five slots (None where nothing)."""
    d = len(marginal)
    if d <= DYNAMO_SLOTS:
        return None
    return (
        f"Dynamo's flags hold {DYNAMO_SLOTS} positions: positions {DYNAMO_SLOTS + 1} to {d} were cut, so Dynamo "
        f"models this drafter at D={DYNAMO_SLOTS} at most, AL {1.0 + sum(marginal[:DYNAMO_SLOTS]):.2f} "
        f"(this profile: {1.0 + sum(marginal):.2f} at D={d})"
    )


def read_profiles(run_dir: Path) -> list[dict[str, Any]]:
    """A run's profiles from its speculation_profile.json (or a file of that name in
    Model-Optimizer's layout: one profile or a list), or CorruptRecord for a file that is not
    readable JSON in either layout (of this version or an earlier one). Profiles written before
    they carried provenance get the run's, where `run_dir` holds a run."""
    path = run_dir / PROFILE_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptRecord(f"{path} is unreadable ({exc})") from None
    if isinstance(data, dict) and "num_speculative_tokens" in data:  # one profile (specdec_bench writes one dict)
        return [from_foreign(data, path)]
    if isinstance(data, list) and data and all(isinstance(e, dict) and "num_speculative_tokens" in e for e in data):
        return [from_foreign(e, path, i if len(data) > 1 else None) for i, e in enumerate(data)]
    version = data.get("schema_version") if isinstance(data, dict) else None
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= PROFILE_VERSION:
        raise CorruptRecord(
            f"{path} has no schema_version this speclens reads (1 to {PROFILE_VERSION}; it has {version!r})"
        )
    parse(ProfileFile, data, path, "speculation profile file")
    profiles = data["profiles"]
    for p in profiles:
        check_profile(p, str(path))
    if any("provenance" not in p for p in profiles):
        found = run_provenance(run_dir)
        if found is not None:
            return [p if "provenance" in p else p | {"provenance": found} for p in profiles]
    return profiles


@record
class ProfileEntry:
    """One profile of speclens's layout: the fields every reader takes, with their types and ranges
    (the planners' fields beside them are checked against these figures: check_planner_fields)."""

    __pydantic_config__ = OPEN_RECORD_CONFIG

    drafter: str
    d: DraftLength
    domain: str
    al: AL
    marginal: list[Rate]
    segment: str = "all"
    input_tokens: Count | None = None
    draft_share: Rate | None = None


@record
class ProfileFile:
    """speculation_profile.json in speclens's layout (Model-Optimizer's is read by from_foreign)."""

    schema_version: int
    profiles: list[ProfileEntry]
    # A ranked sweep's (B, context) -> D table (serve_file.context_table), where lengths were measured.
    num_speculative_tokens_by_context: list[dict[str, Any]] | None = None


def check_profile(p: dict[str, Any], where: str) -> None:
    """CorruptRecord for a profile whose figures break ProfileEntry, whose AL passes 1 + d, or whose
    provenance or planner fields disagree with its figures (a damaged file)."""
    parse(ProfileEntry, p, where, "speculation profile")
    if p["al"] > 1 + p["d"] + 1e-9:
        raise CorruptRecord(f"{where}: a profile has al={p['al']!r}: an AL is in [1, 1 + d] = [1, {1 + p['d']}]")
    profile_provenance(p, where)
    if not isinstance(p.get("source_path"), str):  # speclens's own; another tool's checks its own way
        check_planner_fields(p, where)


def run_provenance(run_dir: Path) -> dict[str, Any] | None:
    """The provenance of the run in `run_dir` from its summary and stamp (None where it holds no
    readable run: a sweep's folder, a damaged summary)."""
    if not (run_dir / SUMMARY_FILE).is_file():
        return None
    try:
        return read_summary(run_dir).provenance_of(read_stamp_or_empty(run_dir)).to_dict()
    except SpeclensError:  # a damaged summary: the profile's own conditions say what they can
        return None


def conditions_provenance(conditions: Any) -> Provenance | None:
    """What a profile written before provenance was recorded is, from the `measurement_conditions`
    speclens wrote beside it (its runner: a fake run's figures stay fake); None where it has none."""
    if not isinstance(conditions, dict) or not isinstance(conditions.get("runner"), str):
        return None
    runner = conditions["runner"]
    version = conditions.get("engine_version")
    model_runner = conditions.get("model_runner")
    return Provenance(
        source=prov.source_of(runner, synthetic=False),
        runner=runner,
        engine=prov.engine_of(runner),
        engine_version=version if isinstance(version, str) and runner != prov.FAKE else None,
        model_runner=model_runner if isinstance(model_runner, str) else None,
    )


# What a Provenance's text fields must be (None allowed where the field may be unknown).
_PROVENANCE_TEXT = ("source", "runner", "setting")

_PROVENANCE_OPTIONAL_TEXT = ("engine", "engine_version", "dtype", "model_runner", "context_extension")


def profile_provenance(profile: dict[str, Any], where: str) -> Provenance | None:
    """What a profile's figures are (None where it predates provenance), or CorruptRecord for a
    provenance that is not one speclens wrote."""
    found = profile.get("provenance")
    if found is None:
        return conditions_provenance(profile.get("measurement_conditions"))
    if not isinstance(found, dict):
        raise CorruptRecord(f"{where}: a profile's provenance is {found!r}, not a record")
    bad = [k for k in _PROVENANCE_TEXT if not isinstance(found.get(k, ""), str)]
    bad += [k for k in _PROVENANCE_OPTIONAL_TEXT if found.get(k) is not None and not isinstance(found[k], str)]
    if bad:
        raise CorruptRecord(f"{where}: a profile's provenance has {bad[0]}={found[bad[0]]!r}, not a name")
    try:
        return prov.from_dict(found)
    except (TypeError, ValueError) as exc:
        raise CorruptRecord(f"{where}: a profile's provenance is not one speclens reads ({exc})") from None


CONTEXT_TABLE_KEY = "num_speculative_tokens_by_context"


def write_profile_file(
    profiles: list[dict[str, Any]], out_dir: Path, context_table: Sequence[dict[str, Any]] = ()
) -> Path:
    """speculation_profile.json in `out_dir`, with a ranked sweep's (B, context) -> D table where
    it has one (`num_speculative_tokens_by_context`)."""
    path = out_dir / PROFILE_FILE
    data: dict[str, Any] = {"schema_version": PROFILE_VERSION, "profiles": profiles}
    if context_table:
        data[CONTEXT_TABLE_KEY] = list(context_table)
    write_json_atomic(data, path)
    return path
