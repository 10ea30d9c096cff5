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
from mstta.bench import streamarms
from mstta.bench.streamrun import ORACLE, Domains, StreamOptions, engine_config, run_streams, streams_of
from mstta.engine.methods import get_method
from mstta.engine.replay import ReplayResult
from mstta.errors import UserError

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
        kinds=["iid", "cut", "return", "chain", "dirichlet-0.1", "separate"],
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


def _opts(methods, **kw) -> StreamOptions:
    base = dict(arms=ARMS[:1], short_arms=ARMS[1:], lead=10, segment=12, window=4, regret_steps=8)
    return StreamOptions(methods=methods, **{**base, **kw})


def test_the_records_are_the_same_whatever_the_jobs(dom):
    """Two worker processes give the records, curves and their order of one process."""
    opts = _opts(
        ["ms-tta", "dmn-zs+ms", "onzeta", "zero"],
        all_arms_for=["ms-tta"],  # its first seed's cut streams read the stale share online
        kinds=["iid", "cut", "return", "chain", "separate"],
        short_kinds=["cut", "return", "iid"],
        seeds=[1, 2],
    )
    one, two = run_streams(dom, opts, jobs=1), run_streams(dom, opts, jobs=2)
    assert len(one["records"]) > 40 and one == two
    with pytest.raises(UserError, match=r"^--jobs 0: expected an integer in \[1, 64\]$"):
        run_streams(dom, opts, jobs=0)


@pytest.mark.parametrize("method, runs", [("dmn-zs+ms", 9), ("ms-tta", 12)])
def test_each_run_is_made_once_and_an_online_one_never_over_a_prefix(dom, monkeypatch, method, runs):
    """Streams a (i.i.d.) x3, a->b and a->c (10 + 12), their returns (+ 12 of a), the chain a->b->c,
    arms never and the oracle. Never: the 3 i.i.d. streams, 2 returns, the chain, and the 2 cuts unless
    they are read from their returns (online rows: DMN-ZS + MS). The oracle: no i.i.d. run (never's),
    each return's b or c scene (2) and a again (the same 12 samples of a in both returns: 1), the
    lead-in a once (vectorised rows; online, it is never's first steps), the chain's and the cuts'
    scenes none (the returns' runs): 9 runs, 12."""
    made: list[tuple[str, str, bytes]] = []
    real = streamarms.Shared.replayed

    def replayed(self, x, m, cfg, labels):
        made.append((m.name, repr(cfg), x.numpy().tobytes())) if m.name == method else None
        return real(self, x, m, cfg, labels)

    monkeypatch.setattr(streamarms.Shared, "replayed", replayed)
    opts = _opts([method], all_arms_for=[], short_arms=[], kinds=["iid", "cut", "return", "chain"], seeds=[1])
    run_streams(dom, opts)
    assert len(made) == len(set(made)) == runs
    prefixes = [a for _, c, a in made for _, d, b in made if c == d and len(a) < len(b) and b.startswith(a)]
    assert (prefixes == []) == (method == "dmn-zs+ms")  # a vectorised run is made again over a prefix
