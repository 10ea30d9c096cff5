"""On a CPU the eager step reads what it needs of the state (`Streams.host_reads`: nothing to
transfer): the detector's phase and cuts (`drift.drift_step_host`), so every reset is known on the
host and the bank refills from its first row without a mask; when a slot can next expire (idle
rule); which slot is used; one stream's insertions (`Cache.insert_one`). Each is the device path's
result bit for bit (the device path is the one a GPU runs, `host_reads` off; tests/test_forget.py
holds both to the float64 reference), but one stream's detector (`drift.drift_step_one`, on numpy:
its warm-up `_learn_one`, past it the whitened `watch_one`): its state to float64 rounding, its
count and cuts the same."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_forget import cut_stream

from mstta import Engine, EngineConfig
from mstta.engine.cache import Cache
from mstta.engine.cache_runner import Streams
from mstta.engine.drift import Drift, drift_step_host, drift_step_t
from mstta.engine.forget import ForgetConfig
from mstta.engine.multi import MultiEngine

FAST = dict(detect_warmup=30, detect_ridge=0.1)  # a 30-sample reference in 12 dims
SETTINGS = {
    "detect": dict(detect=True, **FAST),
    "periodic-detect": dict(rule="periodic", every=70, detect=True, **FAST),
    "idle": dict(rule="idle", idle=9),
    "idle-detect": dict(rule="idle", idle=15, detect=True, **FAST),
    "periodic": dict(rule="periodic", every=33),
    "timeliness": dict(rule="timeliness", horizon=20),
    "timeliness-detect": dict(rule="timeliness", horizon=20, detect=True, **FAST),
}


def _engine(t, method, fg, device_path, **over):
    e = Engine(t, method, EngineConfig(forget=ForgetConfig(**fg), **over))
    if device_path:
        e.runner.host_reads = e.runner.host_resets = False
    return e


def _state_equal(a: dict, b: dict, skip=("bank.start",)) -> bool:
    return all(
        np.array_equal(a[k], b[k]) if not torch.is_tensor(a[k]) else torch.equal(a[k], b[k]) for k in a if k not in skip
    )


@pytest.mark.parametrize("method", ["tda", "ms-tta", "tda+ms", "boostadapter+ms"])
@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("bank_size", [None, 25])
def test_the_host_reads_equal_the_device_path(method, setting, bank_size):
    """Logits, cuts and the caches equal at every step; three scene cuts, the detector's phases all met."""
    f, t = cut_stream(n=260, cuts=(70, 150, 210))
    host, dev = (_engine(t, method, SETTINGS[setting], d, bank_size=bank_size) for d in (False, True))
    assert host.runner.host_reads and not dev.runner.host_reads
    cuts = []
    for x in f:
        a, b = host.step(x), dev.step(x)
        assert torch.equal(a.logits, b.logits) and a.cut == b.cut
        cuts.append(a.cut)
    for rec in ("pos", "neg"):
        a, b = getattr(host.runner, rec), getattr(dev.runner, rec)
        if a is not None:
            for k in ("ent", "time", "bias"):
                assert torch.equal(getattr(a, k), getattr(b, k)), (rec, k)
            if a.used is not None:  # an empty slot's last mark is read by nothing (`Cache._mark_used`)
                assert torch.equal(torch.where(a.time >= 0, a.used, -1), torch.where(b.time >= 0, b.used, -1))
    assert any(cuts) == (setting not in ("idle", "timeliness"))


def test_the_bank_refills_from_its_first_row_after_a_known_reset():
    """A host-known reset: the fill restarts (`bank_len`), the next feature takes row 0, and the kNN
    searches only the rows since the reset (unmasked)."""
    f, t = cut_stream(n=120)
    e = _engine(t, "ms-tta", dict(rule="periodic", every=50), False, bank_size=30)
    for x in f[:50]:
        e.step(x)
    assert e.bank_len == 30
    e.step(f[50])  # reset before sample 50
    assert e.bank_len == 1 and int(e.runner.bank.time[0, 0]) == 50 and int(e.runner.bank.start[0]) == 50
    assert e.runner._rows(None) == (1, False)


