"""The replay's detector scan (`forget.stream_cuts`, batched) against the engine's detector step
(`drift.drift_step_t`, one sample at a time); prints one JSON object.

    PYTHONPATH=. python benchmarks/detector_scan.py                     # seeds 0-9, d = 64 and 512
    PYTHONPATH=. python benchmarks/detector_scan.py --seeds 0-29 --n 6000
    PYTHONPATH=. python benchmarks/detector_scan.py --replay 2000   # the scan inside the replay, alone

On generated scene streams (a Gaussian mixture of 10 classes per scene, a new scene offset at each
true cut, unit rows; `--n` samples, a cut every `--every` samples) and for several detector settings:
- whether the scan's cuts equal the step's, and how many segments the scan handed to the step (its
  guard: `drift_scan.GUARD`);
- the largest gap between the scan's CUSUM and the step's, |dS| / (threshold + summed terms), up to
  each segment's first cut: the quantity the guard bounds by GUARD;
- CPU seconds of both over every stream (one thread).

`--replay N` measures instead the scan where the replay runs it (issue 29: detect at most 10% over
none), on benchmarks/engine.py's stream (N samples, C = 1000, d = 512) with torch's default threads:
for `ms-tta` and `tda`, the replay's CPU time per sample with forget none and with detect (the two
taking turns, best of --rounds after one warm-up round) and their ratio, and `stream_cuts` timed
right after a replay: this thread's CPU time, the process's (threads idle or spinning included) and
its page faults (medians), beside the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time

import torch

from mstta import EngineConfig, replay
from mstta.engine.drift import Drift, drift_step_t
from mstta.engine.drift_scan import GUARD, cusum_windows, detect_rows, segment_cut
from mstta.engine.forget import ForgetConfig, stream_cuts

SETTINGS = {
    "default": {},
    "fast": dict(detect_rate=0.2, detect_slack=0.2, detect_threshold=2.0, detect_warmup=60),
    "small-ridge": dict(detect_ridge=0.002, detect_warmup=40, detect_threshold=1.0, detect_slack=0.1),
}


def scene_stream(n: int, every: int, dim: int, seed: int) -> torch.Tensor:
    """[n, dim] unit rows: class mean (norm 1.5) + scene offset (norm 0.6, new every `every` rows) + noise."""
    g = torch.Generator().manual_seed(seed)
    unit = lambda *s: torch.nn.functional.normalize(torch.randn(*s, dim, generator=g, dtype=torch.float64), dim=-1)
    means, offsets = 1.5 * unit(10), 0.6 * unit(n // every + 1)
    y = torch.randint(0, 10, (n,), generator=g)
    x = means[y] + offsets[torch.arange(n) // every] + torch.randn(n, dim, generator=g, dtype=torch.float64) / dim**0.5
    return torch.nn.functional.normalize(x, dim=-1).float()


def stepped(x: torch.Tensor, fg: ForgetConfig) -> tuple[list[bool], list[float]]:
    """The engine's step over x [n, D]: each sample's cut and its CUSUM before a cut resets it."""
    d, cuts, accs = Drift.empty(1, x.shape[-1], x.device, fg), [], []
    for t in range(len(x)):
        cut = bool(drift_step_t(d, x[t : t + 1], fg)[0])
        cuts.append(cut)
        accs.append(float("nan") if cut else float(d.acc[0]))
    return cuts, accs


def gap(x: torch.Tensor, fg: ForgetConfig, cuts: list[bool], accs: list[float]) -> float:
    """The largest |dS| / (threshold + summed terms) over the step's segments, up to each cut."""
    u = detect_rows(x)
    edges = [0] + [t + 1 for t, c in enumerate(cuts) if c] + [len(x)]
    worst = 0.0
    for a, b in zip(edges, edges[1:]):
        if b - a <= fg.detect_warmup:
            continue
        for p, s, sizes in cusum_windows(u[a:b], fg):
            want = torch.tensor(accs[a + p : a + p + len(s)], dtype=torch.float64)
            ok = ~want.isnan()
            rel = (s[: len(want)] - want).abs() / (fg.detect_threshold + sizes[: len(want)])
            worst = max(worst, float(rel[ok].max()) if ok.any() else 0.0)
    return worst


