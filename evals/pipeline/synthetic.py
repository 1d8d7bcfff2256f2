"""acceptance.synthetic: the drafter's drafting and the target's verification, timed at an
acceptance set by the user instead of the drafter's own.

vLLM's synthetic rejection sampler (`rejection_sample_method="synthetic"` with
`synthetic_acceptance_rates`, the marginal per-position rates) accepts draft position k with the
conditional probability m[k] / m[k-1] and emits the draft token whether or not the target agrees,
so a run's speed at that acceptance needs the drafter's shape, not its training. The rates come
from the command line (`acceptance.synthetic=[0.8,0.6,0.4]`, one per draft position) or from a
measured profile (`acceptance.synthetic=<speculation_profile.json or run/sweep dir>`: its profile
for this drafter, d and domain `all`). Everything is checked here, before any engine starts.

Such a run's AL is set, not measured: it is labelled synthetic wherever it appears and kept out
of measured acceptance (curves, profiles, ranking), and its outputs are not the target's greedy
ones, so no lossless check is made (summary.json `synthetic_acceptance`).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from runners import cpu_synthetic_fix
from runners.cpu_plugins import disabled
from runners.registry import Runner
from speclens.config import RunConfig
from speclens.errors import ConfigError, CorruptRecord
from speclens.file_formats.profile_file import PROFILE_FILE, profile_provenance, read_profiles
from speclens.provenance import IDENTITY_FIELDS, Provenance, differences, of_stamp

# What a profile is compared with the run in (its source: the run's own is synthetic, by definition).
BESIDE_SOURCE = tuple(name for name in IDENTITY_FIELDS if name != "source")
from speclens.figures.summary import SyntheticAcceptance

KEY = "acceptance.synthetic"


def check_rates(rates: Any, d: int, source: str) -> list[float]:
    """The marginal rates as vLLM takes them: D of them, each in [0, 1], never increasing."""
    if isinstance(rates, (str, bytes)) or not hasattr(rates, "__len__"):
        raise ConfigError(f"{source}: a list of D marginal rates or a profile's path, not {rates!r}.")
    values = list(rates)
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    if not numbers or not all(math.isfinite(v) for v in values):
        raise ConfigError(f"{source}={_shown(values)}: the rates must be numbers.")
    if len(values) != d:
        raise ConfigError(
            f"{source}={_shown(values)}: {len(values)} rates for d={d}; give one per draft position "
            f"(P(the first k+1 drafts accepted), k = 0 … {d - 1})."
        )
    outside = [v for v in values if not 0 <= v <= 1]
    if outside:
        raise ConfigError(f"{source}={_shown(values)}: {outside[0]:g} is not a rate in [0, 1].")
    rising = next((k for k in range(1, d) if values[k] > values[k - 1]), None)
    if rising is not None:
        raise ConfigError(
            f"{source}={_shown(values)}: the rates are marginal, P(the first k+1 drafts accepted), so they "
            f"never increase; position {rising} has {values[rising]:g} after {values[rising - 1]:g}."
        )
    return [float(v) for v in values]


def _shown(values: list[Any]) -> str:
    return (
        "["
        + ",".join(f"{v:g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else repr(v) for v in values)
        + "]"
    )


# A run under the defaults on vLLM: whom the rates are for where the caller names no run.
DEFAULT_RUN = Provenance(source="measured", runner="vllm")


def profile_rates(path: Path, drafter: str, d: int, own: Provenance = DEFAULT_RUN) -> tuple[list[float], str]:
    """The marginal rates a profile file (or a run or sweep dir holding one) measured for this
    drafter at this d over all its prompts (of several, the one nearest the run `own`:
    closest_profile), and where they came from, with what its figures are."""
    folder = path.parent if path.name == PROFILE_FILE else path
    if not (folder / PROFILE_FILE).is_file():
        raise ConfigError(f"{KEY}={path}: holds no {PROFILE_FILE} (a run or sweep dir speclens wrote, or that file).")
    try:
        profiles = read_profiles(folder)
    except CorruptRecord as exc:
        raise ConfigError(f"{KEY}={path}: {exc}") from None
    whole = [
        p for p in profiles if p["domain"] == "all" and p.get("segment", "all") == "all" and "input_tokens" not in p
    ]
    mine = [p for p in whole if p["drafter"] == drafter]
    if not mine:
        found = sorted({p["drafter"] for p in whole})
        raise ConfigError(
            f"{KEY}={path}: no profile of drafter={drafter} over domain all; it has {', '.join(found) or 'none'}."
        )
    at_d = [p for p in mine if p["d"] == d]
    if not at_d:
        ds = ", ".join(str(p["d"]) for p in sorted(mine, key=lambda p: p["d"]))
        raise ConfigError(f"{KEY}={path}: drafter={drafter} was measured at d={ds}, not d={d}; give one of those.")
    where = f"{KEY}={path}"
    chosen, what = closest_profile(at_d, own, where)
    source = f"{folder / PROFILE_FILE}: drafter={drafter} d={d} domain=all" + (f", {what.label()}" if what else "")
    return check_rates(chosen["marginal"], d, f"{KEY} ({source})"), source


def closest_profile(candidates: list[dict[str, Any]], own: Provenance, where: str) -> tuple[dict, Provenance | None]:
    """The profile (one drafter and d) nearest this run: measured under its setting, then measured,
    then under its dtype and runner. Where one stands out it is taken, with a note naming what
    differs from the run; where several tie, refused naming each."""
    found = [(p, profile_provenance(p, where)) for p in candidates]

    def rank(item: tuple[dict, Provenance | None]) -> tuple[bool, ...]:
        what = item[1]
        if what is None:  # not recorded: last
            return (False, False, False, False)
        return (what.setting == own.setting, what.measured, what.dtype == own.dtype, what.runner == own.runner)

    ranked = sorted(found, key=rank, reverse=True)
    top = [item for item in ranked if rank(item) == rank(ranked[0])]
    distinct = {json.dumps(p["marginal"]) for p, _ in top}
    if len(distinct) > 1:
        shown = "; ".join(what.label() if what else "provenance not recorded" for _, what in top)
        raise ConfigError(
            f"{where}: {len(top)} profiles of this drafter and d as near this run as each other ({shown}); give the "
            f"{PROFILE_FILE} of the one run to take the rates from."
        )
    chosen, what = top[0]
    differ = differences(what, own, BESIDE_SOURCE) if what is not None else ["its provenance is not recorded"]
    if differ:
        print(
            f"speclens: note: {where}: the rates are those of a profile that differs from this run in "
            f"{'; '.join(differ)} (profile vs this run).",
            file=sys.stderr,
        )
    return chosen, what


def resolve(cfg: RunConfig, drafter: str, speculative: bool, runner: Runner) -> SyntheticAcceptance | None:
    """acceptance.synthetic checked and read (None where it is unset)."""
    given = cfg.acceptance.synthetic
    if given is None:
        return None
    if not speculative:
        raise ConfigError(f"{KEY} sets how drafts are accepted: give a drafter (drafter={drafter} drafts nothing).")
    if cfg.drafter.schedule is not None:
        raise ConfigError(f"{KEY} takes one rate per position of one d; drop drafter.schedule.")
    if runner.attached(cfg):
        raise ConfigError(
            f"{KEY} is set in the engine's speculative config, and an attached server's is its own: start it with "
            '"rejection_sample_method": "synthetic" in its --speculative-config, or let speclens start the engine.'
        )
    if runner.vllm_engine and disabled(cpu_synthetic_fix.DISABLE_ENV):
        raise ConfigError(
            f"{KEY}: {cpu_synthetic_fix.DISABLE_ENV}=0 leaves vLLM's CPU build refusing synthetic acceptance "
            "(runners/cpu_synthetic_fix.py); unset it."
        )
    if isinstance(given, str):
        config = OmegaConf.to_container(OmegaConf.structured(cfg), enum_to_str=True)
        own = of_stamp({"config": config}, runner=runner.name, synthetic=False)
        rates, source = profile_rates(Path(given).expanduser(), drafter, cfg.d, own)
    else:
        rates, source = check_rates(given, cfg.d, KEY), "given"
    return SyntheticAcceptance(rates=rates, expected_al=1.0 + sum(rates), source=source)


def speculative_config(spec: dict[str, Any], synthetic: SyntheticAcceptance) -> dict[str, Any]:
    """The drafter's own speculative config, verified by vLLM's synthetic rejection sampler."""
    return spec | {"rejection_sample_method": "synthetic", "synthetic_acceptance_rates": list(synthetic.rates)}
