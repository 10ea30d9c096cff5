"""The thread policy of every CPU path of the library, decided here and only here (docs/engine.md).

- Small ops (`small_ops`): the online step of `Engine`/`MultiEngine` (query formation, kNN over
  the bank, cache updates and logits; so also the UI's engines, the efficiency timing and
  `replay --online`) run on one intra-op thread. Measured: a thread hand-off costs more than the
  work, and under a competing load the threads wait on each other (2.6x slower).
- Large ops (`large_ops`): the vectorised replay's batched GEMMs (and the sweeps that run it)
  use every core only while a measured probe shows they gain: a representative batched kNN is
  timed on one thread and on all, all are kept when they take under `GAIN` x the one-thread time,
  and the decision holds for `PROBE_EVERY_S` seconds. On a quiet machine that is all cores; with
  another process spinning on every core, one.

The count is set for the calling thread only (OpenMP's and MKL's per-thread settings, the ones
`torch.set_num_threads` sets besides its process-wide default), so an encoder running in another
thread keeps its threads and no thread ever starts with a count borrowed from a step. Where those
per-thread controls cannot be found (a torch build without GNU OpenMP or MKL), `torch.set_num_threads`
is used and restored, and `PER_THREAD` is False.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import threading
import time
from pathlib import Path

import torch

PROBE_EVERY_S = 2.0   # a large-op decision is re-measured after this many seconds
GAIN = 0.8            # all cores are used when the probe runs in under GAIN x the one-thread time
_decision: dict[str, float] = {"threads": 0, "at": float("-inf")}
_lock = threading.Lock()


def _per_thread_controls():
    """(omp_set_num_threads, omp_get_max_threads, mkl_set_num_threads_local) of the libraries
    torch itself loaded, checked to act on this thread, or None. MKL's setter, statically linked
    into libtorch_cpu, takes its count by reference (all its aliases are one symbol)."""
    libdir = Path(torch.__file__).parent / "lib"
    try:
        omp = next(ctypes.CDLL(str(p)) for p in sorted(libdir.glob("libgomp*.so*")))
        mkl = ctypes.CDLL(str(libdir / "libtorch_cpu.so"))
        omp_set, omp_get, mkl_get = omp.omp_set_num_threads, omp.omp_get_max_threads, mkl.mkl_get_max_threads
        local = mkl.mkl_set_num_threads_local
    except (StopIteration, OSError, AttributeError):
        return None
    mkl_local = lambda n: local(ctypes.byref(ctypes.c_int(n)))  # a one-line adapter
    torch.get_num_threads()
    prev = mkl_local(1)
    works = mkl_get() == 1
    mkl_local(prev)
    if not works:
        torch.set_num_threads(torch.get_num_threads())  # undo whatever the call did
        return None
    return omp_set, omp_get, mkl_local


_CONTROLS = _per_thread_controls() if torch.backends.openmp.is_available() and os.name == "posix" else None
PER_THREAD = _CONTROLS is not None


def cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@contextlib.contextmanager
def intra_op_threads(n: int):
    """Run the block with `n` intra-op threads in this thread; restored afterwards."""
    torch.get_num_threads()  # torch initialises this thread's count first (it would overwrite ours)
    if _CONTROLS is None:
        before = torch.get_num_threads()
        if before != n:
            torch.set_num_threads(n)
        try:
            yield
        finally:
            if before != n:
                torch.set_num_threads(before)
        return
    omp_set, omp_get, mkl_local = _CONTROLS
    before = omp_get()
    omp_set(n)
    mkl_before = mkl_local(n)
    try:
        yield
    finally:
        omp_set(before)
        mkl_local(mkl_before)


def small_ops(device: torch.device):
    """One intra-op thread for the small ops of a step on the CPU; nothing on other devices."""
    return intra_op_threads(1) if device.type == "cpu" else contextlib.nullcontext()


def large_ops(device: torch.device):
    """The measured thread count (`large_threads()`) for batched GEMMs on the CPU."""
    return intra_op_threads(large_threads()) if device.type == "cpu" else contextlib.nullcontext()


def large_threads() -> int:
    """All cores when the probe says they gain now, else one (re-measured every PROBE_EVERY_S)."""
    many = cores()
    if many == 1:
        return 1
    with _lock:
        if time.monotonic() - _decision["at"] > PROBE_EVERY_S:
            _decision["threads"] = many if _probe(many) < GAIN * _probe(1) else 1
            _decision["at"] = time.monotonic()
        return int(_decision["threads"])


@functools.lru_cache(maxsize=1)
def _probe_data(rows: int = 64, bank: int = 2048, dim: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        return torch.randn(rows, dim, generator=g), torch.randn(bank, dim, generator=g)


def _probe(n: int, repeat: int = 2) -> float:
    """Seconds of a batched kNN like the replay's (a [64, 512] x [512, 2048] GEMM and a top-k,
    about 0.13 GFLOP) on `n` threads: the best of `repeat` after one untimed run."""
    from .functional import knn_indices  # late: functional does not import threads
    q, b = _probe_data()
    best = float("inf")
    with torch.inference_mode(), intra_op_threads(n):
        knn_indices(q @ b.T, 2)
        for _ in range(repeat):
            t0 = time.perf_counter()
            knn_indices(q @ b.T, 2)
            best = min(best, time.perf_counter() - t0)
    return best
