"""Method families: one module per family of test-time methods, each pure functions over an
explicit state (the interface: `mstta.engine.families.base`). `get_family(name)` returns the module."""

from __future__ import annotations

from types import ModuleType
from typing import Callable

from . import bca, ctpt, dmn, dota, dpe, mta, onzeta, tpt, zero
from .base import CACHE, Method, StepOut

# The families beside the cache one, in the order their rows follow the paper's in the registry.
FAMILIES: dict[str, ModuleType] = {m.NAME: m for m in (zero, mta, dmn, dota, onzeta, bca, dpe, tpt, ctpt)}

# Their hyperparameters, as EngineConfig's sections (engine: <name>: {...} in a dataset YAML).
ZeroParams, MtaParams, DmnParams, DotaParams = zero.Params, mta.Params, dmn.Params, dota.Params
OnzetaParams, BcaParams, DpeParams = onzeta.Params, bca.Params, dpe.Params
TptParams, CtptParams = tpt.Params, ctpt.Params


def get_family(name: str) -> ModuleType:
    """The module of a family that is not the cache family."""
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
