"""`baseline+boost` and `ms-tta+boost` (issue 9): the §3.1 single positive cache with
BoostAdapter's regional bootstrapping, and for `ms-tta+boost` every key and query mean-shifted."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from synthetic import as_tensors, make_stream

from mstta import Engine, EngineConfig, get_method, replay
from mstta.engine.families.cache import switches

TEXT = torch.eye(3)  # C = 3 classes, d = 3
SCALE, A, BETA = 10.0, 2.0, 5.0


def unit(*v):
    v = np.asarray(v, dtype=np.float64)
    return v / np.linalg.norm(v)


def H(v):
    """Entropy (nats) of softmax(SCALE * v W^T) with W = I, from the definition."""
    z = SCALE * np.asarray(v)
    p = np.exp(z - z.max())
    p /= p.sum()
    return float(-(p * np.log(p)).sum())


def kernel(q, keys):
    return sum(A * math.exp(-BETA * (1.0 - float(np.dot(q, k)))) for k in keys)


def config(**kw):
    # Q = 1 and delta = 1: the throw-away copy holds 2 per class; floor(0.5 * 4) = 2 boosting views
    return EngineConfig(
        capacity=1, delta=1, view_ratio=0.5, logit_scale=SCALE, cache_alpha=A, beta=BETA, view_mode="original", **kw
    )


# sample 1: view 0 the original image (class 0); v1, v2 the two most confident views (classes 0, 1)
S1 = [unit(1, 0.3, 0), unit(1, 0, 0), unit(0.1, 1, 0), unit(0.5, 0.5, 0.45)]
# sample 2: original class 0 but less confident than S1's; w1 (class 2) and w2 (class 0) most confident
S2 = [unit(0.8, 0.5, 0.3), unit(0, 0, 1), unit(1, 0.05, 0), unit(0.4, 0.6, 0.5)]


def test_hand_built_premises():
    for views, best in ((S1, [1, 2]), (S2, [1, 2])):
        ent = [H(v) for v in views]
        assert sorted(range(4), key=ent.__getitem__)[:2] == best
    assert H(S2[0]) > H(S1[0])


def test_baseline_boost_by_hand():
    eng = Engine(TEXT, "baseline+boost", config())
    r1 = eng.step(torch.tensor(np.array(S1), dtype=torch.float32))
    # persistent cache: the sample only (class 0); throw-away copy: {0: [S1[0], v1], 1: [v2]}
    assert eng.cache_fill().tolist() == [1, 0, 0]
    q = S1[0]
    expected = SCALE * q + np.array([kernel(q, [S1[0], S1[1]]), kernel(q, [S1[2]]), 0.0])
    np.testing.assert_allclose(r1.logits.numpy(), expected, rtol=1e-5, atol=1e-4)

    r2 = eng.step(torch.tensor(np.array(S2), dtype=torch.float32))
    # S2's original has higher entropy than S1's: the persistent class-0 slot keeps S1[0] (Q = 1)
    np.testing.assert_allclose(eng.cache_entropy()[0], [H(S1[0])], rtol=1e-4)
    assert eng.cache_fill().tolist() == [1, 0, 0]
    # throw-away copy: {0: [S1[0], w2], 2: [w1]}; nothing of sample 1's views survives
    q = S2[0]
    expected = SCALE * q + np.array([kernel(q, [S1[0], S2[2]]), 0.0, kernel(q, [S2[1]])])
    np.testing.assert_allclose(r2.logits.numpy(), expected, rtol=1e-5, atol=1e-4)


def test_boosted_copy_capacity_is_q_plus_delta():
    """With delta = 0 the copy has capacity Q = 1: class 0 keeps the lower-entropy of S1[0] and v1."""
    eng = Engine(TEXT, "baseline+boost", dataclasses.replace(config(), delta=0))
    r = eng.step(torch.tensor(np.array(S1), dtype=torch.float32))
    q = S1[0]
    keep0 = S1[1] if H(S1[1]) < H(S1[0]) else S1[0]
    expected = SCALE * q + np.array([kernel(q, [keep0]), kernel(q, [S1[2]]), 0.0])
    np.testing.assert_allclose(r.logits.numpy(), expected, rtol=1e-5, atol=1e-4)


def shift(v, bank, alpha):
    """Eq. (10)-(11) with k = 1: toward the most cosine-similar bank feature."""
    b = max(bank, key=lambda b: float(np.dot(v, b)) / np.linalg.norm(b))
    z = (1 - alpha) * np.asarray(v) + alpha * b
    return z / np.linalg.norm(z)


def test_ms_tta_boost_shifts_keys_queries_and_views_by_hand():
    alpha = 0.5
    eng = Engine(TEXT, "ms-tta+boost", config(k=1, alpha=alpha))
    r1 = eng.step(torch.tensor(np.array(S1), dtype=torch.float32))
    q = S1[0]  # empty bank: nothing to shift toward
    np.testing.assert_allclose(
        r1.logits.numpy(),
        SCALE * q + np.array([kernel(q, [S1[0], S1[1]]), kernel(q, [S1[2]]), 0.0]),
        rtol=1e-5,
        atol=1e-4,
    )
    r2 = eng.step(torch.tensor(np.array(S2), dtype=torch.float32))
    bank = [S1[0]]  # raw features only, never shifted ones
    z1 = S1[0]  # the persistent entry, keyed by its shifted z (= f)
    q = shift(S2[0], bank, alpha)
    w1, w2 = shift(S2[1], bank, alpha), shift(S2[2], bank, alpha)
    expected = SCALE * S2[0] + np.array([kernel(q, [z1, w2]), 0.0, kernel(q, [w1])])
    np.testing.assert_allclose(r2.logits.numpy(), expected, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(r2.feature.numpy(), q, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("views,mode", [(1, "confident"), (12, "confident"), (12, "original")])
@pytest.mark.parametrize("pair", [("ms-tta+boost", "boostadapter+ms"), ("baseline+boost", "boostadapter")])
def test_equals_boostadapter_without_negative_cache(views, mode, pair):
    """Issue 9's invariant: `ms-tta+boost` == `boostadapter+ms` with neg_alpha = 0 (and the
    baseline likewise == `boostadapter`) on the same views and view mode."""
    f, t, _ = as_tensors(make_stream(n=150, classes=6, dim=16, views=views, seed=9, noise=1.5))
    cfg = EngineConfig(view_mode=mode, view_ratio=0.25, delta=1, neg_alpha=0.0, cache_alpha=6.0, beta=3.0)
    ours, peer = (replay(f, t, m, cfg).predictions for m in pair)
    assert np.array_equal(ours, peer)
    # and the negative cache does matter when on: the invariant is not vacuous
    on = dataclasses.replace(cfg, neg_alpha=5.0, neg_entropy_lower=0.0, neg_entropy_upper=1.0)
    e_ours, e_peer = Engine(t, pair[0], on), Engine(t, pair[1], on)
    diff = max(float((e_ours.step(x).logits - e_peer.step(x).logits).abs().max()) for x in f[:30])
    assert diff > 1e-3


@pytest.mark.parametrize("method", ["baseline+boost", "ms-tta+boost"])
def test_online_equals_replay(method):
    f, t, _ = as_tensors(make_stream(n=100, classes=5, dim=12, views=8, seed=2))
    cfg = EngineConfig(view_mode="original", view_ratio=0.25, delta=1)
    a = replay(f, t, method, cfg, online=True)
    b = replay(f, t, method, cfg)
    assert np.array_equal(a.predictions, b.predictions)
    np.testing.assert_allclose(a.confidence, b.confidence, atol=1e-6)


def test_the_boost_methods_are_registered_as_described():
    for name, shift_on in (("baseline+boost", False), ("ms-tta+boost", True)):
        m = get_method(name)
        sw = switches(m)
        assert (sw.cache, m.mean_shift, sw.negative, sw.boost) == (True, shift_on, False, True)
        assert m.title and m.summary
