"""Each method's accuracy in a demo run's JSONL log (`mstta-demo --log`), against the truth it holds,
overall and per scene of the clip; prints JSON.

    mstta-demo --bundled-demo --headless --out out/a.mp4 --log out/p.jsonl
    python benchmarks/demo_accuracy.py out/p.jsonl --scenes 40,480      # scene starts (source frames)

Every row labelled by the run's truth file counts (the JSONL's `truth`); CLIP is each row's `clip`
top-1, a raced method its `methods[].topk` top-1. `gain` is a method's accuracy minus CLIP's, in
points; `fixed`/`broke` count frames against CLIP; `cuts` the source frames where its forgetting
detected a scene cut. `--scenes` splits the frames at the given source frame indices (the digits
clip: 40 = the camera moved back, 480 = the light goes; `assets/make_digits.py`'s SCENES).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def read_rows(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def accuracy(rows: list[dict]) -> dict:
    """Per method (and CLIP): accuracy %, gain over CLIP (points), fixed, broke, labelled frames."""
    rows = [r for r in rows if r.get("truth") is not None]
    if not rows:
        return {}
    clip = [r["clip"][0]["label"] == r["truth"] for r in rows]
    out = {"clip": {"accuracy": round(100.0 * sum(clip) / len(rows), 2), "frames": len(rows)}}
    for i, entry in enumerate(rows[0]["methods"]):
        name = entry["method"]
        right = [r["methods"][i]["topk"][0]["label"] == r["truth"] for r in rows]
        acc = 100.0 * sum(right) / len(rows)
        out[name] = {
            "accuracy": round(acc, 2),
            "gain": round(acc - out["clip"]["accuracy"], 2),
            "fixed": sum(m and not c for m, c in zip(right, clip)),
            "broke": sum(c and not m for m, c in zip(right, clip)),
            "frames": len(rows),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("log", type=Path, help="a demo run's JSONL log (--log)")
    p.add_argument("--scenes", default="", help="source frames where scenes start, comma-separated (e.g. 40,480)")
    args = p.parse_args(argv)
    rows = read_rows(args.log)
    starts = sorted(int(s) for s in args.scenes.split(",") if s.strip())
    bounds = [0, *starts, float("inf")]
    result = {"log": str(args.log), "rows": len(rows), "all": accuracy(rows)}
    for k, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        if starts:
            result[f"scene{k + 1} [{lo}, {hi})"] = accuracy([r for r in rows if lo <= r["frame"] < hi])
    result["cuts"] = {
        m["method"]: [r["frame"] for r in rows for x in r["methods"] if x["method"] == m["method"] and x.get("cut")]
        for m in (rows[0]["methods"] if rows else [])
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
