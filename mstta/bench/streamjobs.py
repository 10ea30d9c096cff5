"""The streams benchmark's runs as independent jobs on `--jobs` worker processes (docs/streams.md,
"Time"). First the resets the engine makes on every stream (`forget.stream_cuts`: once per stream
and setting, shared by every method), then one job per seed and method: every arm of that method on
every stream of that seed, so the runs its arms share (`Shared.piece`: never forgetting and the
oracle, a cut and its return, a resetting arm's first piece) stay in one job. A job runs on one
intra-op thread wherever it runs, and the outcomes are gathered by key, so the records are the same,
in the same order, whatever the number of jobs."""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..engine.config import EngineConfig
from ..engine.methods import get_method
from ..engine.replay import steps_online
from ..threads import cores, intra_op_threads
from .streamarms import Outcome, Shared, cuts_of, reset_setting, without_resets

MAX_JOBS = 64  # worker processes at most; each holds its own copy of what it reads (docs/limits.md)


def default_jobs() -> int:
    """The machine's cores (those this process may run on), at most MAX_JOBS."""
    return min(cores(), MAX_JOBS)


@dataclass
class Work:
    """What every job reads: the shared features and text, the plan (`streamrun.plan`: (seed, label,
    stream, cells) per stream), each (method, arm)'s engine config, and which runs read the stale share."""

    shared: Shared
    todo: list
    configs: dict[tuple[str, str], EngineConfig]
    first_seed: int
    all_arms_for: frozenset[str]


_WORK: Work | None = None  # this process's Work (set before the jobs run, inherited or passed to a worker)


def outcomes(work: Work, jobs: int, progress: bool = False) -> dict[tuple, Outcome]:
    """Every cell's outcome, keyed (seed, kind, label, method, arm): the streams' resets first, then the
    (seed, method) jobs, the costliest first, on `jobs` processes (1: here)."""
    from tqdm.auto import tqdm

    detect = {reset_setting(c): c for c in work.configs.values() if c.forget.detect}
    scans = [(i, list(detect.values())) for i, (_, _, st, _) in enumerate(work.todo) if detect and len(st.order)]
    tasks = [(seed, method) for seed in dict.fromkeys(s for s, *_ in work.todo) for method in _methods(work, seed)]
    tasks.sort(key=lambda t: -_cost(work, *t))
    with _mapper(work, jobs) as run:
        found: dict[tuple, Any] = {}
        for part in run(_scan, scans):
            found.update(part)
        bar = tqdm(total=len(tasks), disable=not progress, unit="job", dynamic_ncols=True)
        out: dict[tuple, Outcome] = {}
        for part in run(_job, [(seed, method, _of_seed(found, seed)) for seed, method in tasks]):
            out.update(part)
            bar.update()
        bar.close()
    return out


def _methods(work: Work, seed: int) -> list[str]:
    return list(dict.fromkeys(m for s, _, _, cells in work.todo if s == seed for m, _ in cells))


def _cost(work: Work, seed: int, method: str) -> int:
    """A job's rough cost: its steps, ten times over where they step online (to start the longest first)."""
    m = get_method(method)
    total = 0
    for s, _, stream, cells in work.todo:
        for name, arm in cells:
            if s == seed and name == method:
                online = steps_online(m, without_resets(work.configs[(name, arm)]))
                total += len(stream.order) * (10 if online else 1)
    return total


def _of_seed(found: dict[tuple, Any], seed: int) -> dict[tuple, Any]:
    return {k: v for k, v in found.items() if k[0][0] == seed}


def _scan(task: tuple[int, list[EngineConfig]]) -> dict[tuple, Any]:
    """One stream's detector resets under each setting -> {((seed, kind, label), setting): steps}."""
    i, configs = task
    seed, label, stream, _ = _WORK.todo[i]
    return {((seed, stream.kind, label), reset_setting(c)): cuts_of(_WORK.shared.features, stream, c) for c in configs}


def _job(task: tuple[int, str, dict]) -> dict[tuple, Outcome]:
    """Every arm of one method on every stream of one seed, the longest streams first (so a shorter run
    can be read from a longer one's first steps); the runs shared between them are dropped afterwards."""
    seed, method, cuts = task
    work = _WORK
    work.shared.memo, work.shared.runs = dict(cuts), {}
    out: dict[tuple, Outcome] = {}
    mine = [(label, st, cells) for s, label, st, cells in work.todo if s == seed]
    for label, stream, cells in sorted(mine, key=lambda e: -len(e[1].order)):
        key = (seed, stream.kind, label)
        for name, arm in cells:
            if name == method:
                stale = stream.kind == "cut" and seed == work.first_seed and method in work.all_arms_for
                cfg = work.configs[(name, arm)]
                out[(*key, name, arm)] = work.shared.run_arm(key, stream, name, arm, cfg, stale)
    work.shared.memo, work.shared.runs = {}, {}
    return out


@contextlib.contextmanager
def _mapper(work: Work, jobs: int) -> Iterator[Callable]:
    """`run(fn, items)` -> an iterator of fn(item) in the order given: here (jobs = 1) or on a pool of
    `jobs` processes (forked where the platform can, so the features are not copied)."""
    global _WORK
    if jobs <= 1:
        _WORK = work
        try:
            yield lambda fn, items: (_one_thread(fn, item) for item in items)
        finally:
            _WORK = None
        return
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with ProcessPoolExecutor(jobs, mp_context=ctx, initializer=_init, initargs=(work,)) as pool:
        try:
            yield lambda fn, items: pool.map(_one_thread, [fn] * len(items), items)
        except BaseException:  # an interrupt or a failed job: the jobs not started are dropped
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def _init(work: Work) -> None:
    global _WORK
    _WORK = work


def _one_thread(fn, item):
    with intra_op_threads(1):
        return fn(item)
