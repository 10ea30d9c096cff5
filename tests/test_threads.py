"""The thread policy (mstta/threads.py): one thread for the step's small ops, a measured count for
the replay's large ones, set for the calling thread only."""
from __future__ import annotations

import threading

import pytest
import torch
from synthetic import as_tensors, make_stream

from mstta import Engine, replay, threads
from mstta import functional as Fn


def _in_thread(fn):
    box = {}
    t = threading.Thread(target=lambda: box.update(value=fn()))
    t.start()
    t.join()
    return box["value"]


@pytest.mark.skipif(not threads.PER_THREAD, reason="this torch build has no per-thread OpenMP/MKL controls")
def test_count_is_set_for_the_calling_thread_only():
    before = torch.get_num_threads()
    other = _in_thread(torch.get_num_threads)
    with threads.intra_op_threads(1):
        assert torch.get_num_threads() == 1
        assert _in_thread(torch.get_num_threads) == other      # a thread starting meanwhile keeps its own
    assert torch.get_num_threads() == before


def test_a_step_runs_on_one_thread_and_restores(monkeypatch):
    seen = []
    real = Fn.mean_shift_step
    monkeypatch.setattr(Fn, "mean_shift_step", lambda *a, **k: seen.append(torch.get_num_threads()) or real(*a, **k))
    before = torch.get_num_threads()
    eng = Engine(torch.eye(4)[:3], "ms-tta")
    eng.step(torch.eye(4)[0])
    eng.step(torch.eye(4)[1])
    assert seen == [1] and torch.get_num_threads() == before


@pytest.mark.parametrize("many_s,one_s,want", [(0.5, 1.0, "many"), (0.9, 1.0, 1), (2.0, 1.0, 1)])
def test_large_ops_use_every_core_only_when_the_probe_gains(monkeypatch, many_s, one_s, want):
    monkeypatch.setattr(threads, "cores", lambda: 4)
    monkeypatch.setattr(threads, "_probe", lambda n: one_s if n == 1 else many_s)
    monkeypatch.setattr(threads, "_decision", {"threads": 0, "at": float("-inf")})
    assert threads.large_threads() == (4 if want == "many" else 1)
    monkeypatch.setattr(threads, "_probe", lambda n: pytest.fail("re-probed within PROBE_EVERY_S"))
    assert threads.large_threads() == (4 if want == "many" else 1)   # the decision is kept


def test_replay_runs_its_batches_with_the_decided_count(monkeypatch):
    f, t, _ = as_tensors(make_stream(n=40, classes=4, dim=8, seed=0))
    seen = []
    real = Fn.mean_shift_step
    monkeypatch.setattr(Fn, "mean_shift_step", lambda *a, **k: seen.append(torch.get_num_threads()) or real(*a, **k))
    monkeypatch.setattr(threads, "large_threads", lambda: 1)
    replay(f, t, "ms-tta", chunk=16)
    assert seen and set(seen) == {1}


def test_the_probe_measures_a_real_op():
    assert 0 < threads._probe(1, repeat=1) < 10 and threads.cores() >= 1
