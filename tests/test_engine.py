"""The online engine: the paper's order of operations on hand-computed cases, cache invariants
under random streams, reset/state, and every method through one interface."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mstta import Engine, EngineConfig, UserError, get_method, list_methods
from mstta.engine import functional as Fn

# The cache family (its reference, its device-resident step); the other families have their own tests.
CACHE_METHODS = [m for m in list_methods() if get_method(m).family == "cache"]

E = torch.eye(4)
TEXT = E[:3]


def _h(logits):
    p = torch.softmax(torch.as_tensor(logits, dtype=torch.float64), -1)
    return float(-(p * p.log()).sum())


def test_ms_tta_three_steps_by_hand():
    """Alg. 1 on C=3, d=4: logits, mean shift over earlier raw features, cache before logits."""
    cfg = EngineConfig(k=1, alpha=0.5, capacity=1, kernel="linear", cache_alpha=1.0, lam=1.0, logit_scale=10.0)
    eng = Engine(TEXT, "ms-tta", cfg)
    # 1: f = e1, empty bank -> z = f; cached in class 0; cache logit z.z = 1
    r1 = eng.step(E[0])
    assert torch.allclose(r1.clip_logits, torch.tensor([10.0, 0, 0]))
    assert r1.entropy == pytest.approx(_h([10.0, 0, 0]), rel=1e-4)
    assert torch.allclose(r1.logits, torch.tensor([11.0, 0, 0]))
    # 2: f = (e1+e2)/sqrt2, ties -> class 0 (first); nn = e1; z = norm(.5 f + .5 e1);
    #    class 0 is full with lower entropy -> no replacement; logit_0 += z . e1
    f2 = Fn.normalize(E[0] + E[1])
    z2 = Fn.normalize(0.5 * f2 + 0.5 * E[0])
    r2 = eng.step(f2)
    assert torch.allclose(r2.feature, z2, atol=1e-6)
    assert torch.allclose(r2.logits, r2.clip_logits + torch.tensor([float(z2 @ E[0]), 0, 0]), atol=1e-5)
    assert eng.cache_fill().tolist() == [1, 0, 0]
    # 3: f = e2 -> class 1; nn of e2 among {e1, f2} is f2; z3 = norm(.5 e2 + .5 f2) cached in class 1
    z3 = Fn.normalize(0.5 * E[1] + 0.5 * f2)
    r3 = eng.step(E[1])
    assert torch.allclose(r3.feature, z3, atol=1e-6)
    expected = torch.tensor([10 * 0.0 + float(z3 @ E[0]), 10.0 + 1.0, 0.0])
    assert torch.allclose(r3.logits, expected, atol=1e-5)
    assert eng.cache_fill().tolist() == [1, 1, 0] and eng.bank_len == 3


def test_cache_replaces_highest_entropy_only_when_strictly_lower():
    cfg = EngineConfig(capacity=2, logit_scale=10.0)
    eng = Engine(TEXT, "baseline", cfg)
    confident, unsure, middling = E[0], Fn.normalize(E[0] + 0.9 * E[1]), Fn.normalize(E[0] + 0.5 * E[1])
    eng.step(unsure)
    eng.step(confident)
    before = eng.cache_entropy()[0].copy()
    eng.step(unsure)  # equal to the worst entry: not strictly lower -> unchanged
    assert np.array_equal(eng.cache_entropy()[0], before)
    eng.step(middling)  # lower than the worst: replaces it
    after = eng.cache_entropy()[0]
    assert sorted(after) == sorted([before.min(), eng.step(middling).entropy])


def test_exp_kernel_uses_cache_alpha_beta_and_lambda():
    cfg = EngineConfig(capacity=1, cache_alpha=2.0, beta=5.0, lam=0.5, logit_scale=10.0)
    eng = Engine(TEXT, "baseline", cfg)
    eng.step(E[0])
    f = Fn.normalize(E[0] + E[2])
    r = eng.step(f)
    cache0 = 2.0 * math.exp(-5.0 * (1 - float(f @ E[0])))  # the class-0 entry (e1)
    # f itself goes to class 0? its CLIP logits tie between classes 0 and 2 -> class 0, higher entropy -> not cached
    assert torch.allclose(r.logits, r.clip_logits + 0.5 * torch.tensor([cache0, 0, 0]), atol=1e-5)


def test_tda_negative_cache_gate_and_subtraction():
    cfg = EngineConfig(logit_scale=1.0, neg_entropy_lower=0.2, neg_entropy_upper=0.9, lam=1.0)
    eng = Engine(TEXT, "tda", cfg)
    f = Fn.normalize(E[0] + 0.3 * E[1])
    r = eng.step(f)
    probs = torch.softmax(r.clip_logits, -1)
    assert 0.2 < r.entropy / math.log2(3) < 0.9
    mask = ((probs > cfg.neg_mask_lower) & (probs < cfg.neg_mask_upper)).float()
    pos = cfg.cache_alpha * torch.tensor([1.0, 0, 0])  # its own entry, affinity exp(0) = 1
    neg = cfg.neg_alpha * mask  # its own negative entry
    assert torch.allclose(r.logits, r.clip_logits + pos - neg, atol=1e-5)


@pytest.mark.parametrize("method", CACHE_METHODS)
def test_lambda_zero_is_zero_shot_exactly(method, stream):
    eng = Engine(torch.from_numpy(stream["text"]), method, EngineConfig(lam=0.0))
    for f in torch.from_numpy(stream["features"][:60]):
        r = eng.step(f)
        assert torch.equal(r.logits, r.clip_logits)


def test_boosted_views_change_only_the_current_prediction():
    g = torch.Generator().manual_seed(0)
    views = Fn.normalize(TEXT[1] + 0.2 * torch.randn(20, 4, generator=g))
    views[0] = Fn.normalize(E[0] + 0.1 * E[1])
    cfg = EngineConfig(view_mode="original", delta=2, logit_scale=10.0)
    boost, plain = Engine(TEXT, "boostadapter", cfg), Engine(TEXT, "tda", cfg)
    rb, rp = boost.step(views), plain.step(views)
    assert torch.equal(rb.clip_logits, rp.clip_logits)
    assert rb.logits[1] > rp.logits[1]  # views of class 1 boosted its logit
    assert boost.cache_fill().tolist() == plain.cache_fill().tolist() == [1, 0, 0]


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    capacity=st.integers(1, 4),
    method=st.sampled_from(["baseline", "ms-tta", "tda+ms"]),
    bank=st.sampled_from([None, 3]),
)
def test_cache_invariants_random_streams(seed, capacity, method, bank):
    g = torch.Generator().manual_seed(seed)
    text = Fn.normalize(torch.randn(4, 8, generator=g))
    eng = Engine(text, method, EngineConfig(capacity=capacity, bank_size=bank, k=2))
    for f in torch.randn(40, 8, generator=g):
        before = eng.cache_entropy()
        r = eng.step(f)
        after = eng.cache_entropy()
        p = r.clip_prediction
        assert (np.isfinite(after).sum(1) <= capacity).all()
        changed = np.nonzero((before != after).any(1))[0].tolist()
        assert changed in ([], [p])  # only the pseudo-label's class moves
        if changed:
            old, new = before[p], after[p]
            j = int(np.argmax(old))
            assert r.entropy < old[j]  # strictly lower than the replaced one
            assert sorted(new) == sorted(np.concatenate([np.delete(old, j), [r.entropy]]))
        if method != "baseline":
            assert r.feature.norm().item() == pytest.approx(1.0, abs=1e-5)
        if bank is not None:
            assert eng.bank_len <= bank


def test_reset_restores_a_fresh_engine(stream):
    text, feats = torch.from_numpy(stream["text"]), torch.from_numpy(stream["features"])
    eng = Engine(text, "tda+ms")
    for f in feats[:100]:
        eng.step(f)
    eng.reset()
    fresh = Engine(text, "tda+ms")
    for f in feats[100:160]:
        assert torch.equal(eng.step(f).logits, fresh.step(f).logits)


def test_state_dict_resumes_a_stream(stream):
    text, feats = torch.from_numpy(stream["text"]), torch.from_numpy(stream["features"])
    a = Engine(text, "ms-tta")
    for f in feats[:80]:
        a.step(f)
    state = a.state_dict()
    b = Engine(text, "ms-tta")
    b.load_state_dict(state)
    c = copy.deepcopy(a)
    for f in feats[80:140]:
        ra = a.step(f)
        assert torch.equal(ra.logits, b.step(f).logits)
        assert torch.equal(ra.logits, c.step(f).logits)


def test_bounded_bank_is_fifo():
    text = TEXT
    eng = Engine(text, "ms-tta", EngineConfig(bank_size=2, k=1, alpha=1.0))
    eng.step(E[0])
    eng.step(E[1])
    eng.step(E[2])  # bank now holds e2, e3 (e1 evicted)
    z = eng.step(E[0]).feature
    assert eng.bank_len == 2
    # alpha=1: z is its nearest neighbour among {e2, e3} (tie -> earlier: e2)
    assert torch.allclose(z, E[1])


def test_bad_inputs_raise_one_line_errors():
    with pytest.raises(UserError, match="unknown method 'msta'"):
        Engine(TEXT, "msta")
    with pytest.raises(UserError, match="C >= 2"):
        Engine(torch.ones(1, 4))
    with pytest.raises(
        UserError, match=r"feature shape \(5,\) does not match the classifier: expected \[4\] or \[V, 4\]"
    ):
        Engine(TEXT).step(torch.ones(5))
    with pytest.raises(UserError, match=r"feature shape \(0, 4\)"):
        Engine(TEXT).step(torch.ones(0, 4))
    with pytest.raises(UserError, match=r"feature shape \(2, 3, 4\)"):
        Engine(TEXT).step(np.ones((2, 3, 4)))
    with pytest.raises(UserError, match="'k'"):
        EngineConfig(k=-1)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none on this machine)")
def test_cuda_matches_cpu(stream):
    text, feats = torch.from_numpy(stream["text"]), torch.from_numpy(stream["features"])
    cpu, gpu = Engine(text, "tda+ms"), Engine(text.cuda(), "tda+ms")
    agree = [cpu.step(f).prediction == gpu.step(f.cuda()).prediction for f in feats]
    assert np.mean(agree) > 0.99
    assert gpu.step(feats[0].cuda()).logits.is_cuda


def _unchecked(**values):
    """A config with values past the config's own bounds (a library caller can build one)."""
    cfg = EngineConfig()
    for k, v in values.items():
        setattr(cfg, k, v)
    return cfg