def cuts_cost(feats: torch.Tensor) -> tuple[float, float, int]:
    """`stream_cuts` of feats [N, d] under `forget.detect` -> (this thread's CPU ms, the process's, page faults)."""
    faults, t0, p0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.thread_time(), time.process_time()
    with torch.inference_mode():
        stream_cuts(feats.unsqueeze(1), ForgetConfig(detect=True))
    t1, p1 = time.thread_time(), time.process_time()
    return 1e3 * (t1 - t0), 1e3 * (p1 - p0), resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults


def in_replay(n: int, rounds: int) -> dict:
    """The `--replay` part (the module's docstring): per method, none and detect replays in turn, and the
    scan right after each round's last replay."""
    from engine import stream  # benchmarks/engine.py's stream (this script runs from benchmarks/)

    feats, text = stream(n, 1000, 512)
    out = {"n": n, "rounds": rounds}
    for method in ("ms-tta", "tda"):
        best, inside = {"none": float("inf"), "detect": float("inf")}, []
        for r in range(rounds + 1):
            for rule in best:
                cfg = EngineConfig(forget=ForgetConfig(detect=rule == "detect"))
                t0 = time.process_time()
                replay(feats, text, method, cfg)
                best[rule] = min(best[rule], time.process_time() - t0) if r else best[rule]
            inside.append(cuts_cost(feats))
        row = {f"{rule}_us_per_sample": round(1e6 * t / n, 1) for rule, t in best.items()}
        row["detect_over_none"] = round(best["detect"] / best["none"], 3)
        for i, key in enumerate(("cuts_thread_ms", "cuts_process_ms", "cuts_faults")):
            row[key] = round(statistics.median(c[i] for c in inside[1:]), 2)
        out[method] = row
    out["load_average"] = [round(v, 2) for v in os.getloadavg()]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="0-9", help="a-b")
    p.add_argument("--n", type=int, default=3000)
    p.add_argument("--every", type=int, default=700)
    p.add_argument("--widths", default="64,512")
    p.add_argument("--replay", type=int, default=0, help="N: time the scan inside the replay instead (0: off)")
    p.add_argument("--rounds", type=int, default=7, help="--replay: rounds of none and detect (default 7)")
    a = p.parse_args(argv)
    if a.replay:
        print(json.dumps(in_replay(a.replay, a.rounds), indent=1))
        return 0
    lo, _, hi = a.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    torch.set_num_threads(1)
    out = {"guard": GUARD, "n": a.n, "every": a.every, "seeds": a.seeds, "results": {}}
    with torch.inference_mode():
        for width in map(int, a.widths.split(",")):
            for name, keys in SETTINGS.items():
                fg = ForgetConfig(detect=True, **keys)
                row = {
                    "streams": 0,
                    "equal": 0,
                    "cuts": 0,
                    "fallbacks": 0,
                    "max_gap": 0.0,
                    "step_s": 0.0,
                    "scan_s": 0.0,
                }
                for seed in seeds:
                    x = scene_stream(a.n, a.every, width, seed)
                    t0 = time.process_time()
                    cuts, accs = stepped(x, fg)
                    t1 = time.process_time()
                    got = stream_cuts(x.unsqueeze(1), fg).tolist()
                    t2 = time.process_time()
                    row["streams"] += 1
                    row["equal"] += got == cuts
                    row["cuts"] += sum(cuts)
                    row["step_s"] += t1 - t0
                    row["scan_s"] += t2 - t1
                    row["max_gap"] = max(row["max_gap"], gap(x, fg, cuts, accs))
                    u, start = detect_rows(x), 0
                    while start < len(x):  # count the segments the scan handed to the step
                        found, fell = segment_cut(x[start:], u[start:], fg)
                        row["fallbacks"] += fell
                        start = len(x) if found is None else start + found + 1
                row["step_us_per_sample"] = round(1e6 * row["step_s"] / (a.n * row["streams"]), 2)
                row["scan_us_per_sample"] = round(1e6 * row["scan_s"] / (a.n * row["streams"]), 2)
                out["results"][f"d{width}-{name}"] = row
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
