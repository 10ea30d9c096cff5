"""Method families: one module per family of test-time methods (the interface: `base.Family`,
checked by `base.check_family`). The paper's cache family (`cache`) is run by its own vectorised
runner; every other family is pure functions over an explicit state, run by the family runner.
`get_family(name)` returns the module; adding one is the route in docs/architecture.md."""

from __future__ import annotations

from types import ModuleType
from typing import Callable

from . import bca, cache, ctpt, dmn, dota, dpe, mta, onzeta, tpt, zero
from .base import CACHE, Method, StepOut

# Every family, in the registry's order: the paper's cache family first, then the field's.
FAMILIES: dict[str, ModuleType] = {m.NAME: m for m in (cache, zero, mta, dmn, dota, onzeta, bca, dpe, tpt, ctpt)}

# The others' hyperparameters, as EngineConfig's sections (engine: <name>: {...} in a dataset YAML;
# the cache family's are EngineConfig's top-level keys).
ZeroParams, MtaParams, DmnParams, DotaParams = zero.Params, mta.Params, dmn.Params, dota.Params
OnzetaParams, BcaParams, DpeParams = onzeta.Params, bca.Params, dpe.Params
TptParams, CtptParams = tpt.Params, ctpt.Params


def get_family(name: str) -> ModuleType:
    """The module of a family."""
    return FAMILIES[name]


def view_aggregator(view_mode: str, params=None) -> Callable | None:
    """A family's view combination as `functional.form_queries` takes it (ZERO's voters, MTA's mode,
    with that family's `params`), or None for the views' own modes ("confident", "original")."""
    fam = FAMILIES.get(view_mode)
    if fam is None or not hasattr(fam, "aggregate"):
        return None
    return lambda x, text, logit_scale: fam.aggregate(x, text, logit_scale, params)


def family_rows() -> list[Method]:
    """Every family's registry rows, families in FAMILIES' order."""
    return [row for fam in FAMILIES.values() for row in fam.METHODS]


__all__ = [
    "CACHE",
    "FAMILIES",
    "Method",
    "StepOut",
    "family_rows",
    "get_family",
    "view_aggregator",
    "BcaParams",
    "DmnParams",
    "DotaParams",
    "DpeParams",
    "MtaParams",
    "OnzetaParams",
    "ZeroParams",
    "TptParams",
    "CtptParams",
]
