"""Engine speed and memory; prints one JSON object.

    .venv/bin/python benchmarks/engine.py [--classes 1000 --dim 512 --n 5000 --steps 100000]
    .venv/bin/python benchmarks/engine.py --device cuda --parts online,multi,bank_dtype

Parts (choose with --parts):
- online: `Engine.step()` samples/s for `baseline` and `ms-tta` on a generated stream of N samples
  (C classes, d dims, the default bank), idle and under a competing CPU load that the benchmark
  starts itself (one spinning process per core, ended afterwards); on the CPU also with the
  thread policy off (torch's own intra-op threads), to show the choice `mstta.threads` makes.
  On CUDA: eager and with the step captured as a CUDA graph, and the per-step time.
- replay: the vectorised replay's samples/s for both methods (same stream), idle and under the
  same competing load, the ratio of the two, and both with the policy off (the chunks in turn on
  torch's own intra-op threads, all cores).
- multi: stream-steps/s of `MultiEngine` with S = 1, 8, 64 streams (`ms-tta`, --multi-n steps
  per stream, a bank of --multi-bank-size rows per stream: S x 65,536 rows would need S x 134 MB
  twice) against S separate engines stepped in turn, in the same run.
- bank_dtype: prediction agreement of a float16/bfloat16 bank with float32 on the stream
  (`ms-tta`, `tda+ms` replay); on CUDA also the CUDA-graph step time per dtype.
- share (CPU, not in the default parts): the share of the cores a pool of W one-thread workers
  keeps under the competing load, pure GEMM chunks, W = 1 .. cores + 2: why `mstta.threads` gives
  the replay's pool one worker more than cores.
- methods: every method of the registry (or --methods), on its own stream of C classes and d dims
  with 1 view and with --views views: replay samples/s (--methods-n samples), online
  `Engine.step()` samples/s (--methods-steps steps, after 5 warm-up steps) and the state's bytes
  (every state tensor after the run), idle. A slow method (DOTA at C = 1000) is timed on fewer
  online steps (--method-seconds) and replays a prefix of about twice what that budget steps.
  A method whose state cannot fit this machine is reported with its one-line refusal. The
  prompt-tuning rows (tpt, c-tpt) run the live text tower of --tower-model (default the bundled
  mstta-digits) over C = --classes prompts, on features of its dims with --views views (at least
  2), online samples/s and CPU ms per sample, the share of a step spent in the text tower (forward +
  backward + one more forward, timed alone on the step's one thread: CPU time over the step's CPU
  time on a CPU, wall over wall on CUDA), and the replay's samples/s and CPU ms per sample (the
  samples tuned in chunks, `tpt.replay_stream`). ViT-B/16 at C = 1000 on a GPU:
  `benchmarks/engine.py --device cuda --parts methods --methods tpt,c-tpt --classes 1000
  --tower-model ViT-B-16 --tower-pretrained none --methods-steps 50`.
- forget: what `EngineConfig.forget` costs (issue 29: at most 10%): `ms-tta` and `tda`, online
  `Engine.step()` samples/s (on CUDA: with the step captured as a CUDA graph) and replay
  samples/s for each rule (none, timeliness, idle, periodic, detect, timeliness + detect) on the
  same stream, idle, over 5 rounds (the best rate of each), and each one's time relative to
  `none`; online, one engine per setting, the engines taking turns every 50 samples of the stream
  (a paired design: the machine's speed drifts between minutes); the replays taking turns. Also
  the median over the rounds of each one's wall time relative to the same round's `none`
  (`*_wall_vs_none`: online the round's pass; replayed the median over the round's 9 turns, each
  setting once a turn in a shuffled order, of the turn's ratio), and on the CPU the CPU
  time per sample (the least of the rounds) and the median over the rounds of its ratio to the same
  round's `none` (`*_cpu_time_vs_none`; replayed, each round's median of its turns' ratios).
- graph_ops (any device, quick, not in the default parts): the ops of the step a CUDA graph
  captures (`graphs.step_ops`: every op but a view, about one kernel each on a GPU, where a
  graph's step of tiny kernels costs about its kernel count), `ms-tta` and `tda`, per forget
  setting, after --graph-ops-warm samples of the stream; each count also relative to `none`'s
  (`*_vs_none`). Counted as under a graph: no host read, RDumb's host-known resets outside the step;
  the detector and the timeliness rule as this device runs them (`mstta.engine.fused`: Triton
  kernels on CUDA), and on a CPU also as a GPU does, the kernels through Triton's interpreter.
- replay_ops (any device, quick, not in the default parts): the replay's ops and host reads per
  forget setting, `ms-tta` and `tda` over the stream, run as on a GPU (the chunks in this thread,
  as `threads.map_chunks` runs them off the CPU; the detector's scan in a GPU's windows,
  `drift_scan.first_rows`; the `idle` chain's top weights by `topk`, `idle_replay.top_by_topk`):
  every op but a view (`graphs.OpCount`, about one kernel each on a GPU, where a replay of a few
  thousand samples costs about its launches and its waits) and every call that reads a tensor on
  the host (`HOST_READS`: each a wait for the device on a GPU where the tensor lives there; counted
  on a CPU, an upper bound), each also relative to `none`'s, with the ops each setting adds by name.
- memory: peak RSS of a fresh process streaming --steps samples through `ms-tta` with the default
  bounded bank (65,536), and the step time over the first and last 2,000 steps (flat = bounded).
Rates are the best of 3 runs (the machine may be shared); the 1-minute load average at start and
end is printed with them.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from unittest import mock

import torch

import mstta.engine.cache_runner as streams_mod
from mstta import Engine, EngineConfig, replay, threads
from mstta.engine import drift_scan, fused, graphs, idle_replay
from mstta.engine.config import DEFAULT_BANK_SIZE
from mstta.engine.forget import ForgetConfig
from mstta.engine.methods import needs_text_tower
from mstta.engine.multi import MultiEngine

replay_mod = importlib.import_module("mstta.engine.replay")  # the module (`mstta.replay` is the function)

PARTS = ("online", "replay", "multi", "bank_dtype", "memory", "share", "methods", "forget", "graph_ops", "replay_ops")
DEFAULT_PARTS = ("online", "replay", "multi", "bank_dtype", "memory")


def stream(n: int, classes: int, dim: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A clustered stream: features near their class's text embedding (a CLIP-like geometry)."""
    g = torch.Generator().manual_seed(seed)
    text = torch.nn.functional.normalize(torch.randn(classes, dim, generator=g), dim=-1)
    labels = torch.randint(0, classes, (n,), generator=g)
    feats = torch.nn.functional.normalize(text[labels] + 0.08 * torch.randn(n, dim, generator=g), dim=-1)
    return feats, text


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


