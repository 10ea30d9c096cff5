"""What `forget.rule=idle` adds to the cache family's replay (issue 29: at most 10%); prints one JSON object.

    PYTHONPATH=. python benchmarks/idle_replay.py                        # ms-tta and tda, C = 1000 and 10
    PYTHONPATH=. python benchmarks/idle_replay.py --methods tda --classes 1000 --idle 1000 --rounds 15

For each method and class count C: `benchmarks/engine.py`'s clustered stream of --n samples (d = --dim),
`replay()` under `forget.rule=none` and under `idle` at each --idle horizon, the settings taking turns
--rounds times in this process (a shared machine's load drifts); per setting the least and the median
CPU time per sample (`time.process_time`, every thread of this process) and the least wall time, and
each one's ratio to `none` (least to least, median to median). C = 10 is the few-class case: most
samples do not enter the full class rows, so a step's top weight is often a sample that is not
cached. The 1-minute load average at start and end is printed with the figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine import stream

from mstta import EngineConfig, replay
from mstta.engine.forget import ForgetConfig


def settings(idles: list[int]) -> dict[str, ForgetConfig]:
    """`none` and `idle` at each horizon, by name."""
    return {"none": ForgetConfig(), **{f"idle={i}": ForgetConfig("idle", idle=i) for i in idles}}


def timed(feats, text, method: str, cfg: EngineConfig) -> tuple[float, float]:
    """(CPU, wall) microseconds per sample of one replay."""
    c0, w0 = time.process_time(), time.perf_counter()
    replay(feats, text, method, cfg)
    return (time.process_time() - c0) * 1e6 / len(feats), (time.perf_counter() - w0) * 1e6 / len(feats)


def compare(feats, text, method: str, rules: dict[str, ForgetConfig], rounds: int) -> dict:
    """Each setting's CPU and wall per sample over `rounds` turns, and its ratios to `none`."""
    cfgs = {name: dataclasses.replace(EngineConfig(), forget=fg) for name, fg in rules.items()}
    for cfg in cfgs.values():  # warm-up: the pool, the allocator
        replay(feats[: min(len(feats), 300)], text, method, cfg)
    runs = {name: [] for name in cfgs}
    for _ in range(rounds):
        for name, cfg in cfgs.items():
            runs[name].append(timed(feats, text, method, cfg))
    out = {}
    for name, r in runs.items():
        cpu = [c for c, _ in r]
        out[name] = {"cpu_us_best": round(min(cpu), 2), "cpu_us_median": round(statistics.median(cpu), 2)}
        out[name]["wall_us_best"] = round(min(w for _, w in r), 2)
    base = out["none"]
    for row in out.values():
        row["cpu_ratio_best"] = round(row["cpu_us_best"] / base["cpu_us_best"], 3)
        row["cpu_ratio_median"] = round(row["cpu_us_median"] / base["cpu_us_median"], 3)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default="ms-tta,tda", help="comma-separated cache-family methods")
    ap.add_argument("--classes", default="1000,10", help="comma-separated class counts C, a stream each")
    ap.add_argument("--idle", default="1,50,1000", help="comma-separated idle horizons (steps)")
    ap.add_argument("--n", type=int, default=2000, help="samples per stream")
    ap.add_argument("--dim", type=int, default=512, help="feature dims d")
    ap.add_argument("--rounds", type=int, default=7, help="turns of the settings (each keeps its runs)")
    args = ap.parse_args(argv)
    rules = settings([int(i) for i in args.idle.split(",")])
    load0 = os.getloadavg()[0]
    results = {}
    for classes in (int(c) for c in args.classes.split(",")):
        feats, text = stream(args.n, classes, args.dim)
        for method in args.methods.split(","):
            results[f"{method} C={classes}"] = compare(feats, text, method, rules, args.rounds)
    info = {"n": args.n, "dim": args.dim, "rounds": args.rounds, "torch": torch.__version__}
    info |= {"machine": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    info |= {"load_1min_start": load0, "load_1min_end": os.getloadavg()[0]}
    print(json.dumps({"info": info, "results": results}, indent=1))


if __name__ == "__main__":
    main()
