"""The cache family's replay under `forget.rule=idle` (mstta.engine.idle_replay): the online steps'
predictions and probabilities without stepping, at every idle horizon, with and without MS and
TDA's negative cache, beside detected cuts, on exact ties (repeated frames)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import reference_forget
import torch
from synthetic import as_tensors, make_stream

from mstta import EngineConfig, get_method, replay, threads
from mstta.engine.forget import ForgetConfig
from mstta.engine.idle_replay import IdleCache

replay_mod = importlib.import_module("mstta.engine.replay")
idle_mod = importlib.import_module("mstta.engine.idle_replay")
NEG = dict(neg_entropy_lower=0.05, neg_entropy_upper=0.9)  # TDA's negative cache admits most of these samples


def _no_steps(monkeypatch):
    """The replay may not step: `Engine` refused inside `mstta.engine.replay`."""
    monkeypatch.setattr(replay_mod, "Engine", lambda *a, **k: pytest.fail("the idle replay stepped online"))


def _same(online, fast):
    assert np.array_equal(online.predictions, fast.predictions)
    np.testing.assert_allclose(online.probs, fast.probs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method", ["baseline", "tda", "ms-tta", "tda+ms"])
@pytest.mark.parametrize("idle", [1, 4, 40, 1000])
def test_the_idle_replay_equals_the_online_steps(method, idle, monkeypatch):
    f, t, _ = as_tensors(make_stream(n=240, classes=6, dim=12, views=4, seed=idle, noise=1.5))
    cfg = EngineConfig(
        view_mode="confident", view_ratio=0.5, bank_size=50, forget=ForgetConfig("idle", idle=idle), **NEG
    )
    online = replay(f, t, method, cfg, online=True, keep_probs=True)
    with monkeypatch.context() as mp:
        _no_steps(mp)
        fast = replay(f, t, method, cfg, chunk=32, keep_probs=True)
    _same(online, fast)
    if idle < 1000:  # the rule did something (1000 steps is longer than the stream)
        never = replay(f, t, method, EngineConfig(view_mode="confident", view_ratio=0.5, bank_size=50, **NEG))
        assert not np.array_equal(never.confidence, fast.confidence)


@pytest.mark.parametrize("method", ["tda", "ms-tta"])
def test_the_idle_replay_equals_the_reference_beside_detected_cuts(method):
    """idle + detect: the segments between the detector's cuts, each replayed by the idle scan."""
    from test_forget import cut_stream

    f, t = cut_stream()
    fg = ForgetConfig("idle", idle=6, detect=True, detect_warmup=30, detect_ridge=0.1)
    cfg = EngineConfig(logit_scale=100.0, forget=fg, **NEG)
    ref, cuts = reference_forget.run(f.numpy(), t.numpy(), get_method(method), cfg)
    fast = replay(f, t, method, cfg, chunk=16, keep_probs=True)
    assert np.array_equal(fast.cuts, cuts) and cuts.any()
    assert np.array_equal(fast.predictions, ref.argmax(1))
    _same(replay(f, t, method, cfg, online=True, keep_probs=True), fast)


@pytest.mark.parametrize("method", ["baseline", "tda"])
def test_the_idle_replay_breaks_ties_as_the_engine_does(method):
    """Repeated frames: equal keys give equal weights, and the engine's use goes to the first slot."""
    f, t, _ = as_tensors(make_stream(n=50, classes=4, dim=8, seed=1, noise=1.5))
    f = torch.cat([f, f[:30], f[10:40], f[:30]])
    cfg = EngineConfig(forget=ForgetConfig("idle", idle=3), capacity=2, **NEG)
    _same(replay(f, t, method, cfg, online=True, keep_probs=True), replay(f, t, method, cfg, chunk=16, keep_probs=True))


def test_a_large_class_count_replays_idle_in_chunks_of_many_entries():
    """C = 60 classes x 3 slots, 2 views: many live entries per chunk, most queries' use read from their top weights."""
    f, t, _ = as_tensors(make_stream(n=400, classes=60, dim=24, views=2, seed=3, noise=1.0))
    cfg = EngineConfig(view_mode="original", forget=ForgetConfig("idle", idle=25), **NEG)
    _same(replay(f, t, "tda", cfg, online=True, keep_probs=True), replay(f, t, "tda", cfg, chunk=64, keep_probs=True))