REPEAT = 3  # each rate is the best of this many runs: the machine may be shared (timeit's rule)


def online_rate(feats, text, method, cfg, device, cuda_graph=None, repeat=REPEAT, cpu_us=None) -> float:
    """Best samples/s of `repeat` runs of `Engine.step()` over `feats`; `cpu_us` (a list) gets each
    run's process CPU microseconds per sample (every thread's)."""
    engine = Engine(text.to(device), method, cfg, cuda_graph=cuda_graph)
    x = feats.to(device)
    fresh = Engine(text.to(device), method, cfg, cuda_graph=False).state_dict()
    for i in range(50):  # warm-up (and CUDA graph capture)
        engine.step(x[i])
    best = 0.0
    for _ in range(repeat):
        engine.load_state_dict(fresh)
        _sync(device)
        t0, c0 = time.perf_counter(), time.process_time()
        for row in x:
            r = engine.step(row)
        _ = r.prediction  # read the last result, as a consumer would
        _sync(device)
        best = max(best, len(x) / (time.perf_counter() - t0))
        if cpu_us is not None:
            cpu_us.append((time.process_time() - c0) * 1e6 / len(x))
    return best


@contextlib.contextmanager
def cpu_load(processes: int):
    """`processes` busy-looping children (a competing load), ended when the block exits."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        time.sleep(0.5)
        yield
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()


@contextlib.contextmanager
def policy_off():
    """The library without its thread policy: torch's own intra-op threads everywhere."""
    saved = streams_mod.small_ops, replay_mod.map_chunks
    streams_mod.small_ops = lambda device: contextlib.nullcontext()
    replay_mod.map_chunks = lambda fn, items, device: [fn(item) for item in items]
    try:
        yield
    finally:
        streams_mod.small_ops, replay_mod.map_chunks = saved


def part_online(feats, text, cfg, device) -> dict:
    out: dict = {}
    load = threads.cores()
    for method in ("baseline", "ms-tta"):
        r = out[method] = {}
        if device.type == "cuda":
            r["eager_samples_per_s"] = round(online_rate(feats, text, method, cfg, device, cuda_graph=False), 1)
            r["cuda_graph_samples_per_s"] = round(online_rate(feats, text, method, cfg, device, cuda_graph=True), 1)
            r["cuda_graph_step_ms"] = round(1000 / r["cuda_graph_samples_per_s"], 4)
            continue
        r["idle_samples_per_s"] = round(online_rate(feats, text, method, cfg, device), 1)
        with policy_off():
            r[f"idle_samples_per_s_{torch.get_num_threads()}_threads"] = round(
                online_rate(feats, text, method, cfg, device), 1
            )
        with cpu_load(load):
            r["loaded_samples_per_s"] = round(online_rate(feats, text, method, cfg, device), 1)
            with policy_off():
                r[f"loaded_samples_per_s_{torch.get_num_threads()}_threads"] = round(
                    online_rate(feats, text, method, cfg, device), 1
                )
    out["competing_load"] = f"{load} busy-looping processes (one per core)"
    return out