@pytest.mark.parametrize("setting", ["idle-detect", "periodic-detect"])
def test_a_resumed_stream_equals_an_uninterrupted_one(setting):
    """state_dict() mid-stream (mid warm-up and past it), loaded into a fresh engine: the same steps
    after, the idle rule's next expiry recomputed from the loaded clock."""
    f, t = cut_stream(n=260, cuts=(70, 150, 210))
    whole = _engine(t, "tda+ms", SETTINGS[setting], False, bank_size=25)
    want = [whole.step(x) for x in f]
    for at in (20, 120, 200):
        first = _engine(t, "tda+ms", SETTINGS[setting], False, bank_size=25)
        for x in f[:at]:
            first.step(x)
        second = _engine(t, "tda+ms", SETTINGS[setting], False, bank_size=25)
        second.load_state_dict(first.state_dict())
        got = [second.step(x) for x in f[at:]]
        assert all(torch.equal(a.logits, b.logits) and a.cut == b.cut for a, b in zip(got, want[at:]))


def test_multi_engine_with_skipped_streams_equals_separate_engines():
    """S = 3 streams in different phases of the detector (the branchless step where they differ or
    one skips), each equal to its own engine."""
    f, t = cut_stream(n=240, cuts=(60, 150))
    fg = SETTINGS["idle-detect"]
    multi = MultiEngine(t, "tda+ms", EngineConfig(forget=ForgetConfig(**fg), bank_size=25), streams=3)
    single = [_engine(t, "tda+ms", fg, False, bank_size=25) for _ in range(3)]
    rng = np.random.default_rng(0)
    pos = [0, 0, 0]
    for _ in range(200):
        active = rng.random(3) < 0.8
        active[rng.integers(3)] = True
        x = torch.stack([f[min(p, len(f) - 1)] for p in pos])
        r = multi.step(x, active=active)
        for s in range(3):
            if active[s]:
                want = single[s].step(x[s])
                assert int(r.logits[s].argmax()) == want.prediction and bool(r.cuts[s]) == want.cut
                torch.testing.assert_close(r.logits[s], want.logits, rtol=1e-5, atol=1e-5)
                pos[s] += 1
    assert all(p > 150 for p in pos)


@pytest.mark.parametrize("streams", [1, 3])
def test_drift_step_host_equals_the_branchless_step(streams):
    """The detector's host step (watch, learn, or branchless where the streams' phases differ) leaves
    the state and the cuts of `drift_step_t` bit for bit, skipped streams included; one stream's
    (`drift_step_one`: numpy, the watch whitened) its count and cuts, the rest to float64 rounding."""
    f, _ = cut_stream(n=400, cuts=(120, 260), dim=20)
    fg = ForgetConfig(detect=True, detect_warmup=40, detect_ridge=0.1)
    a, b = Drift.empty(streams, 20, "cpu", fg), Drift.empty(streams, 20, "cpu", fg)
    rng = np.random.default_rng(1)
    cuts = 0
    for t in range(len(f) - 2 * (streams - 1)):
        x = torch.stack([f[t + 2 * s] for s in range(streams)])
        ok = None if streams == 1 or t % 7 else torch.as_tensor(rng.random(streams) < 0.7)
        want = drift_step_t(a, x, fg, ok).numpy()
        got = drift_step_host(b, x, fg, ok)
        assert np.array_equal(want, got)
        cuts += int(want.sum())
        for k in ("n",) if streams == 1 else ("n", "me", "inv", "acc", "scale"):
            assert torch.equal(getattr(a, k), getattr(b, k)), (t, k)
        for k in ("me", "inv", "acc", "scale"):
            torch.testing.assert_close(getattr(a, k), getattr(b, k), rtol=1e-12, atol=1e-12)
    assert cuts >= 2