@pytest.mark.parametrize("idle", [1, 7, 100, 1000])
def test_a_few_class_stream_takes_its_uses_from_the_live_columns(idle, monkeypatch):
    """C = 3: most samples do not enter the full class rows, so a step's top weight is often a sample
    that is not cached; that step's use comes from the live columns (`IdleCache._live`, found again
    only when an entry comes or leaves), equal to the online steps."""
    f, t, _ = as_tensors(make_stream(n=300, classes=3, dim=16, seed=5, noise=1.0))
    cfg = EngineConfig(forget=ForgetConfig("idle", idle=idle), **NEG)
    found, live = [], IdleCache._live
    monkeypatch.setattr(IdleCache, "_live", lambda self, cols: found.append(1) or live(self, cols))
    fast = replay(f, t, "tda", cfg, chunk=64, keep_probs=True)
    assert len(found) > 10  # the path this test is for ran
    _same(replay(f, t, "tda", cfg, online=True, keep_probs=True), fast)


def test_weights_that_tie_below_the_top_use_the_first_slot():
    """Class 1's entry B (sample 0) and class 0's A (sample 1) both weigh 0 (underflow) for far queries
    whose top is their own uncached column: the engine uses the first slot, A's, so B expires first
    and A is still there for a query near it (which then stays out of A's full row). The replay takes
    those uses from the live columns ordered by slot, not by sample."""
    e = torch.eye(4)
    far = torch.nn.functional.normalize(-e[0] - e[1], dim=0)
    near = torch.nn.functional.normalize(e[0] + 0.1 * e[2], dim=0)
    f = torch.stack([e[1], e[0], *[far] * 6, near])
    cfg = EngineConfig(forget=ForgetConfig("idle", idle=4), capacity=1, beta=200.0, logit_scale=10.0)
    _same(
        replay(f, e[:2], "baseline", cfg, online=True, keep_probs=True),
        replay(f, e[:2], "baseline", cfg, chunk=4, keep_probs=True),
    )


def test_a_pool_of_many_workers_weighs_each_span_in_row_pieces(monkeypatch):
    """More workers than a span's jobs (here 12 for TDA's two caches and the read): each cache's weights
    come in row pieces, joined in order (weights, tops) before the scan; the same as the online steps."""
    f, t, _ = as_tensors(make_stream(n=200, classes=5, dim=12, seed=2, noise=1.5))
    cfg = EngineConfig(forget=ForgetConfig("idle", idle=6), **NEG)
    monkeypatch.setattr(idle_mod, "chunk_workers", lambda device: 12)
    rows, weigh = [], IdleCache.weigh
    monkeypatch.setattr(
        IdleCache, "weigh", lambda self, q, col, r0, r1: rows.append(r1 - r0) or weigh(self, q, col, r0, r1)
    )
    fast = replay(f, t, "tda", cfg, chunk=64, keep_probs=True)
    assert max(rows) < 64 and sum(rows) > 200  # pieces of the spans, for both caches
    _same(replay(f, t, "tda", cfg, online=True, keep_probs=True), fast)


def test_where_chunks_run_in_turn_each_span_is_one_product_per_cache(monkeypatch):
    """On a GPU `map_chunks` runs its items in turn, so a span's weights in row pieces would only add
    launches and host reads (a 16-core GPU host's 17 workers made 8 pieces a span: 2.2x `none`'s ops in
    `benchmarks/engine.py --parts replay_ops`). Emulated here: many cores, the chunks in this thread."""
    f, t, _ = as_tensors(make_stream(n=200, classes=5, dim=12, seed=2, noise=1.5))
    cfg = EngineConfig(forget=ForgetConfig("idle", idle=6), **NEG)
    monkeypatch.setattr(threads, "workers", lambda: 17)
    monkeypatch.setattr(threads, "PER_THREAD", False)
    rows, weigh = [], IdleCache.weigh
    monkeypatch.setattr(
        IdleCache, "weigh", lambda self, q, col, r0, r1: rows.append((r0, r1)) or weigh(self, q, col, r0, r1)
    )
    fast = replay(f, t, "tda", cfg, chunk=64, keep_probs=True)
    spans = [(0, 64), (64, 128), (128, 192), (192, 200)]
    assert sorted(set(rows)) == spans and len(rows) <= 2 * len(spans)  # whole spans, at most one per cache
    _same(replay(f, t, "tda", cfg, online=True, keep_probs=True), fast)