def replay_rate(feats, text, method, cfg, device, repeat=REPEAT, cpu_us=None) -> float:
    """Best samples/s of `repeat` replays of `feats`; `cpu_us` as `online_rate`'s."""
    replay(feats[:300], text, method, cfg, device=device)  # warm-up
    best = 0.0
    for _ in range(repeat):
        c0 = time.process_time()
        best = max(best, replay(feats, text, method, cfg, device=device).samples_per_s)
        if cpu_us is not None:
            cpu_us.append((time.process_time() - c0) * 1e6 / len(feats))
    return best


def part_replay(feats, text, cfg, device) -> dict:
    out: dict = {}
    load = threads.cores()
    for method in ("baseline", "ms-tta"):
        r = out[method] = {"replay_samples_per_s": round(replay_rate(feats, text, method, cfg, device), 1)}
        if device.type != "cpu":
            continue
        with policy_off():
            r[f"replay_samples_per_s_{torch.get_num_threads()}_threads"] = round(
                replay_rate(feats, text, method, cfg, device), 1
            )
        with cpu_load(load):
            r["loaded_replay_samples_per_s"] = round(replay_rate(feats, text, method, cfg, device), 1)
            with policy_off():
                r[f"loaded_replay_samples_per_s_{torch.get_num_threads()}_threads"] = round(
                    replay_rate(feats, text, method, cfg, device), 1
                )
        r["loaded_to_idle"] = round(r["loaded_replay_samples_per_s"] / r["replay_samples_per_s"], 3)
    if device.type == "cpu":
        out["competing_load"] = f"{load} busy-looping processes (one per core)"
        out["per_thread_controls"] = threads.PER_THREAD
    return out


FORGET_SETTINGS = {
    "none": ForgetConfig(),
    "timeliness": ForgetConfig("timeliness"),
    "idle": ForgetConfig("idle"),
    "periodic": ForgetConfig("periodic"),
    "detect": ForgetConfig(detect=True),
    "timeliness+detect": ForgetConfig("timeliness", detect=True),
}


FORGET_BLOCK = 50  # samples each setting's engine steps before the next one's turn (`online_turns`)
# The forget replays' turns a round, each setting once a turn in a shuffled order: a replay of 2,000
# samples takes about 0.1 s, and its wall time moves by a tenth between turns on a shared machine.
REPLAY_TURNS = 9


def online_turns(feats, text, method, cfgs: dict, device, cuda_graph=None, block: int = FORGET_BLOCK) -> dict:
    """One engine per config stepping the same stream, the engines taking turns every `block`
    samples (a paired design: the machine's speed, which drifts between minutes, is the same for
    every config within a turn) -> {name: (wall seconds, process CPU seconds)} over the stream."""
    x = feats.to(device)
    engines = {name: Engine(text.to(device), method, c, cuda_graph=cuda_graph) for name, c in cfgs.items()}
    fresh = {name: Engine(text.to(device), method, c, cuda_graph=False).state_dict() for name, c in cfgs.items()}
    for name, e in engines.items():
        for i in range(50):  # warm-up (and CUDA graph capture)
            e.step(x[i])
        e.load_state_dict(fresh[name])
    spent = {name: [0.0, 0.0] for name in cfgs}
    for p in range(0, len(x), block):
        for name, e in engines.items():
            _sync(device)
            t0, c0 = time.perf_counter(), time.process_time()
            for row in x[p : p + block]:
                r = e.step(row)
            _ = r.prediction  # read the last result, as a consumer would
            _sync(device)
            spent[name][0] += time.perf_counter() - t0
            spent[name][1] += time.process_time() - c0
    return {name: tuple(v) for name, v in spent.items()}


