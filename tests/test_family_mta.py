"""MTA (mstta.engine.families.mta) against the independent reference (tests/reference_mta.py), the
engine/replay/MultiEngine contracts, per-sample convergence in batches and the few-view fallbacks."""

from __future__ import annotations

import numpy as np
import pytest
import reference_mta as ref
import torch
from synthetic import make_stream

from mstta import Engine, MultiEngine, replay
from mstta.bench.config import load_dataset_config
from mstta.engine.config import EngineConfig
from mstta.engine.families import mta
from mstta.engine.methods import get_method
from mstta.errors import UserError


def stream(C, V, seed, n, d=32, view_noise=0.5):
    s = make_stream(n=n, classes=C, dim=d, views=V, seed=seed, view_noise=view_noise)
    x = torch.nn.functional.normalize(torch.from_numpy(s["features"]).double(), dim=-1)
    text = torch.nn.functional.normalize(torch.from_numpy(s["text"]).double(), dim=-1)
    return (x.unsqueeze(1) if V == 1 else x), text


def config(**kw):
    return EngineConfig(mta=mta.Params(**kw))


def run_engine(x, text, cfg=None):
    e = Engine(text, "mta", cfg)
    rows = [e.step(v) for v in x]
    return torch.stack([r.logits for r in rows]), rows


def check_against_reference(x, text, cfg=None):
    cfg = cfg or EngineConfig()
    p = cfg.mta
    scores, rows = run_engine(x, text, cfg)
    for i, views in enumerate(x.numpy()):
        logits = ref.mta(
            views,
            text.numpy(),
            cfg.logit_scale,
            p.lambda_y,
            p.lambda_q,
            p.max_iter,
            p.th,
            p.temperature,
            p.bandwidth_ratio,
        )
        assert int(scores[i].argmax()) == int(np.argmax(logits))
        np.testing.assert_allclose(scores[i].numpy(), logits, rtol=0, atol=1e-6)
        e = np.exp(logits - logits.max())
        np.testing.assert_allclose(rows[i].probs.numpy(), e / e.sum(), rtol=0, atol=1e-9)
    return scores


@pytest.mark.parametrize("C,n", [(2, 8), (10, 8), (1000, 4)])
@pytest.mark.parametrize("V", [1, 64])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_engine_matches_reference(C, n, V, seed):
    x, text = stream(C, V, seed, n)
    scores = check_against_reference(x, text)
    if V == 64:  # the mode moved off view 0: the test compares more than CLIP's logits
        assert not torch.allclose(scores, 100.0 * x[:, 0] @ text.T, atol=1e-3)


def test_official_math_changes_the_prediction():
    # on tight views around a noisy original, MTA's mode predicts differently from view 0 for some samples
    x, text = stream(10, 64, 10, 12, view_noise=0.8)
    scores = check_against_reference(x, text)
    assert (scores.argmax(-1) != (x[:, 0] @ text.T).argmax(-1)).any()


@pytest.mark.parametrize("V", [2, 3, 4, 5, 9])
def test_few_views_fallback(V):
    # k = int(0.3 (V-1)) is 0 for V < 5 (the official bandwidth is then NaN): k = 1 instead
    assert mta.neighbours(V, 0.3) == max(1, int(0.3 * (V - 1)))
    x, text = stream(1000, 64, 4, 3, d=64)
    x = x[:, :V].contiguous()
    check_against_reference(x, text)
    for dtype in (torch.float32, torch.float64):
        out = mta.replay(x.to(dtype), text.to(dtype), mta.Params(), 100.0)
        for t in out:
            assert torch.isfinite(t).all()


def test_one_view_is_zero_shot_clip():
    x, text = stream(1000, 1, 5, 4, d=64)
    for dtype in (torch.float32, torch.float64):
        out = mta.replay(x.to(dtype), text.to(dtype), mta.Params(), 100.0)
        torch.testing.assert_close(out.scores, out.clip, rtol=0, atol=0)
        assert torch.isfinite(out.probs).all()


def test_identical_views_are_finite():
    # a zero bandwidth (every view identical, or k+1 of them) is NaN in the official code; the
    # floor on 2h^2 keeps the mode at the (shared) view
    x, text = stream(10, 64, 6, 3)
    x[0] = x[0, :1].expand(64, -1)  # all 64 identical
    x[1, 20:] = x[1, 0]  # 44 copies of view 0
    x[2, 1:32] = x[2, 40]  # 31 copies of another view
    for dtype in (torch.float32, torch.float64):
        out = mta.replay(x.to(dtype), text.to(dtype), mta.Params(), 100.0)
        for t in out:
            assert torch.isfinite(t).all()
    scores = check_against_reference(x, text)
    torch.testing.assert_close(scores[0], 100.0 * x[0, 0] @ text.T, rtol=0, atol=1e-9)