@pytest.mark.parametrize("width", [1, 2, 9])
def test_a_gpus_top_weights_by_topk_equal_the_cpus_by_max(width):
    """`_top_alone` off the CPU (one `topk`) and on it (numpy's `argmax` and `max`): the same sample or -1 on rows
    with a tie at the top, a tie below it, -inf columns and a single column; w is left as it was."""
    g = torch.Generator().manual_seed(width)
    w = torch.randint(0, 4, (300, width), generator=g).float()  # many ties
    w[::7, 0] = float("-inf")
    samples = torch.arange(100, 100 + width)
    before = w.clone()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(idle_mod, "top_by_topk", lambda device: True)
        by_topk = idle_mod._top_alone(w, samples)
    by_max = idle_mod._top_alone(w, samples)
    assert torch.equal(w, before) and torch.equal(by_topk, by_max)
    if width > 1:
        assert (by_max == -1).any() and (by_max >= 100).any()


@pytest.mark.parametrize("method", ["tda", "ms-tta"])
def test_the_idle_replay_with_a_gpus_top_weights_equals_the_online_steps(method, monkeypatch):
    """The whole replay through the `topk` path, on repeated frames (ties): the online steps' predictions."""
    f, t, _ = as_tensors(make_stream(n=60, classes=4, dim=8, seed=4, noise=1.5))
    f = torch.cat([f, f[:30], f[10:40]])
    cfg = EngineConfig(forget=ForgetConfig("idle", idle=5), capacity=2, **NEG)
    online = replay(f, t, method, cfg, online=True, keep_probs=True)
    monkeypatch.setattr(idle_mod, "top_by_topk", lambda device: True)
    _same(online, replay(f, t, method, cfg, chunk=16, keep_probs=True))


@pytest.mark.skipif(threads.chunk_workers(torch.device("cpu")) == 1, reason="the chunks run in turn here (one core)")
@pytest.mark.parametrize("method", ["baseline", "tda", "ms-tta", "tda+ms"])
@pytest.mark.parametrize("idle", [1, 9, 1000])
def test_weights_made_ahead_equal_the_online_steps(method, idle, monkeypatch):
    """Where the pool runs chunks side by side and the stream's samples are few against the cache's slots,
    every span's weights over every earlier sample that may enter are made ahead on the pool
    (`_made_ahead`) and the chain takes its columns from them: the online steps' predictions, TDA's
    gated negative cache included."""
    f, t, _ = as_tensors(make_stream(n=240, classes=60, dim=12, views=2, seed=idle, noise=1.2))
    cfg = EngineConfig(view_mode="original", forget=ForgetConfig("idle", idle=idle), **NEG)
    made, chained = [], []
    pool, weigh = IdleCache.weigh_pool, IdleCache.weigh
    monkeypatch.setattr(IdleCache, "weigh_pool", lambda self, *a: made.append(a[1:]) or pool(self, *a))
    monkeypatch.setattr(IdleCache, "weigh", lambda self, *a: chained.append(1) or weigh(self, *a))
    fast = replay(f, t, method, cfg, chunk=32, keep_probs=True)
    assert made and not chained
    assert sorted(set(made)) == [(a, min(240, a + 32)) for a in range(0, 240, 32)]
    _same(replay(f, t, method, cfg, online=True, keep_probs=True), fast)


@pytest.mark.parametrize(
    ("waste", "budget", "ahead"), [(1.1, 256 * 2**20, True), (1.0, 256 * 2**20, False), (1e9, 4096, False)]
)
def test_weights_are_made_ahead_only_within_their_waste_and_bytes(waste, budget, ahead, monkeypatch):
    """`_made_ahead` refuses where the pool's columns exceed AHEAD_WASTE times the most the chain's could
    be (here 1.0: the pool holds every sample, the chain at most the slots) or AHEAD_BYTES; the chain
    then weighs each span, with the same predictions."""
    f, t, _ = as_tensors(make_stream(n=160, classes=40, dim=12, seed=4, noise=1.2))
    cfg = EngineConfig(forget=ForgetConfig("idle", idle=9))
    monkeypatch.setattr(idle_mod, "chunk_workers", lambda device: 3)
    monkeypatch.setattr(idle_mod, "AHEAD_WASTE", waste)
    monkeypatch.setattr(idle_mod, "AHEAD_BYTES", budget)
    made, pool = [], IdleCache.weigh_pool
    monkeypatch.setattr(IdleCache, "weigh_pool", lambda self, *a: made.append(1) or pool(self, *a))
    fast = replay(f, t, "tda", cfg, chunk=32, keep_probs=True)
    assert bool(made) == ahead
    _same(replay(f, t, "tda", cfg, online=True, keep_probs=True), fast)
