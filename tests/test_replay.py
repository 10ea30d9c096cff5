"""Vectorised replay gives exactly the online engine's predictions; and is deterministic."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
import torch
from helpers_family import feature_methods
from synthetic import as_tensors, make_stream

from mstta import EngineConfig, get_method, replay
from mstta.engine.cache_rules import EMPTY_TIME, entropy_slot, fifo_slot
from mstta.engine.forget import ForgetConfig, timeliness_slot
from mstta.engine.replay import steps_online

replay_mod = importlib.import_module("mstta.engine.replay")

CASES = [
    # (views, view_mode, overrides)
    (1, "confident", {}),
    (1, "confident", {"bank_size": 5, "k": 3}),
    (1, "confident", {"ms_steps": 2, "kernel": "linear"}),
    (12, "confident", {"view_ratio": 0.25}),
    (12, "original", {"delta": 2, "view_ratio": 0.25}),
]


@pytest.mark.parametrize("method", feature_methods())
@pytest.mark.parametrize("views,mode,overrides", CASES)
def test_replay_equals_online(method, views, mode, overrides):
    f, t, _ = as_tensors(make_stream(n=150, classes=5, dim=12, views=views, seed=7))
    cfg = EngineConfig(view_mode=mode, **overrides)
    online = replay(f, t, method, cfg, online=True)
    fast = replay(f, t, method, cfg, chunk=32)
    assert np.array_equal(online.predictions, fast.predictions)
    assert np.array_equal(online.clip_predictions, fast.clip_predictions)
    np.testing.assert_allclose(online.confidence, fast.confidence, atol=1e-5)


def test_replay_equals_online_with_duplicate_features():
    """Exact ties in the kNN (repeated frames) resolve the same way: earlier sample first."""
    f, t, _ = as_tensors(make_stream(n=60, classes=4, dim=8, seed=1))
    f = torch.cat([f, f[:30], f[10:40]])
    cfg = EngineConfig(k=2)
    assert np.array_equal(
        replay(f, t, "ms-tta", cfg, online=True).predictions, replay(f, t, "ms-tta", cfg, chunk=16).predictions
    )


@pytest.mark.parametrize("policy,timeliness", [("entropy", None), ("entropy", (5, 0.7)), ("fifo", None)])
@pytest.mark.parametrize("gated", [False, True])
def test_the_slot_scan_equals_the_slot_rules_step_by_step(policy, timeliness, gated):
    """The replay's scan (`_intervals`, whose common cases are inline) gives each sample the interval that
    calling the slot rules at every step gives: rows that fill, tied and equal entropies, gated samples."""
    rng = np.random.default_rng(3)
    n, C, Q = 600, 40, 3  # rows fill over the first ~200 samples
    labels = rng.integers(0, C, n)
    h = rng.choice([0.1, 0.2, 0.2, 0.5, 0.9, 1.3], n).astype(np.float64)
    gate = rng.random(n) < 0.6 if gated else None
    ent, when, owner = np.full((C, Q), math.inf), np.full((C, Q), EMPTY_TIME), np.full((C, Q), -1)
    end = np.full(n, -1)
    for t in range(n):
        if gate is not None and not gate[t]:
            continue
        c = labels[t]
        if policy == "fifo":
            j = fifo_slot(when[c].tolist())
        elif timeliness is not None:
            j = timeliness_slot(ent[c].tolist(), when[c].tolist(), h[t], t, *timeliness, math.log(C))
        else:
            j = entropy_slot(ent[c].tolist(), when[c].tolist(), h[t])
        if j >= 0:
            if owner[c, j] >= 0:
                end[owner[c, j]] = t
            owner[c, j], ent[c, j], when[c, j], end[t] = t, h[t], t, n
    fast = replay_mod._intervals(labels, h, Q, C, policy, None if gate is None else gate.tolist(), timeliness)
    assert np.array_equal(fast, end)
    assert (end == n).any() and ((end >= 0) & (end < n)).any()  # kept to the end, replaced
    admitted = np.ones(n, bool) if gate is None else gate
    assert (end[admitted] == -1).any() == (timeliness is None and policy != "fifo")  # entropy refuses, these two not


@pytest.mark.parametrize("bank_size", [None, 7])
def test_a_chunk_budget_keeps_the_predictions(monkeypatch, bank_size):
    """Mean-shift chunks shrink to fit `SIMS_BYTES` (here 600 B, a few rows): the same predictions
    as the online engine, and no chunk's similarities over the budget."""
    import importlib

    replay_mod = importlib.import_module("mstta.engine.replay")
    f, t, _ = as_tensors(make_stream(n=80, classes=4, dim=8, seed=3))
    monkeypatch.setattr(replay_mod, "SIMS_BYTES", 600)
    seen = []
    real = replay_mod.Fn.shift_by_sims
    monkeypatch.setattr(
        replay_mod.Fn, "shift_by_sims", lambda q, sims, *a, **k: seen.append(sims.numel()) or real(q, sims, *a, **k)
    )
    cfg = EngineConfig(bank_size=bank_size)
    fast = replay(f, t, "ms-tta", cfg, chunk=32).predictions
    assert len(seen) > 10 and max(seen) * 4 <= 600  # not 3 chunks of 32 rows
    assert np.array_equal(fast, replay(f, t, "ms-tta", cfg, online=True).predictions)


