"""The thread policy (mstta/threads.py): one thread for the step's small ops, the replay's chunks on
a pool of one-thread workers, counts set for the calling thread only."""

from __future__ import annotations

import multiprocessing
import os
import threading

import pytest
import torch
from synthetic import as_tensors, make_stream

from mstta import Engine, replay, threads
from mstta.engine import functional as Fn


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
        assert _in_thread(torch.get_num_threads) == other  # a thread starting meanwhile keeps its own
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


def _record(monkeypatch, name: str) -> list:
    """Wrap functional.`name` to record (thread name, intra-op threads, inference mode) per call."""
    seen = []
    real = getattr(Fn, name)
    monkeypatch.setattr(
        Fn,
        name,
        lambda *a, **k: (
            seen.append((threading.current_thread().name, torch.get_num_threads(), torch.is_inference_mode_enabled()))
            or real(*a, **k)
        ),
    )
    return seen


@pytest.mark.skipif(
    not threads.PER_THREAD or threads.cores() < 2, reason="needs 2 cores and per-thread OpenMP/MKL controls"
)
def test_replay_chunks_run_on_one_thread_workers(monkeypatch):
    f, t, _ = as_tensors(make_stream(n=40, classes=4, dim=8, seed=0))
    shifts, queries = _record(monkeypatch, "shift_by_sims"), _record(monkeypatch, "form_queries")
    before = torch.get_num_threads()
    replay(f, t, "ms-tta", chunk=8)
    assert len(shifts) == 5 and len(queries) == 5  # ceil(39 / 8) shift chunks, ceil(40 / 8) query chunks
    assert {(name.startswith("mstta-chunk"), n, inference) for name, n, inference in shifts + queries} == {
        (True, 1, True)
    }
    assert torch.get_num_threads() == before


def test_map_chunks_keeps_order_and_raises():
    got = threads.map_chunks(lambda x: (x, torch.get_num_threads()), list(range(20)), torch.device("cpu"))
    assert [x for x, _ in got] == list(range(20))
    if threads.PER_THREAD:
        assert {n for _, n in got} == {1}
    with pytest.raises(ZeroDivisionError):
        threads.map_chunks(lambda x: 1 / (x - 3), list(range(6)), torch.device("cpu"))


def test_map_chunks_runs_inline_off_the_cpu_and_inside_a_worker():
    me = threading.current_thread().name
    assert threads.map_chunks(lambda x: threading.current_thread().name, [1, 2], torch.device("cuda")) == [me, me]
    nested = threads.map_chunks(  # a worker that maps again runs its items itself (no wait on a full pool)
        lambda x: threads.map_chunks(lambda y: threading.current_thread().name, [0, 1, 2], torch.device("cpu")),
        [0, 1, 2, 3],
        torch.device("cpu"),
    )
    assert all(len(set(names)) == 1 for names in nested)


def test_chunk_workers_says_how_many_chunks_run_side_by_side(monkeypatch):
    """The pool's workers on the CPU; 1 where `map_chunks` runs its items in turn: off the CPU (a GPU
    queues them on its stream), inside a worker, or without per-thread controls. A replay that splits
    work for the pool splits it into no more pieces than this."""
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert threads.chunk_workers(gpu) == threads.chunk_workers(torch.device("meta")) == 1
    parallel = threads.PER_THREAD and threads.cores() > 1
    assert threads.chunk_workers(cpu) == (threads.workers() if parallel else 1)
    assert threads.map_chunks(lambda x: threads.chunk_workers(cpu), [0, 1], cpu) == [1, 1]  # in a worker, or in turn
    monkeypatch.setattr(threads, "PER_THREAD", False)
    assert threads.chunk_workers(cpu) == 1
    me = threading.current_thread().name
    assert threads.map_chunks(lambda x: threading.current_thread().name, [1, 2], cpu) == [me, me]


