"""OnZeta's sensitivity to precision on the shifted-digits benchmark; prints one JSON object.

    python benchmarks/onzeta_precision.py                        # camera shift, work folder onzeta-precision/
    python benchmarks/onzeta_precision.py --shift blur --orders 5

The engine runs in its text classifier's dtype (`Engine`, `mstta.replay`: float64 when the text is
float64, else float32; a feature file's text loads as float32, so `mstta-bench` runs OnZeta in
float32). This script generates the shifted-digits benchmark (`mstta.data.digits`), extracts one
shift with the bundled mstta-digits model (the `--digits` field run's file: 1 view, seed 1, fp32,
stored as float16), then replays `onzeta` on the same stored features with the text in float32 and in
float64, and runs the independent float64 port (`tests/reference_onzeta.py`, plain numpy loops of
the official code) on them. For each stream order (order 0 = the stored one, then seeded
permutations) it reports how many predictions differ between float32 and float64, from which step
on, and how each agrees with the port.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import reference_onzeta as ref

from mstta.data.digits import SHIFTS, make_shifted_digits
from mstta.engine.config import EngineConfig
from mstta.engine.replay import replay
from mstta.features.extract import run_extraction
from mstta.features.format import load_features
from mstta.features.models import bundled_checkpoint


def features(work: Path, shift: str):
    """The shift's feature file (extracted on the first run, reused after)."""
    root = make_shifted_digits(work / "shifted-digits")
    out = work / f"{shift}-mstta-digits-v1-s1.npz"
    run_extraction(
        f"imagefolder:{root / shift}",
        out,
        model="mstta-digits",
        pretrained=str(bundled_checkpoint("mstta-digits")),
        device="cpu",
        precision="fp32",
        views=1,
        seed=1,
        workers=0,
        cache_dir=work / "text",
    )
    return load_features(out)


def compare(x: torch.Tensor, text: torch.Tensor, labels: np.ndarray) -> dict:
    """float32 vs float64 `onzeta` on one stream x [N, d], and each against the float64 port."""
    cfg = EngineConfig()
    p32 = replay(x, text.float(), "onzeta", cfg).predictions
    x64, t64 = (torch.nn.functional.normalize(a.double(), dim=-1) for a in (x, text))  # as the engine does
    p64 = replay(x64, t64, "onzeta", cfg).predictions
    expected, _ = ref.onzeta(x64.numpy(), t64.numpy())
    port = np.array([ref.first_argmax(r) for r in expected])
    diff = np.flatnonzero(p32 != p64)
    return {
        "n": int(len(p32)),
        "float32_vs_float64_differ": round(float(len(diff) / len(p32)), 4),
        "first_differing_step": int(diff[0]) if len(diff) else None,
        "float64_equals_port": round(float((p64 == port).mean()), 4),
        "float32_equals_port": round(float((p32 == port).mean()), 4),
        "accuracy_float32": round(float((p32 == labels).mean() * 100), 2),
        "accuracy_float64": round(float((p64 == labels).mean() * 100), 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default="onzeta-precision", help="folder for the benchmark and its features")
    ap.add_argument("--shift", default="camera", choices=SHIFTS)
    ap.add_argument("--orders", type=int, default=5, help="stream orders (0 = the stored one)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    fs = features(Path(args.work), args.shift)
    x = fs.features if fs.features.dim() == 2 else fs.features[:, 0]
    x = x.float()
    rows = []
    for r in range(args.orders):
        perm = np.arange(len(x)) if r == 0 else np.random.default_rng(r).permutation(len(x))
        rows.append({"order": r, **compare(x[perm], fs.text, fs.labels[perm])})
    diffs = [row["float32_vs_float64_differ"] for row in rows]
    print(
        json.dumps(
            {
                "shift": args.shift,
                "samples": int(len(x)),
                "classes": int(fs.num_classes),
                "text": "the feature file's (imagefolder default templates)",
                "orders": rows,
                "differ_mean": round(float(np.mean(diffs)), 4),
                "torch": torch.__version__,
                "machine": platform.machine(),
            }
        )
    )


if __name__ == "__main__":
    main()
