"""CPU time of the prompt-tuning rows' replays over one stored many-view feature file; prints one JSON object.

    python benchmarks/tpt_replay.py out/field/features/<model>/<dataset>/views64-augmix-seed1.npz

For `tpt` and `c-tpt`: the replay stepped sample by sample (`replay(..., online=True)`, the engine's
loop) and chunked (`tpt.replay_stream`: the samples tuned in chunks, the default), with the largest
difference of their probabilities; for `tpt+ms` the replay (stepped: its bank carries over samples).
The text tower is the feature file's model (`mstta-bench replay` builds the same), the logit scale
its checkpoint's. This process's CPU time (a shared machine's wall time is no measure), with the
wall time and the 1-minute load average at start and end beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mstta.commands.replay import feature_file_tower  # after the path set-up
from mstta.engine.config import EngineConfig
from mstta.engine.replay import replay
from mstta.features.format import load_features

ROWS = (("tpt", True), ("tpt", False), ("c-tpt", True), ("c-tpt", False), ("tpt+ms", False))


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("features", type=Path, help="a feature file with at least 2 views per sample")
    args = ap.parse_args()
    fs = load_features(args.features)
    tower = feature_file_tower(fs, "tpt", args.features, "cpu")
    cfg = EngineConfig(logit_scale=fs.logit_scale or EngineConfig().logit_scale)  # the checkpoint's, as `field`
    out: dict = {"features": str(args.features), "n": int(fs.num_samples), "views": int(fs.num_views)}
    out["loadavg_1min_at_start"] = os.getloadavg()[0]
    probs = {}
    for name, stepped in ROWS:
        c0, w0 = cpu_seconds(), time.perf_counter()
        r = replay(fs.features, fs.text, name, cfg, text_tower=tower, keep_probs=True, online=stepped)
        key = f"{name}{' stepped' if stepped else ''}"
        out[key] = {
            "cpu_s": round(cpu_seconds() - c0, 3),
            "wall_s": round(time.perf_counter() - w0, 3),
            "accuracy": round(100 * float((r.predictions == fs.labels).mean()), 2),
        }
        probs[key] = r.probs
    for name in ("tpt", "c-tpt"):
        out[name]["max_abs_diff_vs_stepped"] = float(np.abs(probs[name] - probs[name + " stepped"]).max())
    out["loadavg_1min_at_end"] = os.getloadavg()[0]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