@pytest.mark.parametrize("streams", [1, 3])
@pytest.mark.parametrize("weights", ["underflow", "none live", "positive"])
def test_the_mark_of_the_host_equals_the_devices(weights, streams):
    """The idle rule's use on the host (the first largest weight, when it is positive) and on the
    device (the live slot of largest weight): the same slot. Every live weight 0 (float32 underflow),
    slot 0 empty: the first live slot, not slot 0; no live slot: the host marks none, the device its
    first slot (an empty slot's mark is never read). One stream (scalar reads) and three (the last
    skipping the step: no mark)."""
    S, C, Q, d = streams, 3, 2, 4
    ok = None if S == 1 else np.array([True, True, False])
    marks = []
    for host in (True, False):
        cache = Cache.empty(S, C, Q, d, "cpu", values=False, used=True)
        cache.bias[:, 3:] = -1.0  # slots 3, 4, 5 live (ln a - beta), 0, 1, 2 empty
        w = torch.zeros(S, C * Q)
        if weights == "positive":
            w[:, 3:] = torch.tensor([0.2, 0.7, 0.7])
        if weights == "none live":
            cache.bias.fill_(float("-inf"))
        clock = np.full(S, 7) if host else torch.full((S,), 7)
        cache._mark_used(w, clock, ok if host or ok is None else torch.as_tensor(ok), host)
        marks.append([torch.nonzero(u == 7).flatten().tolist() for u in cache.used.view(S, -1)])
    assert marks[0] == marks[1] or weights == "none live"
    want = {"underflow": [3], "positive": [4], "none live": []}[weights]  # none live: no mark
    assert marks[0] == [want] * (S - (ok is not None)) + [[]] * (ok is not None)


@pytest.mark.parametrize("method", ["ms-tta", "tda"])
def test_no_expiry_runs_before_a_slot_can_expire(method, monkeypatch):
    """`idle` 200 over 120 steps: the bound read at the first step (no slot before step 200) holds,
    so the expiry runs once; a resumed engine reads it again once."""
    calls = []
    real = Streams._expire
    monkeypatch.setattr(Streams, "_expire", lambda self, *a: calls.append(1) or real(self, *a))
    f, t = cut_stream(n=120)
    e = _engine(t, method, dict(rule="idle", idle=200), False)
    for x in f[:60]:
        e.step(x)
    again = _engine(t, method, dict(rule="idle", idle=200), False)
    again.load_state_dict(e.state_dict())
    for x in f[60:]:
        again.step(x)
    caches = 1 if method == "ms-tta" else 2
    assert len(calls) == 2 * caches


def test_a_host_view_follows_its_tensor_through_replacement_and_deep_copy():
    """`host_view`: one numpy view per tensor, writing into it; a replaced tensor or a deep copy of
    the record (a family runner's state dict copies its `Drift`) gets a view of its own tensor."""
    import copy

    from mstta.engine.host import host_view

    d = Drift.empty(1, 8, "cpu", ForgetConfig(detect=True))
    assert host_view(d, "n") is host_view(d, "n")
    host_view(d, "n")[0] = 3
    twin = copy.deepcopy(d)
    host_view(twin, "n")[0] = 5
    assert (int(d.n[0]), int(twin.n[0])) == (3, 5)
    d.n = torch.zeros(1, dtype=torch.long)
    host_view(d, "n")[0] = 7
    assert int(d.n[0]) == 7


