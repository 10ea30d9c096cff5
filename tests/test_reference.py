"""The online engine and the vectorised replay against the plain per-sample reference loop
(tests/reference_loop.py: lists and dicts, float64, the paper and the peers' code read literally)
on random streams, for every method and view mode."""

from __future__ import annotations

import numpy as np
import pytest
import reference_loop
import torch
from helpers_reference import CASES, reference_config, reference_stream

from mstta import Engine, get_method, list_methods, replay

# The cache family (its reference, its device-resident step); the other families have their own tests.
CACHE_METHODS = [m for m in list_methods() if get_method(m).family == "cache"]


@pytest.mark.parametrize("method", CACHE_METHODS)
@pytest.mark.parametrize("case", list(CASES))
def test_engine_and_replay_equal_the_reference(method, case):
    views, overrides = CASES[case]
    f, t = reference_stream(views)
    cfg = reference_config(overrides)
    ref_final, ref_clip = reference_loop.run(f.numpy(), t.numpy(), get_method(method), cfg)
    engine = Engine(t, method, cfg)
    online = torch.stack([engine.step(x).logits for x in f]).numpy()
    fast = replay(f, t, method, cfg, chunk=16)
    assert np.array_equal(online.argmax(1), ref_final.argmax(1))
    assert np.array_equal(fast.predictions, ref_final.argmax(1))
    assert np.array_equal(fast.clip_predictions, ref_clip.argmax(1))
    np.testing.assert_allclose(online, ref_final, rtol=1e-4, atol=1e-3)
    # the adaptation did something (the comparison is not CLIP against CLIP)
    if get_method(method).keeps_cache:
        assert np.abs(ref_final - ref_clip).max() > 1e-3


@pytest.mark.parametrize("method", ["ms-tta", "tda+ms", "ms-tta+boost"])
def test_repeated_frames_resolve_ties_as_the_reference(method):
    """Exact ties (a static scene repeats frames): kNN neighbours by age, cache eviction of equal
    entropies as TDA's sorted lists do it."""
    f, t = reference_stream(4, seed=3, n=50)
    f = torch.cat([f, f[:20], f[10:30], f[:20]])
    cfg = reference_config({"view_mode": "original", "view_ratio": 0.5, "k": 3})
    ref_final, _ = reference_loop.run(f.numpy(), t.numpy(), get_method(method), cfg)
    engine = Engine(t, method, cfg)
    online = torch.stack([engine.step(x).logits for x in f]).numpy()
    assert np.array_equal(online.argmax(1), ref_final.argmax(1))
    np.testing.assert_allclose(online, ref_final, rtol=1e-4, atol=1e-3)
    assert np.array_equal(replay(f, t, method, cfg, chunk=8).predictions, ref_final.argmax(1))
