"""The thread policy of every CPU path of the library, decided here and only here (docs/engine.md).

- Small ops (`small_ops`): the online step of `Engine`/`MultiEngine` (query formation, kNN over
  the bank, cache updates and logits; so also the UI's engines, the efficiency timing and
  `replay --online`) and the replay's detector scan (`forget.stream_cuts`) run on one intra-op
  thread. Measured: a thread hand-off costs more than the work, and under a competing load the
  threads wait on each other (2.6x slower).
- Beside the chunks (`beside`): serial host-driven work that does not depend on them (the replay's
  detector scan beside its queries) runs on one side thread, so the pool's chunks keep the cores
  busy while it runs instead of waiting for it. Chunks that a serial chain will read in turn can be
  started at once (`ahead`: the `idle` replay's weights), so the pool makes them while the chain
  scans.
- Chunks (`map_chunks`): the vectorised replay (and the sweeps, t-SNE and benchmark runs made of
  it) is split into independent row chunks that a pool of `workers()` (cores + 1) takes one at a
  time, each worker on one intra-op thread. No worker ever waits on another inside an op, so a
  worker that a competing process preempts delays only its own chunk, and the others go on
  taking chunks; the one worker more than cores keeps every core busy while a worker is between
  chunks (Python glue, allocation) or preempted. Measured: torch's own threads split every op
  across the cores and meet at a barrier after it, so under a spinning process per core each op
  waits for its slowest, preempted thread (docs/engine.md has the figures).

The count is set for the calling thread only (OpenMP's and MKL's per-thread settings, the ones
`torch.set_num_threads` sets besides its process-wide default), so an encoder running in another
thread keeps its threads and no thread ever starts with a count borrowed from a step. Where those
per-thread controls cannot be found (a torch build without GNU OpenMP or MKL), `torch.set_num_threads`
is used and restored, `PER_THREAD` is False, and chunks run in the calling thread with torch's threads.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import torch

T = TypeVar("T")
R = TypeVar("R")
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


MAX_CORES = 16  # cores the chunk pool uses at most: bounds the chunks in flight (and their memory)


def workers() -> int:
    """Threads of the chunk pool: one more than the cores it uses (measured in docs/engine.md: idle
    within noise of one per core, and under a spinning process per core it keeps its share of
    them), those at most `MAX_CORES`: at most 17 replay chunks in flight, each at most 256 rows x
    the bank's 65,536 columns x 4 B (64 MB), and a 5,000-sample replay has 20 chunks anyway."""
    return min(cores(), MAX_CORES) + 1


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


def chunk_workers(device: torch.device) -> int:
    """How many chunks `map_chunks` runs side by side on `device`: the pool's `workers()` on the CPU,
    else 1 (in the calling thread, in turn: on other devices, on one core, without per-thread
    controls, or when called from a worker). Split work into more pieces than this and each piece
    only adds its ops (on a GPU, its launches and host reads)."""
    if device.type != "cpu" or cores() == 1 or not PER_THREAD or getattr(_local, "worker", False):
        return 1
    return workers()


def map_chunks(fn: Callable[[T], R], items: Sequence[T], device: torch.device) -> list[R]:
    """[fn(item) for item in items], in order. On the CPU, spread over the pool's workers (each on
    one intra-op thread, in inference mode) in the order given, so pass the largest first; in the
    calling thread, in order, where `chunk_workers` is 1."""
    if len(items) < 2 or chunk_workers(device) == 1:
        return [fn(item) for item in items]
    return list(_executor().map(functools.partial(_run_in_worker, fn), items))


def beside(fn: Callable[[], R], device: torch.device) -> Callable[[], R]:
    """Start fn() on the side thread (one intra-op thread, in inference mode) while the caller goes on,
    where `map_chunks` spreads work over several cores (`chunk_workers`): serial host-driven work that
    would otherwise wait for the pool or hold it up -> a function that waits for fn's result (and
    raises its error). Elsewhere, and when called from the side thread itself, fn runs now."""
    if chunk_workers(device) == 1 or getattr(_local, "side", False):
        result = fn()
        return lambda: result
    return _executor(side=True).submit(_run_in_worker, lambda _: fn(), None).result


def ahead(fn: Callable[[T], R], items: Sequence[T], device: torch.device) -> list[Callable[[], R]]:
    """Start fn(item) for every item on the pool's workers (in the order given) while the caller goes
    on -> per item a function that waits for its result. Where `map_chunks` runs items in turn, each
    runs when its function is called."""
    if chunk_workers(device) == 1:
        return [functools.partial(fn, item) for item in items]
    pool = _executor()
    return [pool.submit(_run_in_worker, fn, item).result for item in items]


def _run_in_worker(fn, item):
    with torch.inference_mode(), intra_op_threads(1):
        return fn(item)


def _mark_worker() -> None:
    _local.worker = True


def _mark_side() -> None:
    _local.side = True


def _executor(side: bool = False) -> ThreadPoolExecutor:
    """The process's chunk pool (`workers()` threads) or, `side`, its side thread (`beside`), each made
    on first use and again after a fork."""
    global _pool, _side
    with _lock:
        if side:
            if _side is None:
                _side = ThreadPoolExecutor(1, thread_name_prefix="mstta-side", initializer=_mark_side)
            return _side
        if _pool is None:
            _pool = ThreadPoolExecutor(workers(), thread_name_prefix="mstta-chunk", initializer=_mark_worker)
        return _pool


def _forget_pool() -> None:  # a forked child has none of the parent's threads (nor their lock holds)
    global _pool, _side, _lock
    _pool, _side, _lock = None, None, threading.Lock()


_pool: ThreadPoolExecutor | None = None
_side: ThreadPoolExecutor | None = None
_local = threading.local()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)
