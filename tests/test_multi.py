"""MultiEngine: S streams stepped together equal S separate engines, for every method, with streams
of different lengths that skip steps and one stream reset mid-way."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers_family import feature_methods
from synthetic import as_tensors, make_stream

from mstta import Engine, EngineConfig, UserError
from mstta.engine.multi import MultiEngine

CFG = dict(
    cache_alpha=6.0,
    beta=3.0,
    neg_entropy_lower=0.05,
    neg_entropy_upper=0.9,
    neg_alpha=0.5,
    neg_mask_lower=0.05,
    k=3,
    bank_size=9,
    capacity=2,
)


def _streams(S, views, steps=36, seed=0):
    """Stream s: its own samples (a different seed, length steps - 4 s) and a schedule of the
    steps it takes part in (it skips about one step in five; it runs out early when shorter)."""
    rng = np.random.default_rng(seed)
    feats, text = [], None
    for s in range(S):
        f, t, _ = as_tensors(make_stream(n=steps, classes=5, dim=12, views=views, seed=100 + s, noise=1.5))
        text = t if text is None else text
        feats.append(f[: steps - 4 * s])
    takes = [rng.random(steps) > 0.2 for _ in range(S)]
    return feats, text, takes


def _run(method, S, views, cfg, reset_at=15):
    feats, text, takes = _streams(S, views)
    multi = MultiEngine(text, method, cfg, streams=S)
    single = [Engine(text, method, cfg) for _ in range(S)]
    cursor = [0] * S
    compared = 0
    for t in range(len(takes[0])):
        if t == reset_at:  # one stream starts over, the others go on
            multi.reset(stream=S // 2)
            single[S // 2].reset()
        batch = [feats[s][cursor[s]] if takes[s][t] and cursor[s] < len(feats[s]) else None for s in range(S)]
        if all(b is None for b in batch):
            continue
        out = multi.step(batch)
        for s, x in enumerate(batch):
            if x is None:
                assert out[s] is None and out.predictions[s] == -1
                continue
            want = single[s].step(x)
            assert out[s].prediction == want.prediction
            torch.testing.assert_close(out[s].logits, want.logits, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(out[s].entropy_tensor, want.entropy_tensor)
            cursor[s] += 1
            compared += 1
    for s in range(S):
        assert multi.n_seen[s] == single[s].n_seen and multi.bank_len(s) == single[s].bank_len
        if multi.pos is not None:
            torch.testing.assert_close(multi.pos.ent[s], single[s].pos.ent[0])
    return compared


@pytest.mark.parametrize("method", feature_methods())
@pytest.mark.parametrize("S", range(1, 8))
def test_streams_equal_separate_engines(method, S):
    assert _run(method, S, 1, EngineConfig(**CFG)) > 20 * S


@pytest.mark.parametrize("method", feature_methods())
@pytest.mark.parametrize("mode", ["confident", "original"])
def test_multi_view_streams_equal_separate_engines(method, mode):
    cfg = EngineConfig(view_mode=mode, view_ratio=0.34, delta=1, **CFG)
    assert _run(method, 3, 6, cfg) > 60


@pytest.mark.parametrize("bank_dtype", ["float16", "bfloat16"])
def test_reduced_bank_streams_equal_separate_engines(bank_dtype):
    assert _run("ms-tta", 4, 1, EngineConfig(bank_dtype=bank_dtype, **CFG)) > 80


def test_unbounded_bank_grows_for_every_stream():
    feats, text, _ = _streams(2, 1, steps=30)
    cfg = EngineConfig(**{**CFG, "bank_size": None})
    multi, one = MultiEngine(text, "ms-tta", cfg, streams=2), Engine(text, "ms-tta", cfg)
    x = torch.cat([feats[0]] * 40)[:1100]  # past the first allocation (1024 rows)
    for i, f in enumerate(x):
        out = multi.step([f, None] if i % 3 else [f, f])
        assert out[0].prediction == one.step(f).prediction
    assert multi.bank_len(0) == 1100 and multi.bank_len(1) == 367 and multi.bank.rows.shape[1] == 2048


def test_stacked_input_and_bad_shapes():
    feats, text, _ = _streams(3, 1, steps=20)
    multi = MultiEngine(text, "tda+ms", EngineConfig(**CFG), streams=3)
    out = multi.step(torch.stack([f[0] for f in feats]), active=[True, False, True])
    assert out.predictions[1] == -1 and multi.n_seen.tolist() == [1, 0, 1]
    with pytest.raises(UserError, match=r"feature shape \(2, 12\) does not match 3 streams"):
        multi.step(torch.zeros(2, 12))
    with pytest.raises(UserError, match="got 2 samples for 3 streams"):
        multi.step([feats[0][0], None])
    with pytest.raises(UserError, match="every stream skips"):
        multi.step([None, None, None])
    with pytest.raises(UserError, match=r"^streams 0: expected an integer >= 1$"):
        MultiEngine(text, "ms-tta", streams=0)
