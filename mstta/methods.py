"""The method registry: every method is the same engine with a few switches on."""
from __future__ import annotations

from dataclasses import dataclass

from .errors import UserError


@dataclass(frozen=True)
class Method:
    """What a method turns on. All share `Engine.step()`/`reset()`, so callers never branch."""

    name: str
    cache: bool          # positive cache of low-entropy samples (§3.1)
    mean_shift: bool     # kNN mean shift of the feature before caching/querying (§4.1)
    negative: bool       # TDA's negative cache
    boost: bool          # BoostAdapter's temporary boosted cache from augmented views
    neg_policy: str      # negative-cache replacement: "entropy" (TDA) or "fifo" (BoostAdapter)
    summary: str


_METHODS = {
    m.name: m
    for m in (
        Method("zero-shot", False, False, False, False, "entropy", "CLIP zero-shot logits, no adaptation"),
        Method("baseline", True, False, False, False, "entropy", "the paper's training-free cache baseline (§3.1)"),
        Method("ms-tta", True, True, False, False, "entropy", "MS-TTA: kNN mean shift + cache of shifted embeddings (Alg. 1)"),
        Method("tda", True, False, True, False, "entropy", "TDA: positive + negative caches"),
        Method("tda+ms", True, True, True, False, "entropy", "TDA with mean-shifted keys and queries (plug-in)"),
        Method("boostadapter", True, False, True, True, "fifo", "BoostAdapter: TDA caches + boosted views"),
        Method("boostadapter+ms", True, True, True, True, "fifo", "BoostAdapter with mean-shifted keys and queries (plug-in)"),
    )
}


def list_methods() -> list[str]:
    """Names of every registered method, in the paper's order."""
    return list(_METHODS)


def get_method(name: str) -> Method:
    """Look a method up by name; an unknown name lists the valid choices."""
    try:
        return _METHODS[name]
    except KeyError:
        raise UserError(f"unknown method '{name}'; choose one of: {', '.join(_METHODS)}") from None
