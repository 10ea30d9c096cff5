"""The method registry: the cache family's rows (switches on one engine) and every other family's
rows (`mstta.engine.families`), in the paper's order. `Engine(text, name)` runs any of them."""

from __future__ import annotations

from ..errors import UserError
from .families import Method, family_rows, get_family

# The paper's order: its main tables (CLIP, TDA, BoostAdapter, MS-TTA), then the ablation against
# the §3.1 baseline, then the plug-in tables (TDA + MS, BoostAdapter + MS). The `+boost` methods
# (issue 9) are MS-TTA and its baseline run on BoostAdapter's pipeline: the paper's other reading.
_METHODS = {
    m.name: m
    for m in (
        Method(name="zero-shot", title="CLIP (zero-shot)", summary="CLIP zero-shot logits, no adaptation (Eq. 1)"),
        Method(name="tda", title="TDA", cache=True, negative=True, summary="TDA: positive + negative caches"),
        Method(
            name="boostadapter",
            title="BoostAdapter",
            cache=True,
            negative=True,
            boost=True,
            neg_policy="fifo",
            summary="BoostAdapter: TDA's caches + the lowest-entropy views in a throw-away boosted cache",
        ),
        Method(
            name="ms-tta",
            title="MS-TTA",
            cache=True,
            mean_shift=True,
            summary="MS-TTA: kNN mean shift + a cache of shifted embeddings (Alg. 1), on TDA's views",
        ),
        Method(
            name="ms-tta+boost",
            title="MS-TTA + boost",
            cache=True,
            mean_shift=True,
            boost=True,
            summary="MS-TTA on BoostAdapter's pipeline: shifted keys, queries and boosting views",
        ),
        Method(
            name="baseline",
            title="Baseline (cache)",
            cache=True,
            summary="the paper's training-free cache baseline: one positive cache (§3.1)",
        ),
        Method(
            name="baseline+boost",
            title="Baseline + boost",
            cache=True,
            boost=True,
            summary="the §3.1 baseline with BoostAdapter's boosting views",
        ),
        Method(
            name="tda+ms",
            title="TDA + MS",
            cache=True,
            mean_shift=True,
            negative=True,
            summary="TDA with mean-shifted keys and queries (plug-in)",
        ),
        Method(
            name="boostadapter+ms",
            title="BoostAdapter + MS",
            cache=True,
            mean_shift=True,
            negative=True,
            boost=True,
            neg_policy="fifo",
            summary="BoostAdapter with mean-shifted keys and queries (plug-in)",
        ),
    )
}
_METHODS.update({m.name: m for m in family_rows()})


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
    return m.family != "cache" and bool(getattr(get_family(m.family), "TOWER", False))
