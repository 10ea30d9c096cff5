"""Engine speed on CPU (or --device cuda): online step and vectorised replay samples/s, and peak
RSS over a long stream with a bounded bank. Prints one JSON object.

    .venv/bin/python benchmarks/engine.py [--classes 1000 --dim 512 --n 5000 --long 100000]
"""
from __future__ import annotations

import argparse
import json
import platform
import resource
import time

import torch

from mstta import Engine, EngineConfig, replay


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def stream(n: int, classes: int, dim: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    text = torch.nn.functional.normalize(torch.randn(classes, dim, generator=g), dim=-1)
    labels = torch.randint(0, classes, (n,), generator=g)
    feats = torch.nn.functional.normalize(text[labels] + 0.08 * torch.randn(n, dim, generator=g), dim=-1)
    return feats, text


def online_rate(feats, text, method, cfg, device) -> float:
    engine = Engine(text.to(device), method, cfg)
    x = feats.to(device)
    for i in range(50):  # warm-up
        engine.step(x[i])
    engine.reset()
    t0 = time.perf_counter()
    for row in x:
        r = engine.step(row)
    int(r.logits.argmax())
    return len(x) / (time.perf_counter() - t0)


def long_stream_rss(n: int, classes: int, dim: int, bank: int, device) -> dict:
    """Peak RSS while streaming `n` samples through ms-tta with a bounded bank."""
    _, text = stream(1, classes, dim)
    engine = Engine(text.to(device), "ms-tta", EngineConfig(bank_size=bank))
    g = torch.Generator().manual_seed(1)
    start = None
    for i in range(n):
        engine.step(torch.randn(dim, generator=g))
        if i == 1000:
            start = rss_mb()
    return {"samples": n, "bank_size": bank, "rss_after_1k_mb": round(start, 1), "rss_end_mb": round(rss_mb(), 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--capacity", type=int, default=3)
    ap.add_argument("--long", type=int, default=100_000, help="samples for the bounded-bank memory run (0 = skip)")
    ap.add_argument("--bank-size", type=int, default=4096)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    device = torch.device(args.device)
    feats, text = stream(args.n, args.classes, args.dim)
    cfg = EngineConfig(k=args.k, capacity=args.capacity)
    out = {"device": str(device), "torch": torch.__version__, "threads": torch.get_num_threads(),
           "cpu": platform.processor() or platform.machine(),
           "classes": args.classes, "dim": args.dim, "n": args.n, "k": args.k, "capacity": args.capacity}
    for method in ("baseline", "ms-tta"):
        online = online_rate(feats, text, method, cfg, device)
        replay(feats[:200], text, method, cfg, device=device)  # warm-up
        r = replay(feats, text, method, cfg, device=device)
        out[method] = {"online_samples_per_s": round(online, 1), "replay_samples_per_s": round(r.samples_per_s, 1)}
    if args.long:
        out["bounded_bank_memory"] = long_stream_rss(args.long, args.classes, args.dim, args.bank_size, device)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
