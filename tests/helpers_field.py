"""Shared by the `mstta-bench field` tests (tests/test_field.py, tests/test_textsets.py): a store of
stored features and the command line that runs the field over it."""

from __future__ import annotations

import numpy as np
from synthetic import make_stream

from mstta.bench.store import Backbone, FeatureKey
from mstta.features.format import save_features

CLASSES, N, DIM = 4, 48, 64  # DIM: mstta-tiny's, so its text tower can prompt these classes


def feature_store(tmp_path, names=("a", "b"), classes=CLASSES):
    """One stored feature file per name (imagefolder keys, mstta-tiny) -> (store folder, dataset keys)."""
    store = tmp_path / "features"
    keys = []
    for i, name in enumerate(names):
        key = f"imagefolder:{tmp_path / 'data' / name}"
        s = make_stream(n=N, classes=classes, dim=DIM, seed=i)
        path = FeatureKey(key, Backbone("mstta-tiny", "none"), "fp32", 1, "augmix", 1).path(store)
        save_features(
            path, s["features"], s["text"], s["labels"], [f"class{c}" for c in range(classes)], dtype=np.float32
        )
        keys.append(key)
    return store, keys


def field_argv(store, out, keys, *extra):
    """`mstta-bench field` over `keys` in `store`, writing to `out` (cpu, 3 orders), then `extra`."""
    return [
        "field",
        "--datasets",
        ",".join(keys),
        "--backbone",
        "mstta-tiny",
        "--store",
        store,
        "--out",
        out,
        "--device",
        "cpu",
        "--no-progress",
        "--orders",
        "3",
        *extra,
    ]