def test_memory_is_checked_before_allocating():
    text = Fn.normalize(torch.randn(1000, 512))
    with pytest.raises(
        UserError, match=r"capacity 1000000000 x 1000 classes x 512 dims\).* needs [0-9.]+ PB; this machine has"
    ):
        Engine(text, "baseline", _unchecked(capacity=10**9))
    with pytest.raises(UserError, match=r"bank 1000000000 x 512 dims \(bank_size\)"):
        Engine(text, "ms-tta", _unchecked(bank_size=10**9))
    with pytest.raises(UserError, match=r"neg_capacity 100000000 x 1000 classes"):
        Engine(text, "tda", _unchecked(neg_capacity=10**8))
    Engine(text, "baseline", _unchecked(bank_size=10**9))  # no mean shift: no bank to allocate


def test_default_bank_is_a_fixed_ring_buffer():
    from mstta.engine.config import DEFAULT_BANK_SIZE

    eng = Engine(TEXT, "ms-tta")
    assert eng.config.bank_size == DEFAULT_BANK_SIZE and eng.bank.rows.shape[1] == DEFAULT_BANK_SIZE
    small = Engine(TEXT, "ms-tta", EngineConfig(bank_size=5))
    ptrs = {small.bank.rows.data_ptr()}
    for f in Fn.normalize(torch.randn(23, 4)):
        small.step(f)
        ptrs.add(small.bank.rows.data_ptr())
    assert ptrs == {small.bank.rows.data_ptr()} and small.bank.rows.shape[1] == 5  # never reallocated
    assert sorted(small.bank.time[0].tolist()) == [18, 19, 20, 21, 22]  # the 5 most recent
    grow = Engine(TEXT, "ms-tta", EngineConfig(bank_size=None))
    for f in Fn.normalize(torch.randn(1030, 4)):
        grow.step(f)
    assert grow.bank_len == 1030 and grow.bank.rows.shape[1] == 2048  # null: unbounded


