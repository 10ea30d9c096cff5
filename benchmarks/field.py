"""Speed of the field table on generated features of the real sizes; prints one JSON object.

    python benchmarks/field.py                                  # CPU: every row, 2% of each dataset
    python benchmarks/field.py --device cuda --scale 1          # the real sizes (one GPU)
    python benchmarks/field.py --datasets imagenet --methods tda,ms-tta --orders 10

For each of the 15 datasets (the MS-TTA paper's sample and class counts, `paper_results.yaml`) and
each registry row (default: every one), unit-norm random features [N, V, d = 512] in float16 are
made with the view count the benchmark feeds that row (`configs/<dataset>.yaml` bench.views, with
`run`'s view kind per method), and one field cell is measured exactly as `mstta-bench field` does
(`mstta.bench.field.measure`: the main replay with probabilities, R - 1 more orders, the
withheld-class replay; no mixed setting). Reports seconds per (dataset, row) and the total per row.
Random features: the predictions mean nothing, the work per sample is the real one (caches fill as
entropy allows). Rows whose cost grows past linear with N or C (name them with --separate) are
summed apart. `--scale` shrinks N (not C, V or d) for a CPU run; the JSON says which scale ran.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mstta.bench import paper
from mstta.bench.context import Cell, Row, dataset_config, row_engine_config
from mstta.bench.field import FieldCell, FieldOptions, measure
from mstta.bench.store import Backbone, FeatureKey
from mstta.bench.textsets import Choice
from mstta.bench.viewpolicy import view_kind
from mstta.engine.methods import list_methods
from mstta.features.devices import resolve_device
from mstta.features.format import FeatureSet

DIM = 512


def _stream(n: int, views: int, classes: int, seed: int) -> FeatureSet:
    g = torch.Generator().manual_seed(seed)
    text = torch.nn.functional.normalize(torch.randn(classes, DIM, generator=g), dim=-1)
    labels = torch.randint(classes, (n,), generator=g)
    shape = (n, views, DIM) if views > 1 else (n, DIM)
    noise = torch.randn(*shape, generator=g)
    base = text[labels] if views == 1 else text[labels][:, None, :]
    feats = torch.nn.functional.normalize(base * 0.3 + noise * 0.05, dim=-1).half()
    return FeatureSet(feats, text, labels.numpy(), [str(c) for c in range(classes)])


def _summary(rows: list[dict], device: torch.device, a: argparse.Namespace, separate: set[str]) -> dict:
    """The printed JSON: the machine, the settings, seconds per method and in total, every cell."""
    total: dict[str, float] = {}
    for r in rows:
        total[r["method"]] = total.get(r["method"], 0.0) + r["seconds"]
    out = {
        "device": str(device),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_threads": torch.get_num_threads(),
        "scale": a.scale,
        "orders": a.orders,
        "d": DIM,
        "per_method_seconds": {k: round(v, 2) for k, v in total.items()},
        "total_seconds": round(sum(v for k, v in total.items() if k not in separate), 2),
        "separate_seconds": round(sum(v for k, v in total.items() if k in separate), 2),
        "cells": rows,
    }
    return out


def _parser() -> argparse.ArgumentParser:
    """The command line (its flags, in one table)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", default=",".join(paper.GROUPS["all"] + ("imagenet",)))
    p.add_argument("--methods", default=",".join(list_methods()))
    p.add_argument("--separate", default="", help="rows timed apart from the total (quadratic or ImageNet-scale state)")
    p.add_argument("--scale", type=float, default=0.02, help="fraction of each dataset's N (1 = the real sizes)")
    p.add_argument("--orders", type=int, default=10)
    p.add_argument("--device", default="auto")
    p.add_argument("--out", help="also write the JSON here")
    return p


def main(argv=None) -> int:
    p = _parser()
    a = p.parse_args(argv)
    device = resolve_device(a.device)
    opts = FieldOptions(orders=a.orders, open=("withheld",))
    separate = {s for s in a.separate.split(",") if s}
    rows: list[dict] = []
    backbone = Backbone("ViT-B-16", "openai")
    for ds in a.datasets.split(","):
        stats = paper.dataset_stats(ds)
        n, classes = max(8, int(stats["test_samples"] * a.scale)), int(stats["classes"])
        dcfg = dataset_config(ds, {})
        streams: dict[int, FeatureSet] = {}
        for name in a.methods.split(","):
            row = Row.parse(name)
            views = dcfg.bench.views  # every row reads the dataset's view count (its kind varies)
            fs = streams.setdefault(views, _stream(n, views, classes, 0))
            ecfg = row_engine_config(row, dcfg)
            fkey = FeatureKey(ds, backbone, "fp16", views, view_kind(row.method, dcfg), 1)
            fc = FieldCell(
                Cell(row, {"dataset": ds, "seed": 1, "method": name}, ecfg, fkey), Choice("peer", "peer"), {}, ""
            )
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            rec = measure(fs, fs.text.to(device), fc, opts, device, None, None)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            rows.append(
                {
                    "dataset": ds,
                    "method": name,
                    "n": n,
                    "classes": classes,
                    "views": views,
                    "seconds": round(time.perf_counter() - t0, 3),
                    "samples_per_s": rec["samples_per_s"],
                    "state_bytes": rec["state_bytes"],
                }
            )
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    out = _summary(rows, device, a, separate)
    text = json.dumps(out, indent=1)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    sys.exit(main())
