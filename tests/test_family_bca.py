"""BCA behind Engine/MultiEngine/replay: equal to an independent transcription of the TTABC port's
`BCAState` (tests/reference_bca.py) on generated streams, ties included, and the runner's contract."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import reference_bca as ref
import torch
import torch.nn.functional as F
from helpers_family import CASES, argmax_agrees, assert_no_host_reads, run, unit_stream

from mstta import Engine, EngineConfig, MultiEngine, UserError, get_method, replay
from mstta.bench.config import load_dataset_config
from mstta.engine.families import bca

stream = unit_stream


CONFIDENT = EngineConfig(view_mode="confident")  # the port's protocol: the confident views' mean


def check_equal(scores, expected):
    assert argmax_agrees(scores, expected, ref.first_argmax)
    np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("C,V,seed", CASES)
def test_engine_equals_the_port(C, V, seed):
    feats, text = stream(C, V, seed)
    scores, probs = run(Engine(text, "bca", CONFIDENT), feats)
    expected, state = ref.bca(feats.numpy(), text.numpy())
    check_equal(scores, expected)
    np.testing.assert_allclose(probs, expected / expected.sum(1, keepdims=True), rtol=0, atol=1e-6)
    np.testing.assert_allclose(probs.sum(1), 1.0, atol=1e-12)


def test_both_updates_happen_on_these_streams():
    """The streams above move both the centres and the prior (so the comparison tests them)."""
    feats, text = stream(10, 64, 0)
    engine = Engine(text, "bca", CONFIDENT)
    run(engine, feats)
    st = engine.states[0]
    assert int((st["c1"] - 20000).sum()) > 0 and int((st["c2"] - 1).sum()) > 0
    _, state = ref.bca(feats.numpy(), text.numpy())
    np.testing.assert_allclose(st["mu"].numpy(), state.mu, atol=1e-12)
    np.testing.assert_allclose(st["prior"].numpy(), state.cluster_to_class_prob, atol=1e-12)
    assert st["c1"].tolist() == state.c1 and st["c2"].tolist() == state.c2


@pytest.mark.parametrize("C,V,seed", [(10, 1, 0), (10, 64, 1), (1000, 1, 2)])
def test_ms_row_equals_the_port_with_its_shift(C, V, seed):
    feats, text = stream(C, V, seed)
    cfg = EngineConfig(view_mode="confident", alpha=0.5, k=3)
    scores, _ = run(Engine(text, "bca+ms", cfg), feats)
    expected, _ = ref.bca(feats.numpy(), text.numpy(), shift=ref.mean_shift(3, 0.5))
    check_equal(scores, expected)
    base, _ = run(Engine(text, "bca", cfg), feats)
    assert not np.allclose(scores, base)


FROZEN = bca.Params(threshold1=1.0, threshold2=1.0)  # no update: the state stays the text's


@pytest.mark.parametrize("C,V", [(2, 1), (10, 1), (1000, 1), (10, 64)])
def test_ties_go_to_the_first_class(C, V):
    """Classes 0 and 1 share a text row and every other sample sits on it: exact ties the first
    class wins (the state frozen, so no rounding in an update can break them)."""
    feats, text = stream(C, V, 7)
    text[1] = text[0]
    feats[::2] = text[0]
    scores, _ = run(Engine(text, "bca", EngineConfig(view_mode="confident", bca=FROZEN)), feats)
    expected, _ = ref.bca(feats.numpy(), text.numpy(), threshold1=1.0, threshold2=1.0)
    check_equal(scores, expected)
    np.testing.assert_array_equal(scores[::2, 0], scores[::2, 1])
    assert (scores[::2].argmax(1) == 0).all()


@pytest.mark.parametrize("C,V", [(10, 1), (1000, 1), (10, 64)])
def test_ties_before_updates(C, V):
    """Class pairs (0, 1), (2, 3), (4, 5) share text rows; samples 0, 1, 2 (one near each pair, before
    anything updates the pair) are exact ties the pair's first class wins; only that class's centre
    then moves (toward the sample, far beyond rounding, so later samples near the pair are no ties)."""
    feats, text = stream(C, V, 9)
    for a, at in ((0, 0), (2, 1), (4, 2)):
        text[a + 1] = text[a]
        feats[at] = F.normalize(text[a] + 0.3 * feats[at], dim=-1)
    scores, _ = run(Engine(text, "bca", CONFIDENT), feats)
    expected, _ = ref.bca(feats.numpy(), text.numpy())
    check_equal(scores, expected)
    for a, at in ((0, 0), (2, 1), (4, 2)):
        assert scores[at, a] == scores[at, a + 1] and scores[at].argmax() == a


@pytest.mark.parametrize(
    "key,value",
    [("threshold1", 0.85), ("threshold2", 0.3), ("init_count1", 20000), ("init_count2", 10), ("selection_p", 0.3)],
)
def test_each_hyperparameter_reaches_the_math(key, value):
    """At logit scale 10 and a light centre prior the posteriors straddle the thresholds, so each
    value changes the outputs by far more than the tolerance."""
    feats, text = stream(10, 64, 4)
    base = dict(init_count1=3)
    cfg = EngineConfig(view_mode="confident", logit_scale=10.0, bca=bca.Params(**{**base, key: value}))
    scores, _ = run(Engine(text, "bca", cfg), feats)
    expected, _ = ref.bca(feats.numpy(), text.numpy(), tem=10.0, **{**base, key: value})
    check_equal(scores, expected)
    default, _ = ref.bca(feats.numpy(), text.numpy(), tem=10.0, **base)
    assert np.abs(expected - default).max() > 1e-3


def test_logit_scale_is_the_likelihoods_temperature():
    feats, text = stream(10, 1, 5)
    scores, _ = run(Engine(text, "bca", EngineConfig(view_mode="confident", logit_scale=50.0)), feats)
    expected, _ = ref.bca(feats.numpy(), text.numpy(), tem=50.0)
    check_equal(scores, expected)


@pytest.mark.parametrize("method", ["bca", "bca+ms"])
def test_replay_equals_stepping(method):
    feats, text = stream(10, 16, 5)
    cfg = EngineConfig(view_mode="confident", alpha=0.5)
    got = replay(feats, text, method, cfg, keep_probs=True)
    scores, probs = run(Engine(text, method, cfg, stream_length=len(feats)), feats)
    np.testing.assert_array_equal(got.predictions, scores.argmax(1))
    np.testing.assert_allclose(got.probs, probs, rtol=0, atol=1e-7)  # the result keeps float32 probs


def test_family_replay_equals_the_engine():
    feats, text = stream(10, 16, 6)
    out = bca.replay(F.normalize(feats, dim=-1), F.normalize(text, dim=-1), bca.Params(), 100.0)
    scores, probs = run(Engine(text, "bca", CONFIDENT), feats)
    np.testing.assert_array_equal(out.scores.argmax(1).numpy(), scores.argmax(1))
    np.testing.assert_allclose(out.scores.numpy(), scores, rtol=0, atol=1e-14)
    np.testing.assert_allclose(out.probs.numpy(), probs, rtol=0, atol=1e-14)


@pytest.mark.parametrize("method", ["bca", "bca+ms"])
def test_multi_engine_equals_two_engines(method):
    (a, text), (b, _) = stream(10, 8, 0), stream(10, 8, 1)
    cfg = EngineConfig(view_mode="confident", alpha=0.5)
    multi = MultiEngine(text, method, cfg, streams=2)
    got = np.stack([multi.step(torch.stack([x, y])).logits.numpy() for x, y in zip(a, b)], 1)
    for s, feats in enumerate((a, b)):
        alone, _ = run(Engine(text, method, cfg), feats)
        np.testing.assert_array_equal(got[s], alone)


@pytest.mark.parametrize("V", [1, 64])
def test_ms_at_alpha_zero_is_the_base_row(V):
    feats, text = stream(10, V, 2)
    cfg = EngineConfig(view_mode="confident", alpha=0.0)
    ms, _ = run(Engine(text, "bca+ms", cfg), feats)
    base, _ = run(Engine(text, "bca", cfg), feats)
    np.testing.assert_array_equal(ms, base)


def test_defaults_are_the_ports():
    port = dict(
        threshold1=0.05, init_count1=20000, threshold2=0.65, init_count2=1, selection_p=0.1
    )  # TTABC algorithms.py ["bca"]
    assert dataclasses.asdict(bca.Params()) == port
    assert bca.DATASET_PARAMS == {}
    assert [m.name for m in bca.METHODS] == ["bca", "bca+ms"]
    assert [m.mean_shift for m in bca.METHODS] == [False, True]
    for m in bca.METHODS:
        assert m.family == "bca" and m.training_free and not m.episodic
        assert get_method(m.name).marks == [bca.PROVENANCE]  # every output says where it comes from


@pytest.mark.parametrize("C,d", [(10, 32), (1000, 64)])
def test_state_within_its_bound(C, d):
    feats, text = stream(C, 4, 0, n=5, dim=d)
    engine = Engine(text.float(), "bca", CONFIDENT)
    for x in feats.float():
        engine.step(x)
    used = sum(t.numel() * t.element_size() for t in engine.states[0].values())
    assert used <= bca.state_bytes(C, d, engine.config.bca)
    assert bca.state_bytes(1000, 512, engine.config.bca) == 6_076_000


@pytest.mark.parametrize(
    "key,value",
    [
        ("threshold1", -0.1),
        ("threshold2", 1.5),
        ("threshold1", float("nan")),
        ("init_count1", -1),
        ("init_count1", 2.0),
        ("init_count2", True),
        ("selection_p", 0),
        ("selection_p", 1.2),
        ("threshold2", "x"),
    ],
)
def test_bad_values_name_the_key(key, value):
    with pytest.raises(UserError, match=f"'{key}'"):
        bca.Params(**{key: value})


def test_set_overrides_reach_the_section():
    cfg = load_dataset_config(None, ["bca.threshold2=0.5", "bca.init_count1=100"]).engine
    assert cfg.bca.threshold2 == 0.5 and cfg.bca.init_count1 == 100
    with pytest.raises(UserError, match="'selection_p'"):
        load_dataset_config(None, ["bca.selection_p=0"])


@pytest.mark.parametrize("V", [1, 5, 9])
def test_few_views_keep_one_and_float32_is_finite(V):
    """V < 10 keeps floor(0.1 V) = 0 views in the port (a NaN mean); here the single lowest-entropy view."""
    feats, text = stream(1000, V, 1, n=10)
    engine = Engine(text.float(), "bca+ms", CONFIDENT)
    for x in feats.float():
        r = engine.step(x)
        assert all(torch.isfinite(t).all() for t in (r.logits, r.clip_logits, r.entropy_tensor, r.feature, r.probs))
    expected, _ = ref.bca(feats.numpy(), text.numpy(), shift=ref.mean_shift(2, 0.8))
    np.testing.assert_allclose(r.logits.double().numpy(), expected[-1], atol=1e-4)
    assert [int(i) for i in run(Engine(text, "bca+ms", CONFIDENT), feats)[0].argmax(1)] == [
        ref.first_argmax(e) for e in expected
    ]


def test_clip_path_and_feature_are_the_kept_views():
    """The CLIP logits, entropy and bank feature of a multi-view sample are those of the mean of
    the kept views (the raw feature the centre update reads)."""
    feats, text = stream(10, 64, 3, n=1)
    r = Engine(text, "bca", CONFIDENT).step(feats[0])
    logits = 100 * feats[0] @ text.T
    ent = -(logits.softmax(-1) * logits.log_softmax(-1)).sum(-1)
    keep = ent.argsort()[:6]
    np.testing.assert_allclose(r.feature.numpy(), feats[0][keep].mean(0).numpy(), rtol=0, atol=1e-15)
    np.testing.assert_allclose(r.clip_logits.numpy(), logits[keep].mean(0).numpy(), rtol=0, atol=1e-12)
    p = torch.softmax(r.clip_logits, -1)
    np.testing.assert_allclose(float(r.entropy_tensor), float(-(p * p.log()).sum()), rtol=1e-12)


def test_reset_and_state_dict():
    feats, text = stream(10, 8, 8)
    engine = Engine(text, "bca+ms", CONFIDENT)
    first, _ = run(engine, feats[:10])
    saved = engine.state_dict()
    rest, _ = run(engine, feats[10:])
    resumed = Engine(text, "bca+ms", CONFIDENT)
    resumed.load_state_dict(saved)
    np.testing.assert_array_equal(run(resumed, feats[10:])[0], rest)
    engine.reset()
    assert engine.n_seen == 0 and int(engine.states[0]["c1"].sum()) == 10 * 20000
    np.testing.assert_array_equal(run(engine, feats[:10])[0], first)


@pytest.mark.parametrize("method,V", [("bca", 1), ("bca", 16), ("bca+ms", 16)])
def test_step_reads_no_number_on_the_host(method, V, monkeypatch):
    """No Python number is read from a tensor during a warm step (on a GPU each would stall it)."""
    feats, text = stream(10, V, 3, n=12)
    assert_no_host_reads(method, feats, text, monkeypatch, warm=6)
