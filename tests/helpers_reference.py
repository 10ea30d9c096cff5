"""Shared by the reference-loop tests (tests/test_reference.py, tests/test_bank_dtype.py): the
streams and configs the engine and the replay are held to the plain reference loop on."""

from __future__ import annotations

from synthetic import as_tensors, make_stream

from mstta import EngineConfig

CASES = {
    # name: (views, config overrides)
    "single": (1, {}),
    "bounded-bank-k3": (1, {"bank_size": 7, "k": 3, "capacity": 2}),
    "two-steps-linear": (1, {"ms_steps": 2, "kernel": "linear", "lam": 0.5}),
    "confident-views": (10, {"view_mode": "confident", "view_ratio": 0.3}),
    "original-views-delta": (10, {"view_mode": "original", "view_ratio": 0.3, "delta": 2}),
    "views-two-steps-ring": (
        10,
        {"view_mode": "original", "view_ratio": 0.3, "delta": 1, "ms_steps": 2, "bank_size": 9, "k": 3},
    ),
}


def reference_stream(views, seed=11, n=120):
    """(features [n, V, d] or [n, d], text [5, d]): loose clusters, many samples per class, entropies
    in the negative cache's band."""
    f, t, _ = as_tensors(make_stream(n=n, classes=5, dim=12, views=views, seed=seed, noise=1.5))
    return f, t


def reference_config(overrides):
    """An EngineConfig with thresholds that let the negative cache fill on a 5-class stream."""
    base = {
        "cache_alpha": 6.0,
        "beta": 3.0,
        "neg_entropy_lower": 0.05,
        "neg_entropy_upper": 0.9,
        "neg_mask_lower": 0.05,
        "neg_alpha": 0.5,
    }
    return EngineConfig(**{**base, **overrides})
