"""The streams benchmark's shortcuts (`mstta.bench.streamarms`) give what a plain replay of each whole
stream gives: resetting arms as pieces between the engine's resets, the oracle as replays of each true
segment, a cut's online arms read from the same seed's return stream, i.i.d. and label-correlated
streams of one domain kept apart."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mstta import replay
from mstta.bench.streamrun import ORACLE, Domains, StreamOptions, engine_config, run_streams, streams_of
from mstta.engine.methods import get_method
from mstta.engine.replay import ReplayResult

ARMS = ["forget.rule=periodic forget.every=17", "forget.detect=true forget.detect_warmup=8 forget.detect_threshold=2"]


@pytest.fixture(scope="module")
def dom():
    """Three domains of one 4-class space in 16 dims, each its own offset; 30 samples each."""
    g = torch.Generator().manual_seed(0)
    protos = F.normalize(torch.randn(4, 16, generator=g), dim=-1)
    text = F.normalize(protos + 0.7 * torch.randn(4, 16, generator=g), dim=-1)
    feats, labels = [], []
    for j in range(3):
        y = torch.arange(30) % 4
        shift = 0 if j == 0 else 1.5 * F.normalize(torch.randn(16, generator=g), dim=0)
        feats.append(F.normalize(2 * protos[y] + shift + torch.randn(30, 16, generator=g), dim=-1))
        labels.append(y.numpy())
    x = torch.cat(feats).unsqueeze(1)
    return Domains(x, np.concatenate(labels), [30, 30, 30], ["a", "b", "c"], text, ["w", "x", "y", "z"])


def _plain(dom, stream, method, arm) -> tuple[np.ndarray, list[int]]:
    """Per-step correctness and detected cuts of one arm by replaying the whole stream online (the
    oracle: each true segment on its own)."""
    x, y = dom.features[torch.as_tensor(stream.order)], dom.labels[stream.order]
    cfg = engine_config(method, arm, {})
    segs = stream.segments() if arm == ORACLE else [(0, len(y))]
    runs: list[ReplayResult] = [replay(x[a:b], dom.text, method, cfg, online=True) for a, b in segs]
    correct = np.concatenate([r.predictions for r in runs]) == y
    cuts = [] if runs[0].cuts is None else np.flatnonzero(runs[0].cuts).tolist()
    return correct, cuts


@pytest.mark.parametrize("method", ["ms-tta", "baseline+boost", "dmn-zs+ms", "onzeta"])
def test_every_record_equals_a_plain_replay_of_its_stream(dom, method):
    opts = StreamOptions(
        methods=[method],
        all_arms_for=[],  # no stale share read online: every cut may come from its return
        short_arms=ARMS,
        kinds=["iid", "cut", "return", "dirichlet-0.1", "separate"],
        correlated_on=["b"],
        seeds=[1],
        lead=10,
        segment=12,
        window=4,
        regret_steps=8,
    )
    recs = [r for r in run_streams(dom, opts)["records"] if r["method"] == method]
    streams = {(s.kind, label): s for label, s in streams_of(dom, opts, 1)}
    assert len(recs) == len(streams) * (2 + len(ARMS)) and get_method(method)
    for r in recs:
        correct, cuts = _plain(dom, streams[(r["kind"], r["stream"])], method, r["arm"])
        want = [100 * correct[a:b].mean() for a, b in streams[(r["kind"], r["stream"])].segments()]
        assert r["segments"] == pytest.approx(want), (r["kind"], r["stream"], r["arm"])
        assert r["detected"] == cuts, (r["kind"], r["stream"], r["arm"])


def test_the_default_rows_are_those_that_run_on_stored_features():
    """TPT and C-TPT tune a prompt through the text tower, which a replay of features lacks."""
    from mstta.bench.streamrun import episodic_methods, stateful_methods

    rows = stateful_methods() + episodic_methods()
    assert "tpt+ms" not in rows and "tpt" not in rows and "c-tpt" not in rows
    assert {"ms-tta", "dpe+ms", "boostadapter+ms", "zero", "mta"} <= set(rows)