def test_ahead_starts_every_item_and_waits_for_each_in_turn():
    """Each item's function gives fn(item) (on the pool's one-thread workers where chunks run side by
    side, else when called, in this thread) and raises its error."""
    cpu = torch.device("cpu")
    got = [wait() for wait in threads.ahead(lambda x: (x, torch.get_num_threads()), list(range(12)), cpu)]
    assert [x for x, _ in got] == list(range(12))
    if threads.PER_THREAD:
        assert {n for _, n in got} == {1}
    waits = threads.ahead(lambda x: 1 / (x - 2), [0, 1, 2, 3], cpu)
    assert waits[0]() == -0.5 and waits[3]() == 1.0
    with pytest.raises(ZeroDivisionError):
        waits[2]()
    me, names = threading.current_thread().name, []
    waits = threads.ahead(lambda x: names.append(x) or threading.current_thread().name, [1, 2], torch.device("cuda"))
    assert names == [] and [w() for w in waits] == [me, me] and names == [1, 2]  # off the CPU: run when called


@pytest.mark.skipif(
    not threads.PER_THREAD or threads.cores() < 2, reason="needs 2 cores and per-thread OpenMP/MKL controls"
)
def test_beside_runs_on_the_side_thread_while_the_caller_goes_on():
    """fn runs on the side thread (one intra-op thread, inference mode) while the caller goes on; the
    returned function waits for its result or raises its error; inline off the CPU and on the side thread."""
    cpu, started, go = torch.device("cpu"), threading.Event(), threading.Event()

    def side():
        started.set()
        assert go.wait(30)  # held until the caller, still running, lets it finish
        return threading.current_thread().name, torch.get_num_threads(), torch.is_inference_mode_enabled()

    later = threads.beside(side, cpu)
    assert started.wait(30)
    go.set()
    name, n, inference = later()
    assert name.startswith("mstta-side") and n == 1 and inference
    with pytest.raises(ZeroDivisionError):
        threads.beside(lambda: 1 / 0, cpu)()
    me = threading.current_thread().name
    assert threads.beside(lambda: threading.current_thread().name, torch.device("cuda"))() == me
    nested = threads.beside(lambda: threads.beside(lambda: threading.current_thread().name, cpu)(), cpu)()
    assert nested.startswith("mstta-side")  # the side thread runs its own `beside` now: no wait on itself


@pytest.mark.skipif(
    not threads.PER_THREAD or threads.cores() < 2, reason="needs 2 cores and per-thread OpenMP/MKL controls"
)
def test_the_replay_scans_for_cuts_beside_its_queries(monkeypatch):
    """Under `forget.detect` the cache family's replay scans the stream for cuts on the side thread while
    the pool makes the queries, and its predictions and cuts equal the online steps'."""
    from mstta import EngineConfig
    from mstta.engine import replay as replay_module
    from mstta.engine.forget import ForgetConfig

    seen = []
    real = replay_module.stream_cuts
    monkeypatch.setattr(
        replay_module, "stream_cuts", lambda *a: seen.append(threading.current_thread().name) or real(*a)
    )
    f, t, _ = as_tensors(make_stream(n=120, classes=4, dim=8, seed=1))
    f = torch.cat([f, -f])  # a scene change
    cfg = EngineConfig(forget=ForgetConfig("timeliness", detect=True, detect_warmup=20))
    got, want = replay(f, t, "tda", cfg, chunk=16), replay(f, t, "tda", cfg, online=True)
    assert len(seen) == 1 and seen[0].startswith("mstta-side")
    assert got.cuts.any() and got.cuts.tolist() == want.cuts.tolist()
    assert got.predictions.tolist() == want.predictions.tolist()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_gets_its_own_pool():
    f, t, _ = as_tensors(make_stream(n=40, classes=4, dim=8, seed=0))
    want = replay(f, t, "ms-tta", chunk=8).predictions  # the parent's pool exists now
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        got = pool.apply_async(_replay_predictions, (f, t)).get(timeout=120)
    assert got.tolist() == want.tolist()


def _replay_predictions(f, t):
    return replay(f, t, "ms-tta", chunk=8).predictions
