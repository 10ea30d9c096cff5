"""A researcher's own data with the defaults (issue 33's "done when"): the bundled `mstta-digits`
model on a generated digits `imagefolder:` (mstta/data/digits.py, one shift) with several views,
`mstta-bench run` at its defaults, then the same cells with `--view-mode confident` (TDA's OOD
protocol, the old default). Prints one JSON object: each row's accuracy and its CLIP reference,
the logit scale and view mode the run recorded. Not a test: it extracts real views (minutes on a CPU).

    python benchmarks/own_data.py [--shift camera] [--views 16] [--limit 300] [--work /tmp/own-data]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mstta.cli import main as bench
from mstta.data.digits import SHIFTS, make_shifted_digits

METHODS = "zero-shot,tda,boostadapter,ms-tta,dota,dpe,zero"


def _run(dataset: str, work: Path, out: str, views: int, limit: int, extra: list[str]) -> dict:
    argv = ["run", "--datasets", dataset, "--backbone", "mstta-digits", "--views", str(views)]
    argv += ["--limit", str(limit), "--methods", METHODS, "--store", str(work / "features"), "--out", str(work / out)]
    argv += ["--device", "cpu", "--fps-samples", "0", "--no-plots", "--no-progress", *extra]
    if bench(argv) != 0:
        raise SystemExit(f"mstta-bench {' '.join(argv)} failed")
    runs = json.loads((work / out / "results.json").read_text())["runs"]
    return {
        r["method"]: {
            "accuracy": r["accuracy"],
            "clip": r["zero_shot_accuracy"],
            "clip_own_path": r["clip_view_accuracy"],
            "predicts": r["protocol"],
            "view_mode": r["view_mode"],
            "logit_scale": r["logit_scale"],
        }
        for r in runs
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shift", default="camera", choices=SHIFTS)
    p.add_argument("--views", type=int, default=16)
    p.add_argument("--limit", type=int, default=300)
    p.add_argument("--work", default="/tmp/own-data")
    a = p.parse_args()
    work = Path(a.work)
    root = make_shifted_digits(work / "shifted-digits")
    dataset = f"imagefolder:{root / a.shift}"
    report = {
        "dataset": dataset,
        "views": a.views,
        "limit": a.limit,
        "defaults": _run(dataset, work, "defaults", a.views, a.limit, []),
        "view_mode_confident": _run(dataset, work, "confident", a.views, a.limit, ["--view-mode", "confident"]),
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
