"""Where a replay's time goes under each forget setting (issue 29: at most 10% over `none`, on a GPU
too); prints one JSON object.

    PYTHONPATH=. python benchmarks/replay_profile.py --device cuda           # ms-tta and tda, n = 1000
    PYTHONPATH=. python benchmarks/replay_profile.py --settings none,idle --n 5000 --top 8

On `benchmarks/engine.py`'s stream (--n samples, C = --classes, d = --dim), for each method and
forget setting (those of `benchmarks/engine.py`'s forget part, or --settings):
- `replay()`'s wall time: the best of --rounds, the settings taking turns after one warm-up each,
  and its ratio to `none`'s;
- the host's wall time in each phase of the replay (`PHASES`: the queries, the mean shift, the slot
  rule's scan, the detector's scan, the caches' logits, and the `idle` chain's host scans, its
  columns and its weights, the last including the wait for them), summed over a replay's calls,
  the median of --rounds replays; on a CPU the pool's chunks overlap, so a phase's sum may exceed
  the wall time. On a GPU a replay of a few thousand samples is short, so what the host does
  between launches is what a setting adds;
- one replay under `torch.profiler` (CPU, and CUDA on a GPU), its chunks in this thread as on a GPU
  (`threads.map_chunks`; the profiler cannot part the pool's threads' ops): the --top ops by self
  CPU time and, on a GPU, by self device time, with their calls.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib
import json
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path
from unittest import mock

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine import FORGET_SETTINGS, _sync, stream

from mstta import EngineConfig, get_method, list_methods, replay, threads
from mstta.engine import idle_replay
from mstta.engine.families.base import CACHE

replay_mod = importlib.import_module("mstta.engine.replay")  # the module (`mstta.replay` is the function)

# (owner, attribute, phase): the replay's steps whose host time is summed per phase
PHASES = (
    (replay_mod, "_queries", "queries"),
    (replay_mod, "_shift_all", "mean shift"),
    (replay_mod, "_intervals", "slot rule scan"),
    (replay_mod, "stream_cuts", "detector scan"),
    (replay_mod._Entries, "logits", "cache logits"),
    (idle_replay.IdleCache, "_read", "cache logits"),
    (idle_replay.IdleCache, "scan", "idle host scan"),
    (idle_replay.IdleCache, "columns", "idle columns"),
    (idle_replay, "_weighed", "idle weights"),
)


def timed_replay(feats, text, method: str, cfg: EngineConfig, device: torch.device) -> float:
    """Wall seconds of one replay, the device's work included."""
    _sync(device)
    t0 = time.perf_counter()
    replay(feats, text, method, cfg, device=device)
    _sync(device)
    return time.perf_counter() - t0


@contextlib.contextmanager
def phase_times():
    """Host wall seconds spent in each of `PHASES` while entered (a dict by phase; a phase inside
    another counts in both)."""
    seen: dict = {}
    lock = threading.Lock()  # the CPU's pool runs chunks in its threads

    def timing(fn, phase):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                with lock:
                    seen[phase] = seen.get(phase, 0.0) + time.perf_counter() - t0

        return run

    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in PHASES]
    try:
        for (owner, name, phase), (_, _, fn) in zip(PHASES, saved):
            setattr(owner, name, timing(fn, phase))
        yield seen
    finally:
        for owner, name, fn in saved:
            setattr(owner, name, fn)


def top_ops(prof, key: str, k: int) -> list:
    """The k ops of largest total `key` (self CPU or self device microseconds) as [name, µs, calls]."""
    rows = sorted(prof.key_averages(), key=lambda e: getattr(e, key), reverse=True)
    return [[e.key, round(getattr(e, key), 1), e.count] for e in rows[:k] if getattr(e, key) > 0]


def profile_method(feats, text, method: str, cfg: EngineConfig, device, names: list[str], rounds: int, top: int):
    """Each setting's best wall time and ratio to `none`, its phases and its top ops (module doc)."""
    cfgs = {name: dataclasses.replace(cfg, forget=FORGET_SETTINGS[name]) for name in names}
    for c in cfgs.values():  # warm-up: the pool, the allocator, the scan's constants, CUDA's kernels
        timed_replay(feats, text, method, c, device)
    best = dict.fromkeys(cfgs, float("inf"))
    for _ in range(rounds):
        for name, c in cfgs.items():
            best[name] = min(best[name], timed_replay(feats, text, method, c, device))
    out = {}
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    for name, c in cfgs.items():
        runs = []
        for _ in range(rounds):
            with phase_times() as phases:
                timed_replay(feats, text, method, c, device)
            runs.append(phases)
        with mock.patch.object(threads, "PER_THREAD", False), profile(activities=activities) as prof:
            timed_replay(feats, text, method, c, device)
        row = {"wall_ms": round(best[name] * 1e3, 3)}
        if "none" in best:
            row["wall_vs_none"] = round(best[name] / best["none"], 3)
        row["host_phases_ms"] = {p: round(statistics.median(r.get(p, 0.0) for r in runs) * 1e3, 3) for p in runs[0]}
        row["top_self_cpu_us"] = top_ops(prof, "self_cpu_time_total", top)
        if device.type == "cuda":
            row["top_self_device_us"] = top_ops(prof, "self_device_time_total", top)
        out[name] = row
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default="ms-tta,tda", help="comma-separated cache-family methods (default ms-tta,tda)")
    ap.add_argument(
        "--settings",
        default=",".join(FORGET_SETTINGS),
        help=f"comma-separated forget settings of {','.join(FORGET_SETTINGS)} (default all)",
    )
    ap.add_argument("--n", type=int, default=1000, help="samples of the stream (default 1000)")
    ap.add_argument("--classes", type=int, default=1000, help="classes C (default 1000)")
    ap.add_argument("--dim", type=int, default=512, help="feature dims d (default 512)")
    ap.add_argument("--rounds", type=int, default=5, help="timed turns of the settings (default 5)")
    ap.add_argument("--top", type=int, default=12, help="ops listed per setting and kind (default 12)")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    args = ap.parse_args(argv)
    names = [s for s in args.settings.split(",") if s]
    bad = [s for s in names if s not in FORGET_SETTINGS]
    if bad:
        ap.error(f"--settings: unknown setting(s) {', '.join(bad)}; choose from {', '.join(FORGET_SETTINGS)}")
    methods = [m for m in args.methods.split(",") if m]
    cache_rows = [m for m in list_methods() if get_method(m).family == CACHE and not get_method(m).boosting_views]
    wrong = [m for m in methods if m not in cache_rows]
    if wrong or not methods:
        given = ", ".join(wrong) or "none given"
        ap.error(f"--methods: {given}: give cache-family methods replayed in chunks, of {', '.join(cache_rows)}")
    for flag, value in (("--n", args.n), ("--classes", args.classes), ("--dim", args.dim), ("--rounds", args.rounds)):
        if not 1 <= value <= 1_000_000:
            ap.error(f"{flag}: {value} is out of range; use 1..1000000")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: CUDA is not available on this machine; use --device cpu")
    feats, text = stream(args.n, args.classes, args.dim)
    feats, text = feats.to(device), text.to(device)
    cfg = EngineConfig()
    out = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "n": args.n,
        "classes": args.classes,
        "dim": args.dim,
        "rounds": args.rounds,
        "loadavg_1min_at_start": round(os.getloadavg()[0], 2),
    }
    for method in methods:
        out[method] = profile_method(feats, text, method, cfg, device, names, args.rounds, args.top)
    out["loadavg_1min_at_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