def test_cuda_graph_needs_cuda_and_a_bounded_bank():
    with pytest.raises(UserError, match="cuda_graph=True needs a CUDA device"):
        Engine(TEXT, "ms-tta", cuda_graph=True)
    assert Engine(TEXT, "ms-tta").cuda_graph is False  # automatic: eager on the CPU


@pytest.mark.parametrize("method", ["ms-tta", "tda", "boostadapter+ms"])
def test_lambda_zero_is_the_clip_logits_of_the_prediction_path(method):
    """lam = 0 gives the CLIP logits of the method's own prediction path: with confident views
    that is the confident views' mean, not CLIP on the original image."""
    g = torch.Generator().manual_seed(0)
    views = Fn.normalize(torch.randn(10, 20, 4, generator=g))
    eng = Engine(TEXT, method, EngineConfig(lam=0.0, view_mode="confident", view_ratio=0.3))
    differs = 0
    for x in views:
        r = eng.step(x)
        assert torch.equal(r.logits, r.clip_logits)
        assert torch.allclose(
            r.clip_logits,
            100.0
            * Fn.normalize(x)
            .index_select(0, torch.argsort(Fn.entropy(100.0 * Fn.normalize(x) @ TEXT.T), stable=True)[:6])
            .mean(0)
            @ TEXT.T,
            atol=1e-4,
        )  # floor(0.3 * 20) views
        differs += not torch.allclose(r.clip_logits, 100.0 * Fn.normalize(x[0]) @ TEXT.T, atol=1e-3)
    assert differs == len(views)


def test_state_of_a_grown_unbounded_bank_loads_into_a_fresh_engine():
    feats = Fn.normalize(torch.randn(1100, 4))
    a = Engine(TEXT, "ms-tta", EngineConfig(bank_size=None))
    for f in feats[:1030]:
        a.step(f)
    b = Engine(TEXT, "ms-tta", EngineConfig(bank_size=None))  # 1024 rows: shapes differ, replaced
    b.load_state_dict(a.state_dict())
    same = Engine(TEXT, "ms-tta", EngineConfig(bank_size=None))
    for f in feats[:1030]:
        same.step(f)
    keep = same.bank.rows
    same.load_state_dict(a.state_dict())  # same shapes: copied in place
    assert same.bank.rows is keep
    for f in feats[1030:]:
        ra = a.step(f)
        assert torch.equal(ra.logits, b.step(f).logits) and torch.equal(ra.logits, same.step(f).logits)
