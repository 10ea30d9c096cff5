"""The method registry: every family's rows (`mstta.engine.families`, the cache family's first), in
the paper's order. `Engine(text, name)` runs any of them."""

from __future__ import annotations

from ..errors import UserError
from .families import Method, family_rows, get_family

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


def needs_text_tower(name: str | Method) -> bool:
    """Whether a method tunes a prompt through the model's text tower (tpt, c-tpt: `Engine(...,
    text_tower=...)`, built by `mstta.text_tower.text_tower`), rather than reading features alone."""
    m = get_method(name) if isinstance(name, str) else name
    return bool(getattr(get_family(m.family), "TOWER", False))