def test_the_watch_is_built_again_when_its_record_is_restored_in_place():
    """One CPU stream past its warm-up (`watch_one`): a state restored into the same engine (its
    tensors copied in place) is watched from the restored EMA, not from the watch's own, so the
    second pass over the same samples repeats the first one's CUSUM and cuts."""
    f, t = cut_stream(n=300, cuts=(200,))
    e = _engine(t, "ms-tta", SETTINGS["detect"], False)
    for x in f[:120]:
        e.step(x)
    assert int(e.runner.drift.n[0]) > 30  # watching
    saved = e.state_dict()
    first = []
    for x in f[120:]:
        first.append((e.step(x).cut, float(e.runner.drift.acc[0])))
    e.load_state_dict(saved)  # the same shapes: copied into the existing tensors
    again = [(e.step(x).cut, float(e.runner.drift.acc[0])) for x in f[120:]]
    assert [c for c, _ in again] == [c for c, _ in first] and any(c for c, _ in first)
    np.testing.assert_allclose([a for _, a in again], [a for _, a in first], rtol=1e-9, atol=1e-12)  # rebuilt: rounding


def test_a_watch_without_a_factor_runs_the_tensor_path(monkeypatch):
    """Where scale inv has no Cholesky factor (`Watch.of` is None), the one-stream watch runs the
    tensor ops (`_watch_t`) at every sample past the warm-up: the branchless step's cuts, its state
    to float64 rounding (the warm-up is `_learn_one`'s)."""
    from mstta.engine import drift

    monkeypatch.setattr(drift.Watch, "of", classmethod(lambda cls, d, dim: None))
    tensor_steps = []
    real = drift._watch_t
    monkeypatch.setattr(drift, "_watch_t", lambda *a: tensor_steps.append(1) or real(*a))
    f, _ = cut_stream(n=400, cuts=(120, 260), dim=20)
    fg = ForgetConfig(detect=True, detect_warmup=40, detect_ridge=0.1)
    a, b = Drift.empty(1, 20, "cpu", fg), Drift.empty(1, 20, "cpu", fg)
    cuts = watching = 0
    for x in f:
        watching += int(a.n[0]) >= fg.detect_warmup
        want = drift_step_t(a, x[:1], fg).numpy()
        assert np.array_equal(want, drift_step_host(b, x[:1], fg))
        cuts += int(want.sum())
        for k in ("n", "me", "inv", "acc", "scale"):  # the CUSUM's terms cancel: rounding grows there
            torch.testing.assert_close(getattr(a, k), getattr(b, k), rtol=1e-9, atol=1e-9)
    assert cuts >= 1 and len(tensor_steps) == watching > 200


@pytest.mark.parametrize("idle", [25, 200])
@pytest.mark.parametrize("method", ["ms-tta", "tda"])
def test_one_streams_expiry_by_its_heap_empties_what_a_full_scan_would(method, idle):
    """`Cache.expire_one`: 60 classes (180 positive slots), `idle` 25 (slots used, replaced and
    expiring every few steps: the heap's items re-pushed and dropped) and 200, two scene cuts, a
    state restored mid-way and a stream reset in place (its clock rewound): the caches, logits and
    uses equal the device path's at every step, and the heap stays within the live slots and the
    entries of the last `idle` steps."""
    f, t = cut_stream(n=520, cuts=(150, 300), classes=60, dim=96)
    fg = dict(rule="idle", idle=idle, detect=True, **FAST)
    most = 0
    host, dev = (MultiEngine(t, method, EngineConfig(forget=ForgetConfig(**fg)), streams=1) for _ in range(2))
    dev.runner.host_reads = dev.runner.host_resets = False
    saved = None
    for i, x in enumerate(f):
        if i == 200:
            saved = (host.state_dict(), dev.state_dict())
        if i == 280:
            host.load_state_dict(saved[0])
            dev.load_state_dict(saved[1])
        if i == 400:
            host.reset(0)
            dev.reset(0)
        a, b = host.step(x.unsqueeze(0)), dev.step(x.unsqueeze(0))
        assert torch.equal(a.logits, b.logits) and bool(a.cuts[0]) == bool(b.cuts[0]), i
        for rec in ("pos", "neg"):
            p, q = getattr(host.runner, rec), getattr(dev.runner, rec)
            if p is not None:
                assert torch.equal(p.time, q.time) and torch.equal(p.ent, q.ent), (i, rec)
                assert torch.equal(torch.where(p.time >= 0, p.used, -1), torch.where(q.time >= 0, q.used, -1))
                heap = p.__dict__.get("_due")
                assert heap is None or len(heap) <= int((p.time >= 0).sum()) + idle + 1, (i, rec)
        most = max(most, int((host.runner.pos.time >= 0).sum()))
    assert most > (64 if idle == 200 else 20)


