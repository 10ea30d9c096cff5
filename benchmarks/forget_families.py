"""What the families' own forgetting rules cost per online step (issue 29: at most 10%); prints one JSON object.

    .venv/bin/python benchmarks/forget_families.py [--classes 1000 --dim 512 --n 300]
    .venv/bin/python benchmarks/forget_families.py --families bca,onzeta --n 1000
    .venv/bin/python benchmarks/forget_families.py --families bca --views 64 --n 150

For each family (bca, dpe, onzeta, dmn-zs, dota) and each of its rules (`none`, and the
`timeliness`/`idle` it defines: `mstta.engine.family_runner.check_forget_rule`), `Engine.step()` on a
generated stream of --n samples (C classes, d dims, --views views, read as the confident-views
protocol reads them when more than 1; `benchmarks/engine.py`'s clustered stream), after --warm
warm-up steps: steps per second of CPU time (`time.process_time`, every thread of this process)
and of wall time (each the best of --repeat rounds), and each rule's CPU time per step relative to
`none`: the median over the rounds of the round's ratio. A paired design, as `benchmarks/engine.py`'s
online part: one engine per rule, the engines taking turns every TURN samples of one pass, so the
machine's speed (which drifts between minutes) is the same for every rule within a turn.
DOTA's state is C d^2 floats (1 GB at C = 1000, d = 512) and a step ~0.1 s: it steps --dota-n
samples. The 1-minute load average at start and end is printed with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import torch

from mstta import Engine, EngineConfig
from mstta.engine.families import get_family
from mstta.engine.forget import ForgetConfig
from mstta.engine.methods import get_method

FAMILIES = ("bca", "dpe", "onzeta", "dmn-zs", "dota")


def stream(n: int, classes: int, dim: int, views: int = 1, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A clustered stream: features near their class's text embedding (`benchmarks/engine.py`'s),
    [n, d]; with views > 1, [n, V, d]: each sample's views scattered around it."""
    g = torch.Generator().manual_seed(seed)
    text = torch.nn.functional.normalize(torch.randn(classes, dim, generator=g), dim=-1)
    labels = torch.randint(0, classes, (n,), generator=g)
    feats = torch.nn.functional.normalize(text[labels] + 0.08 * torch.randn(n, dim, generator=g), dim=-1)
    if views > 1:
        feats = feats.unsqueeze(1) + 0.05 * torch.randn(n, views, dim, generator=g)
        feats = torch.nn.functional.normalize(feats, dim=-1)
    return feats, text


def rules(method: str) -> list[str]:
    """`none` and the family rules a method defines."""
    return ["none", *getattr(get_family(get_method(method).family), "FORGET", ())]


TURN = 25  # samples each rule's engine steps before the next rule's turn (`family_costs`)


def family_costs(feats, text, method: str, warm: int, repeat: int) -> dict:
    """Steps/s (CPU and wall, best of `repeat` rounds) of each rule and the median over the rounds of
    its CPU time relative to the same round's `none`. Each rule's engine steps feats[:warm] once; each
    round starts from that state and steps feats[warm:], the engines taking turns every TURN samples.
    Samples of several views are read as the confident-views protocol reads them."""
    steps = len(feats) - warm
    mode = "confident" if feats.dim() == 3 else "original"
    engines = {
        rule: Engine(text, method, EngineConfig(view_mode=mode, forget=ForgetConfig(rule)), stream_length=len(feats))
        for rule in rules(method)
    }
    for engine in engines.values():
        for row in feats[:warm]:
            engine.step(row)
    warmed = {rule: engine.state_dict() for rule, engine in engines.items()}
    best = {rule: [float("inf"), float("inf")] for rule in engines}
    ratios: dict = {rule: [] for rule in engines}
    for _ in range(repeat):
        spent = {rule: [0.0, 0.0] for rule in engines}
        for rule, engine in engines.items():
            engine.load_state_dict(warmed[rule])
        for p in range(warm, len(feats), TURN):
            for rule, engine in engines.items():
                c0, w0 = time.process_time(), time.perf_counter()
                for row in feats[p : p + TURN]:
                    r = engine.step(row)
                _ = r.prediction  # read the last result, as a consumer would
                spent[rule][0] += time.process_time() - c0
                spent[rule][1] += time.perf_counter() - w0
        for rule, (cpu, wall) in spent.items():
            best[rule] = [min(best[rule][0], cpu), min(best[rule][1], wall)]
            ratios[rule].append(cpu / spent["none"][0])
    out = {}
    for rule, (cpu, wall) in best.items():
        out[rule] = {
            "cpu_steps_per_s": round(steps / cpu, 1),
            "wall_steps_per_s": round(steps / wall, 1),
            "cpu_time_vs_none": round(statistics.median(ratios[rule]), 3),
        }
    out["steps_timed"] = steps
    return out


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--n", type=int, default=300, help="samples stepped per rule and round (default 300)")
    ap.add_argument("--dota-n", type=int, default=12, help="DOTA's samples per rule and round (default 12)")
    ap.add_argument("--views", type=int, default=1, help="views per sample (default 1; > 1: view_mode confident)")
    ap.add_argument("--warm", type=int, default=50, help="warm-up steps before the timed ones (default 50)")
    ap.add_argument(
        "--repeat", type=int, default=3, help="rounds: each rate is the best, each ratio the median (default 3)"
    )
    ap.add_argument("--families", default=",".join(FAMILIES), help=f"comma-separated subset of {','.join(FAMILIES)}")
    return ap


def main() -> None:
    ap = _parser()
    args = ap.parse_args()
    chosen = [f for f in args.families.split(",") if f]
    bad = [f for f in chosen if f not in FAMILIES]
    if bad:
        ap.error(f"--families: unknown {', '.join(bad)}; choose from {', '.join(FAMILIES)}")
    for flag, value in (("--n", args.n), ("--dota-n", args.dota_n), ("--repeat", args.repeat), ("--views", args.views)):
        if value < 1:
            ap.error(f"{flag} {value}: expected an integer >= 1")
    torch.set_num_threads(1)
    out = {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "intra_op_threads": torch.get_num_threads(),
        "classes": args.classes,
        "dim": args.dim,
        "views": args.views,
        "rounds": args.repeat,
        "turn_samples": TURN,
        "loadavg_1min_at_start": round(os.getloadavg()[0], 2),
    }
    c0 = time.process_time()
    for method in chosen:
        n = args.dota_n if method == "dota" else args.n
        warm = min(args.warm, 2) if method == "dota" else args.warm
        feats, text = stream(n + warm, args.classes, args.dim, args.views)
        out[method] = family_costs(feats, text, method, warm, args.repeat)
    out["cpu_seconds_total"] = round(time.process_time() - c0, 1)
    out["loadavg_1min_at_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
