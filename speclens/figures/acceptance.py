"""AL at every draft length from one acceptance profile (speclens's definitions: AL = 1 + the
expected number of accepted drafts per step; a chain's drafts at positions 1..D' are the same
whatever D it was run at, so a profile measured at D gives AL at every D' <= D)."""

from __future__ import annotations

from speclens.errors import ConfigError


def marginal_from_conditional(conditional: list[float]) -> list[float]:
    """P(the first k drafts all accepted) from P(draft k accepted | the first k-1 were)."""
    out, reached = [], 1.0
    for c in conditional:
        reached *= c
        out.append(reached)
    return out


def al_at(marginal: list[float], d: int) -> float:
    """AL at draft length d from the marginal per-position acceptance (1 + its first d)."""
    if d > len(marginal):
        raise ConfigError(f"acceptance is known for {len(marginal)} positions; D={d} needs {d}.")
    return 1.0 + sum(marginal[:d])


def check_rates(rates: list[float], key: str) -> list[float]:
    if (
        not isinstance(rates, list)
        or not rates
        or not all(isinstance(r, (int, float)) and not isinstance(r, bool) and 0 <= r <= 1 for r in rates)
    ):
        raise ConfigError(f"{key}={rates}: a list of acceptance rates, each in [0, 1].")
    return [float(r) for r in rates]
