"""A warm engine's device step never waits on the host: no Python number is read from a tensor (on a
GPU each would stall the stream). Checked on the CPU, on the device path a GPU runs (a CPU engine's
own step reads its state on the host by design, `Streams.host_reads`: tests/test_host_reads.py
holds the two equal), by making every such conversion raise."""

from __future__ import annotations

import numpy as np
import pytest
import reference_loop
import torch
from synthetic import as_tensors, make_stream

from mstta import Engine, EngineConfig, get_method, list_methods

# The cache family (its reference, its device-resident step); the other families have their own tests.
CACHE_METHODS = [m for m in list_methods() if get_method(m).family == "cache"]

CONVERSIONS = ("item", "tolist", "__int__", "__float__", "__bool__", "__index__", "numpy", "cpu")
WARM = 5


class HostSync(AssertionError):
    pass


def _forbid(monkeypatch):
    for name in CONVERSIONS:

        def boom(*args, _name=name, **kwargs):
            raise HostSync(f"Tensor.{_name} called during step()")

        monkeypatch.setattr(torch.Tensor, name, boom)


def _run(method, views, cfg, monkeypatch, n=80):
    f, t, _ = as_tensors(make_stream(n=n, classes=5, dim=12, views=views, seed=5, noise=1.5))
    engine = Engine(t, method, cfg)
    engine.runner.host_reads = engine.runner.host_resets = False  # the device path
    logits = [engine.step(x).logits for x in f[:WARM]]
    with monkeypatch.context() as mp:
        _forbid(mp)
        with pytest.raises(HostSync):  # the guard is live
            torch.zeros(2).sum().item()
        logits += [engine.step(x).logits for x in f[WARM:]]
    ref, _ = reference_loop.run(f.numpy(), t.numpy(), get_method(method), cfg)
    return torch.stack(logits).numpy(), ref


CFG = dict(cache_alpha=6.0, beta=3.0, neg_entropy_lower=0.05, neg_entropy_upper=0.9, neg_alpha=0.5)


@pytest.mark.parametrize("method", CACHE_METHODS)
@pytest.mark.parametrize("bank_size", [None, 16])
def test_single_view_step_has_no_host_sync(method, bank_size, monkeypatch):
    """Every method on single-view samples (the two BoostAdapter ones have no views to boost)."""
    online, ref = _run(method, 1, EngineConfig(bank_size=bank_size, k=3, **CFG), monkeypatch)
    assert np.array_equal(online.argmax(1), ref.argmax(1))
    np.testing.assert_allclose(online, ref, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("method", [m for m in CACHE_METHODS if not get_method(m).boosting_views])
@pytest.mark.parametrize("mode", ["confident", "original"])
def test_multi_view_step_has_no_host_sync(method, mode, monkeypatch):
    online, ref = _run(method, 8, EngineConfig(view_mode=mode, view_ratio=0.25, **CFG), monkeypatch)
    assert np.array_equal(online.argmax(1), ref.argmax(1))
    np.testing.assert_allclose(online, ref, rtol=1e-4, atol=1e-3)


def test_boosting_views_are_the_documented_exception(monkeypatch):
    """BoostAdapter's throw-away per-view cache copies are built on the host: the guard sees it."""
    f, t, _ = as_tensors(make_stream(n=10, classes=5, dim=12, views=8, seed=5))
    engine = Engine(t, "boostadapter", EngineConfig(view_ratio=0.25))
    engine.step(f[0])
    with monkeypatch.context() as mp:
        _forbid(mp)
        with pytest.raises(HostSync):
            engine.step(f[1])


@pytest.mark.parametrize("method", [m for m in CACHE_METHODS if not get_method(m).boosting_views])
def test_multi_engine_step_has_no_host_sync(method, monkeypatch):
    """Several streams, some skipping the step: still no Python number read from a tensor."""
    from mstta.engine.multi import MultiEngine

    f, t, _ = as_tensors(make_stream(n=30, classes=5, dim=12, seed=5, noise=1.5))
    engine = MultiEngine(t, method, EngineConfig(bank_size=16, k=3, **CFG), streams=3)
    for i in range(WARM):
        engine.step(f[i : i + 3])
    with monkeypatch.context() as mp:
        _forbid(mp)
        for i in range(WARM, 25):
            out = engine.step(f[i : i + 3], active=[True, i % 2 == 0, i % 3 != 0])
    assert out.logits.shape == (3, 5)