def test_batched_loops_stop_per_sample():
    # th = 1e-2: samples stop their inner loops after different counts; the batch must run each
    # sample's own counts (a batch that kept iterating every sample would move the early stoppers)
    x, text = stream(10, 64, 7, 12, view_noise=0.8)
    cfg = config(th=1e-2)
    stepped, _ = run_engine(x, text, cfg)
    check_against_reference(x, text, cfg)
    batched = mta.replay(x, text, cfg.mta, cfg.logit_scale).scores
    torch.testing.assert_close(batched, stepped, rtol=0, atol=1e-9)
    never = mta.replay(x, text, mta.Params(th=0.0), cfg.logit_scale).scores  # no early stop at all
    assert (never - stepped).abs().max() > 1e-6


def test_replay_equals_stepping_the_engine():
    x, text = stream(1000, 64, 8, 8)
    scores, rows = run_engine(x, text)
    out = mta.replay(x, text, mta.Params(), 100.0)
    torch.testing.assert_close(out.scores, scores, rtol=0, atol=1e-9)
    torch.testing.assert_close(out.clip, torch.stack([r.clip_logits for r in rows]), rtol=0, atol=1e-12)
    r = replay(x, text, "mta", keep_probs=True)
    online = replay(x, text, "mta", online=True, keep_probs=True)
    assert (r.predictions == scores.argmax(-1).numpy()).all()
    assert (online.predictions == r.predictions).all()
    np.testing.assert_allclose(r.probs, online.probs, atol=1e-6)


def test_replay_chunks_agree(monkeypatch):
    x, text = stream(10, 64, 9, 10)
    whole = mta.replay(x, text, mta.Params(), 100.0)
    monkeypatch.setitem(mta.CHUNK_ELEMENTS, "cpu", 64 * 32 * 3)  # chunks of 3 samples
    parts = mta.replay(x, text, mta.Params(), 100.0)
    torch.testing.assert_close(parts.scores, whole.scores, rtol=0, atol=1e-9)


def test_aggregate_is_the_mode():
    x, text = stream(1000, 64, 10, 6)
    out = mta.replay(x, text, mta.Params(), 100.0)
    mode, logits = mta.aggregate(x, text, 100.0, mta.Params())
    torch.testing.assert_close(logits, out.scores, rtol=0, atol=1e-12)
    torch.testing.assert_close(mode.norm(dim=-1), torch.ones(6, dtype=torch.float64))
    assert (logits.argmax(-1) == out.scores.argmax(-1)).all()


def test_multi_engine_equals_two_engines():
    x, text = stream(10, 64, 11, 6)
    multi = MultiEngine(text, "mta", streams=2)
    a, b = Engine(text, "mta"), Engine(text, "mta")
    for i in range(3):
        m = multi.step(torch.stack([x[i], x[3 + i]]))
        torch.testing.assert_close(m.logits[0], a.step(x[i]).logits, rtol=0, atol=1e-12)
        torch.testing.assert_close(m.logits[1], b.step(x[3 + i]).logits, rtol=0, atol=1e-12)


def test_state_reset_and_state_dict():
    x, text = stream(10, 64, 12, 3)
    e = Engine(text, "mta")
    first = e.step(x[0]).logits
    saved = e.state_dict()
    assert saved["states"] == [{}] and mta.state_bytes(1000, 512, mta.Params()) == 0
    later = e.step(x[1]).logits
    e.load_state_dict(saved)
    torch.testing.assert_close(e.step(x[1]).logits, later, rtol=0, atol=0)
    e.reset()
    assert e.n_seen == 0
    torch.testing.assert_close(e.step(x[0]).logits, first, rtol=0, atol=0)


def test_row_and_params_defaults():
    m = get_method("mta")
    assert (m.family, m.episodic, m.mean_shift, m.training_free) == ("mta", True, False, True)
    # main.py lines 346-347 (--lambda_q 4, --lambda_y 0.2); mta.py lines 19, 20, 27, 43
    p = mta.Params()
    assert (p.lambda_y, p.lambda_q, p.max_iter, p.th, p.temperature, p.bandwidth_ratio) == (0.2, 4, 5, 1e-6, 1, 0.3)
    assert not hasattr(mta, "DATASET_PARAMS")  # the official code uses the same values on every set
    cfg = load_dataset_config(None, ["mta.lambda_q=2", "mta.max_iter=3"]).engine
    assert (cfg.mta.lambda_q, cfg.mta.max_iter) == (2, 3)


@pytest.mark.parametrize(
    "key,value",
    [
        ("lambda_y", 0.0),
        ("lambda_y", float("nan")),
        ("lambda_q", -1.0),
        ("max_iter", 0),
        ("max_iter", 2.5),
        ("th", -1e-6),
        ("th", float("inf")),
        ("temperature", 0.0),
        ("bandwidth_ratio", 1.5),
    ],
)
def test_bad_values_name_the_key(key, value):
    with pytest.raises(UserError, match=key):
        mta.Params(**{key: value})
    with pytest.raises(UserError, match=key):
        load_dataset_config(None, [f"mta.{key}={value}"])