@pytest.mark.parametrize("rule", ["entropy", "fifo", "timeliness"])
def test_one_streams_insert_on_the_host_equals_the_device_insert(rule):
    """`Cache.insert_one` (one CPU stream: the replay scan's host rules on the class row, numpy
    writes) against `Cache.insert` (tensor ops): 600 samples into 4 classes of 3 slots with values,
    entropies drawn from 5 levels so that full rows tie and newcomers tie the worst entry, clocks
    jumping so that the timeliness score orders old and new: every slot, key, bias and value equal
    after each sample, and both rules insert and refuse."""
    C, Q, d = 4, 3, 6
    host, dev = (Cache.empty(1, C, Q, d, "cpu", values=True) for _ in range(2))
    rng = np.random.default_rng(3)
    tl = (40, 0.8) if rule == "timeliness" else None
    clock, refused = 0, 0
    for _ in range(600):
        clock += int(rng.integers(1, 30))
        p, h = int(rng.integers(C)), float(rng.choice([0.1, 0.4, 0.4, 0.9, 1.3]))
        key, value = torch.randn(1, d), torch.rand(1, C)
        before = dev.ent.clone()
        dev.insert(
            torch.tensor([p]),
            torch.tensor([h]),
            key,
            torch.tensor([clock]),
            -0.7,
            rule == "fifo",
            value=value,
            timeliness=tl,
        )
        host.insert_one(
            p, float(torch.tensor(h)), key.numpy()[0], clock, -0.7, rule == "fifo", lambda v=value: v.numpy()[0], tl
        )
        refused += torch.equal(before, dev.ent)
        for k in ("ent", "time", "keys", "bias", "values"):
            assert torch.equal(getattr(host, k), getattr(dev, k)), k
    assert 0 < refused < 600 or rule == "fifo"


def test_the_expiry_heap_drops_replaced_entries_and_matches_the_device_expiry():
    """`Cache.expire_one` on a cache of 2 classes x 2 slots whose entries are replaced at most steps
    (random entropies) and used at random: each step's expiry equals the device's `Cache.expire`,
    and the heap holds at most the live slots and the entries of the last `idle` steps (a replaced
    entry's item is dropped, not pushed again)."""
    idle, rng = 12, np.random.default_rng(5)
    host, dev = (Cache.empty(1, 2, 2, 3, "cpu", values=False, used=True) for _ in range(2))
    host.expire_one(0, idle)  # the heap, from an empty cache
    for t in range(3000):
        host.expire_one(t, idle)
        dev.expire(t, idle)
        p, h, key = int(rng.integers(2)), float(rng.random()), rng.standard_normal(3).astype(np.float32)
        host.insert_one(p, float(np.float32(h)), key, t, -0.5)
        dev.insert(torch.tensor([p]), torch.tensor([h]), torch.from_numpy(key)[None], torch.tensor([t]), -0.5)
        if rng.random() < 0.5:
            c, j = int(rng.integers(2)), int(rng.integers(2))
            for cache in (host, dev):
                if int(cache.time[0, c, j]) >= 0:
                    cache.used[0, c, j] = t
        for k in ("ent", "time", "keys", "bias"):
            assert torch.equal(getattr(host, k), getattr(dev, k)), (t, k)
        assert len(host.__dict__["_due"]) <= int((host.time >= 0).sum()) + idle + 1, t
