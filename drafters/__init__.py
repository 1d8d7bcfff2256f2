"""The drafter registry: the one place that maps `drafter=<name>` to its class. The name is the
drafter's identity: its config class is what `drafter=<name>` selects, and nothing restates it."""

from __future__ import annotations

from drafters.base import Drafter, DrafterConfig
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

REGISTRY: dict[str, type[Drafter]] = {
    "none": NoDrafter,
    "ngram": Ngram,
    "suffix": Suffix,
    "draft_model": DraftModel,
    "eagle": Eagle,
    "eagle3": Eagle3,
    "mtp": Mtp,
    "dflash": Dflash,
    "dspark": Dspark,
    "medusa": Medusa,
    "mlp_speculator": MlpSpeculator,
}


def drafter_name(cfg: DrafterConfig) -> str:
    """The registry name of a drafter config (configs are composed from the registry, so every
    composed config has one)."""
    for name, cls in REGISTRY.items():
        if type(cfg) is cls.config_class:
            return name
    raise TypeError(f"{type(cfg).__name__} is not a registered drafter config")


def make_drafter(cfg: DrafterConfig) -> Drafter:
    name = drafter_name(cfg)
    return REGISTRY[name](name, cfg)