def part_forget(feats, text, cfg, device, rounds: int = 5) -> dict:
    """Online and replay samples/s of each forget setting, and its cost against `none`, over
    `rounds` rounds. Online, the settings' engines take turns every FORGET_BLOCK samples of one pass
    (`online_turns`); the replays take REPLAY_TURNS turns a round, each setting once a turn in a
    shuffled order, and a round's replay wall time against `none` is the median over its turns of the
    turn's ratio (paired). On the CPU also the process's CPU
    time per sample (every thread's): its least over the rounds, and the median over the rounds of
    its ratio to the same round's `none` (`*_cpu_time_vs_none`: this machine's speed moves by a
    fifth between minutes, so a ratio of two minima can compare two speeds; replayed, the round's
    median of its turns' ratios, as the wall time)."""
    out: dict = {}
    graph = True if device.type == "cuda" else None
    cfgs = {name: dataclasses.replace(cfg, forget=fg) for name, fg in FORGET_SETTINGS.items()}
    n = len(feats)
    for method in ("ms-tta", "tda"):
        r = out[method] = {name: {"online_samples_per_s": 0.0, "replay_samples_per_s": 0.0} for name in FORGET_SETTINGS}
        ratios: dict = {name: {"online": [], "replay": []} for name in FORGET_SETTINGS}
        walls: dict = {name: {"online": [], "replay": []} for name in FORGET_SETTINGS}
        turns = random.Random(0)
        for c in cfgs.values():
            replay(feats[:300], text, method, c, device=device)  # warm-up
        for _ in range(rounds):
            online = online_turns(feats, text, method, cfgs, device, cuda_graph=graph)
            rep_cpu: dict = {name: [] for name in cfgs}
            rep_wall: dict = {name: [] for name in cfgs}
            for _ in range(REPLAY_TURNS):  # ~0.1-0.5 s each
                order = list(cfgs)
                turns.shuffle(order)  # no setting always runs right after the same one
                for name in order:
                    c0 = time.process_time()
                    rate = replay(feats, text, method, cfgs[name], device=device).samples_per_s
                    rep_cpu[name].append((time.process_time() - c0) * 1e6 / n)
                    rep_wall[name].append(n / rate)
                    r[name]["replay_samples_per_s"] = round(max(r[name]["replay_samples_per_s"], rate), 1)
            for name in cfgs:
                wall, cpu = online[name]
                r[name]["online_samples_per_s"] = round(max(r[name]["online_samples_per_s"], n / wall), 1)
                walls[name]["online"].append(wall / online["none"][0])
                walls[name]["replay"].append(statistics.median(x / y for x, y in zip(rep_wall[name], rep_wall["none"])))
                if device.type != "cpu":
                    continue
                for key, us in (("online", cpu * 1e6 / n), ("replay", min(rep_cpu[name]))):
                    r[name][f"{key}_cpu_us_per_sample"] = round(min(r[name].get(f"{key}_cpu_us_per_sample", us), us), 1)
                ratios[name]["online"].append(cpu / online["none"][1])
                ratios[name]["replay"].append(
                    statistics.median(x / y for x, y in zip(rep_cpu[name], rep_cpu["none"]))  # paired, as the wall time
                )
        for name in FORGET_SETTINGS:
            for key in ("online", "replay"):
                r[name][f"{key}_time_vs_none"] = round(
                    r["none"][f"{key}_samples_per_s"] / r[name][f"{key}_samples_per_s"], 3
                )
                r[name][f"{key}_wall_vs_none"] = round(statistics.median(walls[name][key]), 3)
                if device.type == "cpu":
                    r[name][f"{key}_cpu_time_vs_none"] = round(statistics.median(ratios[name][key]), 3)
    out["rounds"] = rounds
    out["online_turn_samples"] = FORGET_BLOCK
    return out


def multi_rates(feats, text, cfg, device, streams: int, steps: int) -> dict:
    """Stream-steps/s of one MultiEngine with `streams` streams and of as many separate engines
    stepped in turn (each stream its own slice of the stream's samples), best of REPEAT."""
    x = feats[: streams * steps].reshape(streams, steps, -1).to(device)
    multi = MultiEngine(text.to(device), "ms-tta", cfg, streams=streams)
    single = [Engine(text.to(device), "ms-tta", cfg) for _ in range(streams)]
    fresh_m, fresh_s = multi.state_dict(), single[0].state_dict()
    best_m = best_s = 0.0
    for _ in range(REPEAT):
        multi.load_state_dict(fresh_m)
        _sync(device)
        t0 = time.perf_counter()
        for t in range(steps):
            r = multi.step(x[:, t])
        _ = r.predictions
        _sync(device)
        best_m = max(best_m, streams * steps / (time.perf_counter() - t0))
        for e in single:
            e.load_state_dict(fresh_s)
        _sync(device)
        t0 = time.perf_counter()
        for t in range(steps):
            rs = [e.step(x[s, t]) for s, e in enumerate(single)]
        _ = rs[-1].prediction
        _sync(device)
        best_s = max(best_s, streams * steps / (time.perf_counter() - t0))
    return {
        "multi_stream_steps_per_s": round(best_m, 1),
        "separate_stream_steps_per_s": round(best_s, 1),
        "speedup": round(best_m / best_s, 2),
    }


