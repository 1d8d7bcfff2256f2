"""The drafter registry: the one place that maps `drafter=<name>` to its class."""

from __future__ import annotations

from drafters.base import Drafter, DrafterConfig, ModelFacts
from drafters.dflash import Dflash
from drafters.draft_model import DraftModel
from drafters.dspark import Dspark
from drafters.eagle import Eagle, Eagle3
from drafters.medusa import Medusa
from drafters.mlp_speculator import MlpSpeculator
from drafters.mtp import Mtp
from drafters.ngram import Ngram
from drafters.none import NoDrafter
from drafters.suffix import Suffix
from evals.errors import ConfigError

REGISTRY: dict[str, type[Drafter]] = {
    cls.name: cls
    for cls in (NoDrafter, Ngram, Suffix, DraftModel, Eagle, Eagle3, Mtp, Dflash, Dspark, Medusa, MlpSpeculator)
}


def make_drafter(cfg: DrafterConfig) -> Drafter:
    try:
        cls = REGISTRY[cfg.name]
    except KeyError:
        raise ConfigError(
            f"drafter={cfg.name!r} is unknown; choose one of {', '.join(sorted(REGISTRY))}."
        ) from None
    return cls(cfg)


__all__ = ["REGISTRY", "Drafter", "DrafterConfig", "ModelFacts", "make_drafter"]