def test_replay_is_deterministic_and_adapts():
    f, t, y = as_tensors(make_stream(n=1200, classes=8, dim=32, seed=2))
    a = replay(f, t, "ms-tta")
    b = replay(f, t, "ms-tta")
    assert np.array_equal(a.predictions, b.predictions)
    zero_shot = (a.clip_predictions == y).mean()
    baseline = (replay(f, t, "baseline").predictions == y).mean()
    assert (a.predictions == y).mean() > baseline > zero_shot  # the paper's ordering on a clustered stream


def test_alpha_zero_is_the_baseline():
    """The alpha ablation's first row: alpha = 0 reduces MS-TTA to the cache baseline."""
    f, t, _ = as_tensors(make_stream(n=300, classes=6, dim=16, seed=4))
    assert np.array_equal(
        replay(f, t, "ms-tta", EngineConfig(alpha=0.0)).predictions, replay(f, t, "baseline").predictions
    )


@pytest.mark.parametrize("method", ["ms-tta", "tda", "boostadapter", "dmn-zs", "onzeta", "dpe", "tda+ms"])
@pytest.mark.parametrize("forget", [{}, {"detect": True}, {"rule": "periodic", "every": 3}, {"rule": "timeliness"}])
def test_an_empty_stream_replays_to_no_row(method, forget):
    """Zero samples: every output has zero rows (the chunked, segmented and family paths once failed
    on an empty list), the probabilities [0, C], the resets [0] where the setting resets."""
    text = torch.nn.functional.normalize(torch.randn(5, 16, generator=torch.Generator().manual_seed(0)), dim=-1)
    cfg = EngineConfig(forget=ForgetConfig(**forget))
    r = replay(torch.zeros(0, 2, 16), text, method, cfg, keep_probs=True)
    assert all(len(a) == 0 for a in (r.predictions, r.clip_predictions, r.confidence, r.clip_confidence, r.entropy))
    assert r.probs.shape == (0, 5) and (r.cuts is None) == (not cfg.forget.resets)


def test_which_rows_and_settings_the_replay_steps():
    """`steps_online` is what `replay` does: the cache family vectorises every rule (idle too) and
    steps only to boost views; another family vectorises between resets and steps under a rule that
    changes its state at every step, with mean shift, or without its replay (TPT without the tower)."""
    fg = lambda **kw: EngineConfig(forget=ForgetConfig(**kw))
    assert not any(steps_online(get_method("ms-tta"), fg(rule=r)) for r in ("none", "timeliness", "idle"))
    assert steps_online(get_method("boostadapter"), fg()) and not steps_online(get_method("tda"), fg(detect=True))
    assert not steps_online(get_method("dmn-zs"), fg(rule="periodic", detect=True))
    assert steps_online(get_method("dmn-zs"), fg(rule="timeliness")) and steps_online(get_method("dmn-zs+ms"), fg())
    assert steps_online(get_method("dota"), fg()) and steps_online(get_method("tpt"), fg())  # no replay; no tower
