"""Choosing one drafter's speculation profile by its whole identity (speclens/provenance.py): of
the profiles a sweep's file holds for one drafter (one per setting, runner or dtype), the one
`setting=` names, else the only one, else the one measured under the defaults where exactly one
is; otherwise refused naming how they differ. What `evals.whatif` reads its acceptance from."""

from __future__ import annotations

from typing import Any, Iterable

from speclens import provenance as prov
from speclens.errors import ConfigError
from speclens.file_formats.profile_file import profile_provenance
from speclens.provenance import Provenance

# The words `setting=` takes for the defaults.
DEFAULTS = ("", "defaults")
UNRECORDED = "provenance not recorded"
Identity = tuple[Any, ...]


def identity_of(found: Provenance | None) -> Identity:
    return (UNRECORDED,) if found is None else found.identity()


def identity_label(found: Provenance | None, among: list[Provenance | None]) -> str:
    """How `setting=` names a profile's identity among others': each field they differ in, then its
    settings (speclens/provenance.py label_among, as the report labels runs); 'defaults' for none."""
    if found is None:
        return UNRECORDED
    return prov.label_among(found, prov.mixed_fields(among)) or "defaults"


def setting_matches(found: Provenance | None, wanted: str) -> bool:
    """Whether `setting=<wanted>` names this identity: its settings exactly (`defaults` or '' for
    none), with any identity field it names (`runner=fake`, `engine.dtype=float32`) equal."""
    if found is None:
        return False
    if wanted.strip() in DEFAULTS:
        return found.setting == ""
    if wanted == found.setting:
        return True
    by_name = {prov.FIELD_NAMES[name]: name for name in prov.LABELLED_FIELDS}
    settings = set()
    for part in (p.strip() for p in wanted.split(",")):
        key, _, value = part.partition("=")
        if key in by_name:
            if str(getattr(found, by_name[key])) != value:
                return False
        elif part and part != "defaults":
            settings.add(part)
    return settings == {p.strip() for p in found.setting.split(",") if p.strip()}


def choose_profiles(
    found: list[dict[str, Any]], drafter: str, setting: str | None, where: str
) -> tuple[list[dict[str, Any]], Provenance | None, str | None]:
    """Of one drafter's profiles (one domain, whole outputs), those of one identity (source,
    runner, dtype, model runner, settings): the one `setting=` names, else the only one, else the
    one measured under the defaults where exactly one is; otherwise ConfigError listing how they
    differ. With what they are, and a note naming those passed over (None where none were)."""
    groups: dict[Identity, list[dict[str, Any]]] = {}
    what: dict[Identity, Provenance | None] = {}
    for p in found:
        found_prov = profile_provenance(p, where)
        groups.setdefault(identity_of(found_prov), []).append(p)
        what[identity_of(found_prov)] = found_prov
    among = list(what.values())
    labels = {key: identity_label(what[key], among) for key in groups}
    keys = list(groups)
    if setting is not None:
        keys = [k for k in keys if labels[k] == setting.strip() or setting_matches(what[k], setting)]
        if not keys:
            raise ConfigError(
                f"setting={setting}: {where} holds no profile of drafter={drafter} under it; it has "
                + "; ".join(_described(k, labels, what) for k in groups)
                + "."
            )
    if len(keys) > 1:
        preferred = [
            k for k in keys if what[k] is not None and what[k].measured and (setting is not None or not what[k].setting)
        ]
        if len(preferred) != 1:
            raise ConfigError(_ambiguous(drafter, keys, labels, what, where))
        keys = preferred
    (chosen,) = keys
    _check_one_measurement(groups[chosen], drafter, where)
    passed = [k for k in groups if k != chosen]
    note = None
    if passed:
        note = (
            f"{drafter}: the profile under {labels[chosen]} ({_label(what[chosen])}) was taken; also there: "
            + "; ".join(f"{labels[k]} ({', '.join(_differences(what[chosen], what[k]))})" for k in passed)
            + f"; setting=<{_options(labels[k] for k in passed)}> takes another"
        )
    return groups[chosen], what[chosen], note


def _options(labels: Iterable[str]) -> str:
    """`a|'b, c'`: the labels setting= takes, quoted where the shell would split one."""
    return "|".join(f"'{label}'" if " " in label else label for label in labels)


def _label(found: Provenance | None) -> str:
    return UNRECORDED if found is None else found.label()


def _differences(a: Provenance | None, b: Provenance | None) -> list[str]:
    if a is None or b is None:
        return ["one's provenance is not recorded"]
    return prov.differences(a, b)


def _described(key: Identity, labels: dict[Identity, str], what: dict[Identity, Provenance | None]) -> str:
    return f"{labels[key]}: {_label(what[key])}"


def _ambiguous(
    drafter: str, keys: list[Identity], labels: dict[Identity, str], what: dict[Identity, Provenance | None], where: str
) -> str:
    first = keys[0]
    differ = "; ".join(
        f"{labels[first]} against {labels[k]}: {', '.join(_differences(what[first], what[k]))}" for k in keys[1:]
    )
    return (
        f"{where}: {len(keys)} profiles of drafter={drafter} that are not the same kind of figure, and not exactly "
        f"one was measured under the defaults: {'; '.join(_described(k, labels, what) for k in keys)} ({differ}); "
        f"pick one with setting=<{_options(labels[k] for k in keys)}>."
    )


def _check_one_measurement(group: list[dict[str, Any]], drafter: str, where: str) -> None:
    """Refuse profiles of one identity that are not one measurement's: two files of another tool
    (named), or two at one D whose figures disagree (a sweep over another axis: datasets, temperatures)."""
    paths = sorted({p["source_path"] for p in group if isinstance(p.get("source_path"), str)})
    if len(paths) > 1:
        raise ConfigError(
            f"{where}: {len(paths)} profiles of drafter={drafter} from other tools under one setting: "
            f"{' and '.join(paths)}; give one of those files."
        )
    by_d: dict[Any, dict[str, Any]] = {}
    for p in group:
        other = by_d.setdefault(p["d"], p)
        if other is not p and other["marginal"] != p["marginal"]:
            conditions = _condition_differences(other, p)
            raise ConfigError(
                f"{where}: two profiles of drafter={drafter} at d={p['d']} under one setting disagree "
                f"(AL {other['al']:.4g} and {p['al']:.4g}{'; ' + conditions if conditions else ''}); "
                "give the run dir of the one to use."
            )


def _condition_differences(a: dict[str, Any], b: dict[str, Any]) -> str:
    """The measurement conditions two profiles differ in, `key: a vs b` (what tells them apart)."""
    ca = a.get("measurement_conditions") if isinstance(a.get("measurement_conditions"), dict) else {}
    cb = b.get("measurement_conditions") if isinstance(b.get("measurement_conditions"), dict) else {}
    return ", ".join(f"{k}: {ca.get(k)} vs {cb.get(k)}" for k in sorted(set(ca) | set(cb)) if ca.get(k) != cb.get(k))