def part_multi(feats, text, cfg, device, steps: int) -> dict:
    out = {}
    for streams in (1, 8, 64):
        n = max(10, min(steps, feats.shape[0] // streams))
        rows = feats if feats.shape[0] >= streams * n else feats.repeat(streams * n // feats.shape[0] + 1, 1)
        out[f"S={streams}"] = {"steps_per_stream": n, **multi_rates(rows, text, cfg, device, streams, n)}
    out["method"] = "ms-tta"
    out["bank_size_per_stream"] = cfg.bank_size
    return out


def share_rate(pool: ThreadPoolExecutor, chunks: int = 24) -> float:
    """GEMM chunks per second ([256, 512] x [512, 3000], ten per chunk, one intra-op thread each) on `pool`."""
    a, b = torch.randn(256, 512), torch.randn(512, 3000)

    def chunk(_):
        with threads.intra_op_threads(1):
            for _ in range(10):
                a @ b

    list(pool.map(chunk, range(2)))  # warm-up
    best = 0.0
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        list(pool.map(chunk, range(chunks)))
        best = max(best, chunks / (time.perf_counter() - t0))
    return best


def part_share() -> dict:
    """The share of the cores a pool of W one-thread workers keeps under the competing load (one
    spinning process per core): loaded / idle rate of pure GEMM chunks for W = 1 .. cores + 2. The
    scheduler's fair share predicts W / (W + cores) x cores / min(W, cores); `mstta.threads` uses
    cores + 1 workers."""
    out: dict = {}
    load = threads.cores()
    for w in range(1, load + 3):
        with ThreadPoolExecutor(w) as pool:
            idle = share_rate(pool)
            with cpu_load(load):
                loaded = share_rate(pool)
        out[f"workers={w}"] = {
            "idle_chunks_per_s": round(idle, 1),
            "loaded_chunks_per_s": round(loaded, 1),
            "loaded_to_idle": round(loaded / idle, 3),
        }
    out["competing_load"] = f"{load} busy-looping processes (one per core)"
    return out


def part_bank_dtype(feats, text, cfg, device) -> dict:
    out: dict = {}
    for method in ("ms-tta", "tda+ms"):
        exact = replay(feats, text, method, cfg, device=device).predictions
        r = out[method] = {}
        for dtype in ("float16", "bfloat16"):
            half = replay(feats, text, method, dataclasses.replace(cfg, bank_dtype=dtype), device=device).predictions
            r[f"{dtype}_agreement"] = round(float((half == exact).mean()), 5)
    if device.type == "cuda":
        for dtype in ("float32", "float16", "bfloat16"):
            rate = online_rate(
                feats, text, "ms-tta", dataclasses.replace(cfg, bank_dtype=dtype), device, cuda_graph=True
            )
            out[f"ms-tta_cuda_graph_step_ms_{dtype}"] = round(1000 / rate, 4)
    out["n"] = int(feats.shape[0])
    return out


def state_bytes(engine) -> int:
    """Bytes of an engine's state tensors (any family), counted after it ran."""
    seen, total, todo = set(), 0, [engine.state_dict()]
    while todo:
        v = todo.pop()
        if isinstance(v, torch.Tensor):
            if id(v) not in seen:
                seen.add(id(v))
                total += v.numel() * v.element_size()
        elif isinstance(v, dict):
            todo.extend(v.values())
        elif isinstance(v, (list, tuple)):
            todo.extend(v)
        elif hasattr(v, "__dict__"):
            todo.extend(vars(v).values())
    return total


def part_methods(args, device) -> dict:
    """Per method and view count: replay and online samples/s, state bytes (see the module doc)."""
    from mstta import UserError, get_method, list_methods

    names = args.methods.split(",") if args.methods else list_methods()
    out: dict = {}
    for views in sorted({1, args.views}):
        g = torch.Generator().manual_seed(1)
        feats, text = stream(args.methods_n, args.classes, args.dim)
        if views > 1:
            noise = 0.05 * torch.randn(args.methods_n, views, args.dim, generator=g)
            feats = torch.nn.functional.normalize(feats.unsqueeze(1) + noise, dim=-1)
        cfg = EngineConfig(bank_size=args.bank_size, view_mode="confident" if views > 1 else "original")
        for name in names:
            row = out.setdefault(name, {"title": get_method(name).title, "marks": get_method(name).marks})
            if needs_text_tower(name):  # its own views only: one view is refused
                if views > 1:
                    row[f"views_{views}"] = tower_rates(args, device, name, views, cfg)
                continue
            try:
                engine = Engine(text.to(device), name, cfg)
                x = feats[: args.methods_steps + 5].to(device)
                done, wall, _ = _timed_steps(engine, x, 5, args.method_seconds, device)
                online = done / wall
                n = min(
                    args.methods_n, max(20, int(online * args.method_seconds * 2))
                )  # a slow method replays a prefix
                r = replay(feats[:n].to(device), text.to(device), name, cfg, device=device)
                row[f"views_{views}"] = {
                    "replay_samples_per_s": round(r.samples_per_s, 1),
                    "replay_n": n,
                    "online_samples_per_s": round(online, 1),
                    "online_steps": done,
                    "state_bytes": state_bytes(engine),
                }
            except UserError as exc:
                row[f"views_{views}"] = {"refused": str(exc)}
    return out


def _timed_steps(engine, x: torch.Tensor, warm: int, seconds: float, device: torch.device):
    """`warm` untimed steps, then `Engine.step()` over the rest of x until it ends or `seconds` pass,
    whichever first -> (steps timed, wall seconds, `_clock` seconds) of the timed steps."""
    for i in range(warm):
        engine.step(x[i])
    _sync(device)
    t0, c0, done = time.perf_counter(), _clock(device), 0
    for row_x in x[warm:]:
        res = engine.step(row_x)
        done += 1
        if time.perf_counter() - t0 > seconds:
            break
    _ = res.prediction
    _sync(device)
    return done, time.perf_counter() - t0, _clock(device) - c0


def _clock(device: torch.device) -> float:
    """This process's CPU seconds on a CPU (a shared machine's wall time is no measure), wall seconds on CUDA."""
    return time.process_time() if device.type == "cpu" else time.perf_counter()


def _tower_seconds(tower, device, reps: int) -> float:
    """Seconds per sample (`_clock`) of the text tower alone as TPT's step runs it: forward + backward,
    then one more forward, on the step's one intra-op thread (`threads.small_ops`)."""
    ctx = torch.nn.Parameter(tower.ctx_init.clone())
    with torch.inference_mode(False), threads.small_ops(device):
        _sync(device)
        t0 = _clock(device)
        for _ in range(reps):
            tower(ctx).sum().backward()
            with torch.no_grad():
                tower(ctx)
        _sync(device)
        return (_clock(device) - t0) / reps


def tower_rates(args, device, name: str, views: int, cfg) -> dict:
    """A prompt-tuning row: online samples/s with the live text tower of --tower-model over C =
    --classes prompts ("class i"), features of its dims, the share of a step in the text tower (its
    CPU time over the step's on a CPU, wall on CUDA) and the replay's rate (samples tuned in chunks)."""
    from mstta import UserError
    from mstta.features.models import load_clip
    from mstta.features.text_tower import text_tower

    try:
        clip = load_clip(args.tower_model, args.tower_pretrained, device, "fp32")
        tower = text_tower(clip, [f"class {i}" for i in range(args.classes)])
        text = tower.initial()
        g = torch.Generator().manual_seed(2)
        x = torch.nn.functional.normalize(
            torch.randn(args.methods_steps + 2, views, text.shape[1], generator=g), dim=-1
        )
        engine = Engine(text, name, cfg, text_tower=tower)
        x = x.to(device)
        done, wall, clock = _timed_steps(engine, x, 2, args.method_seconds, device)
        per, clocked = wall / done, clock / done
        share = _tower_seconds(tower, device, max(1, min(done, 20))) / clocked
        c0 = time.process_time()
        r = replay(x[2 : 2 + done], text, name, cfg, device=device, text_tower=tower)
        replay_cpu = (time.process_time() - c0) / done
    except UserError as exc:
        return {"refused": str(exc)}
    return {
        "model": f"{args.tower_model} {args.tower_pretrained}",
        "classes": args.classes,
        "dim": int(text.shape[1]),
        "views": views,
        "online_samples_per_s": round(1 / per, 2),
        "cpu_ms_per_sample": round(1000 * clocked, 2) if device.type == "cpu" else None,  # this process's CPU time
        "online_steps": done,
        "text_tower_share": round(share, 3),  # never capped: above 1 means the measure failed
        "replay_samples_per_s": round(r.samples_per_s, 1),
        "replay_cpu_ms_per_sample": round(1000 * replay_cpu, 3),
        "state_bytes": state_bytes(engine),
    }


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def long_stream(steps: int, classes: int, dim: int, device: torch.device) -> dict:
    """Run in a fresh process: ms-tta with the default (bounded) bank over `steps` samples; the
    step time is sampled over 500 steps at every tenth of the stream (it grows while the bank
    fills, then stays flat) and RSS likewise."""
    _, text = stream(1, classes, dim)
    engine = Engine(text.to(device), "ms-tta", EngineConfig())
    g = torch.Generator().manual_seed(1)
    marks = {min(steps, max(1, steps * i // 10)) for i in range(1, 11)}
    window = max(1, min(500, steps // 20))
    rss_start = rss_mb()
    curve, t0 = [], 0.0
    for i in range(1, steps + 1):
        if i + window - 1 in marks:
            _sync(device)
            t0 = time.perf_counter()
        engine.step(torch.nn.functional.normalize(torch.randn(dim, generator=g), dim=0).to(device))
        if i in marks:
            _sync(device)
            curve.append(
                {
                    "step": i,
                    "bank_rows": engine.bank_len,
                    "step_ms": round(1000 * (time.perf_counter() - t0) / window, 3),
                    "rss_mb": round(rss_mb(), 1),
                }
            )
    return {
        "steps": steps,
        "bank_size": engine.config.bank_size,
        "rss_start_mb": round(rss_start, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "curve": curve,
    }


def part_memory(args) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child-long-stream",
        "--steps",
        str(args.steps),
        "--classes",
        str(args.classes),
        "--dim",
        str(args.dim),
        "--device",
        args.device,
    ]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def part_graph_ops(feats, text, cfg, device, warm: int) -> dict:
    """The captured step's op count per forget setting (`graphs.step_ops`) after `warm` samples,
    stepped as under a CUDA graph (no host read; `Streams.run`'s resets before the replay), with
    forgetting's kernels as this device runs them (`fused.wanted`: Triton's on CUDA), each also
    relative to `none`'s. On a CPU also as a GPU runs them, the kernels through Triton's
    interpreter: the `(kernels)` rows, relative to `none (kernels)`."""
    out: dict = {"forget_kernels": "triton" if fused.wanted(device) else "tensor ops"}
    runs = [("", None)]
    if device.type == "cpu" and os.environ.get(fused.KERNEL_ENV, "auto") == "auto":
        runs.append((" (kernels)", "triton"))  # TRITON_INTERPRET=1: set by `main` before Triton's import
    x = feats.to(device).unsqueeze(1)  # [N, 1, d]: one stream's steps
    for method in ("ms-tta", "tda"):
        r = out[method] = {}
        for suffix, kernel in runs:
            base = None
            for name, fg in FORGET_SETTINGS.items():
                with mock.patch.dict(os.environ, {fused.KERNEL_ENV: kernel} if kernel else {}):
                    runner = Engine(text.to(device), method, dataclasses.replace(cfg, forget=fg)).runner
                    ops = _captured_ops(runner, x, warm)
                base = ops if base is None else base
                r[name + suffix] = {
                    "ops": sum(ops.values()),
                    "ops_vs_none": round(sum(ops.values()) / sum(base.values()), 3),
                    "added": dict(ops - base),
                }
    out["warm_samples"] = warm
    return out


def _captured_ops(runner, x: torch.Tensor, warm: int):
    """`graphs.step_ops` of the step after x[:warm], the runner stepped as under a CUDA graph."""
    runner.step_as_graph(True)
    for row in x[:warm]:
        graphs.captured_step(runner, row.unsqueeze(0))
    return graphs.step_ops(runner, x[warm].unsqueeze(0))


HOST_READS = ("item", "tolist", "__int__", "__float__", "__bool__", "__index__", "cpu")  # numpy() follows cpu()


def part_replay_ops(feats, text, cfg, device) -> dict:
    """The replay's op and host-read counts per forget setting, `ms-tta` and `tda`, run as on a GPU (the
    chunks in this thread, the detector's scan in a GPU's windows, the top weights by `topk`), after one
    replay of each (the scan's constants built), each also relative to `none`'s, with the ops a setting
    adds (`added`)."""
    out: dict = {}
    for method in ("ms-tta", "tda"):
        r = out[method] = {}
        base = None
        for name, fg in FORGET_SETTINGS.items():
            c = dataclasses.replace(cfg, forget=fg)
            with (
                mock.patch.object(threads, "PER_THREAD", False),  # `map_chunks` in this thread
                mock.patch.object(drift_scan, "first_rows", lambda device: drift_scan.SCAN_ROWS),
                mock.patch.object(idle_replay, "top_by_topk", lambda device: True),
            ):
                replay(feats, text, method, c, device=device)
                with _host_reads() as reads, graphs.OpCount() as count:
                    replay(feats, text, method, c, device=device)
            ops, n_ops, n_reads = count.ops, sum(count.ops.values()), sum(reads.values())
            base = (ops, n_ops, n_reads) if base is None else base
            r[name] = {
                "ops": n_ops,
                "ops_vs_none": round(n_ops / base[1], 3),
                "host_reads": n_reads,
                "host_reads_vs_none": round(n_reads / max(1, base[2]), 3),
                "added": dict(ops - base[0]),
            }
    return out


@contextlib.contextmanager
def _host_reads():
    """The number of calls of each of `HOST_READS` on any tensor while entered (a dict by name)."""
    seen: dict = dict.fromkeys(HOST_READS, 0)

    def counting(name, fn):
        def read(*args, **kwargs):
            seen[name] += 1
            return fn(*args, **kwargs)

        return read

    with contextlib.ExitStack() as stack:
        for name in HOST_READS:
            stack.enter_context(mock.patch.object(torch.Tensor, name, counting(name, getattr(torch.Tensor, name))))
        yield seen


def _parser() -> argparse.ArgumentParser:
    """The command line (its flags, in one table)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--n", type=int, default=5000, help="samples of the online and replay stream (default 5000)")
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--capacity", type=int, default=3)
    ap.add_argument(
        "--bank-size", type=int, default=DEFAULT_BANK_SIZE, help="bank of the online/replay runs (default 65536)"
    )
    ap.add_argument("--steps", type=int, default=100_000, help="samples of the memory run (default 100000)")
    ap.add_argument("--multi-n", type=int, default=200, help="steps per stream of the multi part (default 200)")
    ap.add_argument(
        "--multi-bank-size", type=int, default=4096, help="bank rows per stream of the multi part (default 4096)"
    )
    ap.add_argument("--parts", default=",".join(DEFAULT_PARTS), help=f"comma-separated subset of {','.join(PARTS)}")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument(
        "--methods", default="", help="methods part: comma-separated methods (default: every registered one)"
    )
    ap.add_argument(
        "--methods-n", type=int, default=2000, help="methods part: samples replayed per method (default 2000)"
    )
    ap.add_argument(
        "--methods-steps", type=int, default=200, help="methods part: online steps timed per method (default 200)"
    )
    ap.add_argument("--views", type=int, default=64, help="methods part: the multi-view stream's views (default 64)")
    ap.add_argument(
        "--method-seconds",
        type=float,
        default=10.0,
        help="methods part: time budget per method's online run (default 10; a slower method replays a shorter prefix)",
    )
    ap.add_argument(
        "--tower-model",
        default="mstta-digits",
        help="methods part: the prompt-tuning rows' model (default mstta-digits)",
    )
    ap.add_argument("--tower-pretrained", default="bundled", help="its weights (default bundled; none = random)")
    ap.add_argument(
        "--graph-ops-warm", type=int, default=250, help="graph_ops part: samples stepped before the count (default 250)"
    )
    ap.add_argument("--child-long-stream", action="store_true", help=argparse.SUPPRESS)
    return ap


def main() -> None:
    ap = _parser()
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: CUDA is not available on this machine; use --device cpu")
    if args.child_long_stream:
        print(json.dumps(long_stream(args.steps, args.classes, args.dim, device)))
        return
    parts = [p for p in args.parts.split(",") if p]
    bad = [p for p in parts if p not in PARTS]
    if bad:
        ap.error(f"--parts: unknown part(s) {', '.join(bad)}; choose from {', '.join(PARTS)}")
    if device.type == "cpu" and "graph_ops" in parts:  # Triton reads it when it is first imported
        os.environ.setdefault("TRITON_INTERPRET", "1")
    feats, text = stream(args.n, args.classes, args.dim)
    cfg = EngineConfig(k=args.k, capacity=args.capacity, bank_size=args.bank_size)
    out = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "intra_op_threads": torch.get_num_threads(),
        "classes": args.classes,
        "dim": args.dim,
        "n": args.n,
        "k": args.k,
        "capacity": args.capacity,
        "bank_size": args.bank_size,
        "best_of": REPEAT,
        "loadavg_1min_at_start": round(os.getloadavg()[0], 2),
    }
    if "online" in parts:
        out["online"] = part_online(feats, text, cfg, device)
    if "replay" in parts:
        out["replay"] = part_replay(feats, text, cfg, device)
    if "multi" in parts:
        out["multi"] = part_multi(
            feats, text, dataclasses.replace(cfg, bank_size=args.multi_bank_size), device, args.multi_n
        )
    if "bank_dtype" in parts:
        out["bank_dtype"] = part_bank_dtype(feats, text, cfg, device)
    if "share" in parts and device.type == "cpu":
        out["share"] = part_share()
    if "memory" in parts and args.steps > 0:
        out["memory"] = part_memory(args)
    if "methods" in parts:
        out["methods"] = part_methods(args, device)
    if "forget" in parts:
        out["forget"] = part_forget(feats, text, cfg, device)
    if "graph_ops" in parts:
        out["graph_ops"] = part_graph_ops(feats, text, cfg, device, min(args.graph_ops_warm, args.n - 1))
    if "replay_ops" in parts:
        out["replay_ops"] = part_replay_ops(feats, text, cfg, device)
    out["loadavg_1min_at_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
