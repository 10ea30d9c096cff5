"""The method registry: every method is the same engine with a few switches on."""
from __future__ import annotations

from dataclasses import dataclass

from .errors import UserError


@dataclass(frozen=True)
class Method:
    """What a method turns on. All share `Engine.step()`/`reset()`, so callers never branch."""

    name: str            # the key used on command lines and in result files
    title: str           # human title, as the reports and the demo print it
    summary: str         # one line: what the method is
    cache: bool = False       # positive cache of low-entropy samples (§3.1)
    mean_shift: bool = False  # kNN mean shift of every key and query against the raw-feature bank (§4.1)
    negative: bool = False    # TDA's negative cache
    boost: bool = False       # BoostAdapter's throw-away boosted cache from the lowest-entropy views
    neg_policy: str = "entropy"  # negative-cache replacement: "entropy" (TDA) or "fifo" (BoostAdapter)


# The paper's order: its main tables (CLIP, TDA, BoostAdapter, MS-TTA), then the ablation against
# the §3.1 baseline, then the plug-in tables (TDA + MS, BoostAdapter + MS). The `+boost` methods
# (issue 9) are MS-TTA and its baseline run on BoostAdapter's pipeline: the paper's other reading.
_METHODS = {
    m.name: m
    for m in (
        Method(name="zero-shot", title="CLIP (zero-shot)",
               summary="CLIP zero-shot logits, no adaptation (Eq. 1)"),
        Method(name="tda", title="TDA", cache=True, negative=True,
               summary="TDA: positive + negative caches"),
        Method(name="boostadapter", title="BoostAdapter", cache=True, negative=True, boost=True, neg_policy="fifo",
               summary="BoostAdapter: TDA's caches + the lowest-entropy views in a throw-away boosted cache"),
        Method(name="ms-tta", title="MS-TTA", cache=True, mean_shift=True,
               summary="MS-TTA: kNN mean shift + a cache of shifted embeddings (Alg. 1), on TDA's views"),
        Method(name="ms-tta+boost", title="MS-TTA + boost", cache=True, mean_shift=True, boost=True,
               summary="MS-TTA on BoostAdapter's pipeline: shifted keys, queries and boosting views"),
        Method(name="baseline", title="Baseline (cache)", cache=True,
               summary="the paper's training-free cache baseline: one positive cache (§3.1)"),
        Method(name="baseline+boost", title="Baseline + boost", cache=True, boost=True,
               summary="the §3.1 baseline with BoostAdapter's boosting views"),
        Method(name="tda+ms", title="TDA + MS", cache=True, mean_shift=True, negative=True,
               summary="TDA with mean-shifted keys and queries (plug-in)"),
        Method(name="boostadapter+ms", title="BoostAdapter + MS", cache=True, mean_shift=True, negative=True, boost=True, neg_policy="fifo",
               summary="BoostAdapter with mean-shifted keys and queries (plug-in)"),
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
