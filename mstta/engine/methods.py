"""The method registry: every family's rows (`mstta.engine.families`, the cache family's first), in
the paper's order. `Engine(text, name)` runs any of them."""

from __future__ import annotations

from ..errors import UserError
from .families import Method, family_rows

_METHODS = {m.name: m for m in family_rows()}  # the cache family's first: the paper's order


def list_methods() -> list[str]:
    """Names of every registered method, in the paper's order."""
    return list(_METHODS)


def get_method(name: str) -> Method:
    """Look a method up by name; an unknown name lists the valid choices."""
    try:
        return _METHODS[name]
    except KeyError:
        raise UserError(f"unknown method '{name}'; choose one of: {', '.join(_METHODS)}") from None
