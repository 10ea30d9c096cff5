"""The other families' replay under `forget` resets (periodic, detected cuts): a family with a vectorised
`replay` replays each segment between the resets from a fresh state instead of stepping, equal to its
online steps; one whose `init` reads the stream's length (OnZeta: READS_LENGTH, its replay takes `length`) is told
the whole stream's, as the engine's every reset is."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from test_forget import cut_stream

from mstta import EngineConfig, get_method, replay
from mstta.engine.families import get_family
from mstta.engine.forget import ForgetConfig

replay_mod = importlib.import_module("mstta.engine.replay")
RESETS = {
    "periodic": dict(rule="periodic", every=35),
    "detect": dict(detect=True, detect_warmup=30, detect_ridge=0.1),
    "periodic+detect": dict(rule="periodic", every=70, detect=True, detect_warmup=30, detect_ridge=0.1),
}
METHODS = ["dmn-zs", "dota", "onzeta", "bca", "dpe", "zero", "mta"]


def _vectorised(method: str) -> bool:
    family = get_family(get_method(method).family)
    return getattr(family, "replay", None) is not None


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("resets", list(RESETS))
def test_a_family_replays_its_segments_as_its_steps(method, resets, monkeypatch):
    f, t = cut_stream(n=140, cuts=(70,), views=4)
    t = t.double()
    cfg = EngineConfig(view_mode="original", forget=ForgetConfig(**RESETS[resets]))
    online = replay(f, t, method, cfg, online=True, keep_probs=True)
    with monkeypatch.context() as mp:
        if _vectorised(method):  # it may not step: `Engine` refused inside `mstta.engine.replay`
            mp.setattr(replay_mod, "Engine", lambda *a, **k: pytest.fail(f"{method} stepped online"))
        fast = replay(f, t, method, cfg, keep_probs=True)
    assert np.array_equal(fast.cuts, online.cuts) and online.cuts.any()
    assert np.array_equal(fast.predictions, online.predictions)
    np.testing.assert_allclose(fast.probs, online.probs, rtol=1e-6, atol=1e-6)


def test_onzeta_segments_are_told_the_whole_streams_length(monkeypatch):
    """OnZeta's `replay` (READS_LENGTH: it takes `length`) gets the whole stream's N for every segment
    (its `init` reads it: a segment's own length would change its schedule), and equals its steps."""
    family = get_family("onzeta")
    real, seen = family.replay, []

    def recorded(x, text, p, logit_scale, length=None):
        seen.append((x.shape[0], length))
        return real(x, text, p, logit_scale, length)

    f, t = cut_stream(n=140, cuts=(70,))
    t = t.double()
    cfg = EngineConfig(forget=ForgetConfig("periodic", every=50))
    online = replay(f, t, "onzeta", cfg, online=True, keep_probs=True)
    monkeypatch.setattr(family, "replay", recorded)
    monkeypatch.setattr(replay_mod, "Engine", lambda *a, **k: pytest.fail("onzeta stepped online"))
    fast = replay(f, t, "onzeta", cfg, keep_probs=True)
    assert seen == [(50, 140), (50, 140), (40, 140)]
    np.testing.assert_allclose(fast.probs, online.probs, rtol=1e-9, atol=1e-9)
