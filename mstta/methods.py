"""The method registry: every method is the same engine with a few switches on."""
from __future__ import annotations

from dataclasses import dataclass

from .errors import UserError


@dataclass(frozen=True)
class Method:
    """What a method turns on. All share `Engine.step()`/`reset()`, so callers never branch."""

    name: str            # the key used on command lines and in result files
    title: str           # human title, as the reports and the demo print it
    cache: bool          # positive cache of low-entropy samples (§3.1)
    mean_shift: bool     # kNN mean shift of every key and query against the raw-feature bank (§4.1)
    negative: bool       # TDA's negative cache
    boost: bool          # BoostAdapter's throw-away boosted cache from the lowest-entropy views
    neg_policy: str      # negative-cache replacement: "entropy" (TDA) or "fifo" (BoostAdapter)
    summary: str         # one line: what the method is


# The paper's order: its main tables (CLIP, TDA, BoostAdapter, MS-TTA), then the ablation against
# the §3.1 baseline, then the plug-in tables (TDA + MS, BoostAdapter + MS). The `+boost` methods
# (issue 9) are MS-TTA and its baseline run on BoostAdapter's pipeline: the paper's other reading.
_METHODS = {
    m.name: m
    for m in (
        Method("zero-shot", "CLIP (zero-shot)", False, False, False, False, "entropy",
               "CLIP zero-shot logits, no adaptation (Eq. 1)"),
        Method("tda", "TDA", True, False, True, False, "entropy",
               "TDA: positive + negative caches"),
        Method("boostadapter", "BoostAdapter", True, False, True, True, "fifo",
               "BoostAdapter: TDA's caches + the lowest-entropy views in a throw-away boosted cache"),
        Method("ms-tta", "MS-TTA", True, True, False, False, "entropy",
               "MS-TTA: kNN mean shift + a cache of shifted embeddings (Alg. 1), on TDA's views"),
        Method("ms-tta+boost", "MS-TTA + boost", True, True, False, True, "entropy",
               "MS-TTA on BoostAdapter's pipeline: shifted keys, queries and boosting views"),
        Method("baseline", "Baseline (cache)", True, False, False, False, "entropy",
               "the paper's training-free cache baseline: one positive cache (§3.1)"),
        Method("baseline+boost", "Baseline + boost", True, False, False, True, "entropy",
               "the §3.1 baseline with BoostAdapter's boosting views"),
        Method("tda+ms", "TDA + MS", True, True, True, False, "entropy",
               "TDA with mean-shifted keys and queries (plug-in)"),
        Method("boostadapter+ms", "BoostAdapter + MS", True, True, True, True, "fifo",
               "BoostAdapter with mean-shifted keys and queries (plug-in)"),
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
