"""The scene-cut detector alone on the digits streams; prints one JSON object (and writes it with --out).

    PYTHONPATH=. python benchmarks/detector.py                       # the engine's defaults, seeds 1-10
    PYTHONPATH=. python benchmarks/detector.py --seeds 11-30 --set detect_threshold=4 --out /tmp/det.json
    PYTHONPATH=. python benchmarks/detector.py --width 512 --noise 0.5          # the digits lifted to d = 512
    PYTHONPATH=. python benchmarks/detector.py --width 768 --source mixture     # generated Gaussian mixtures

Runs only `mstta.engine.drift.drift_step_t` (the engine's own ops, batched over the streams of one
length) over view 0 of the digits store's feature files (`mstta-bench streams --digits`: clean,
camera, rotate, blur; `--store`, built by `make field`) in the stream orders of
`mstta.bench.streamorders`: cut (clean -> each shift), return, chain, i.i.d. on each domain, and the
label-correlated orders on each domain (for information). Per kind: true cuts found within
`--within` steps (`mstta.bench.streammetrics.detections`, the benchmark's matching), the delays,
false cuts and false cuts per 10,000 steps. Seconds on a CPU: no engine, no replay.

At CLIP widths (`--width d`, the detector's settings chosen at the digits model's d = 64):
- `--source digits` (default): each digits feature x (unit, 64 dims) lifted to d dims by a fixed
  seeded random orthonormal map Q [d, 64] plus isotropic Gaussian noise of norm about `--noise`
  (per dimension noise / sqrt(d)), drawn once per sample, then made unit: the stream's structure is
  the digits' (the same streams, the same cuts), in a d-dimensional space;
- `--source mixture`: four generated domains of 600 samples, 10 classes, at width d: unit(domain
  offset + class mean + noise), norms 1 (offset), 1.5 (class mean), 1 (noise), the offsets and means
  random directions; the same stream orders, so the same cuts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from mstta.bench.streammetrics import detections
from mstta.bench.streamorders import ORDERS, SCENE_DOMAINS, SCENES, build, scene
from mstta.engine import functional as Fn
from mstta.engine.drift import Drift, drift_step_t
from mstta.engine.forget import ForgetConfig
from mstta.features.format import load_features

DOMAINS = ("clean", "camera", "rotate", "blur")


def digits_features(store: Path) -> tuple[torch.Tensor, list[np.ndarray]]:
    """View 0 of every digits domain (unit rows, pooled in DOMAINS' order) and each domain's labels."""
    from mstta.commands.streams import digits_files

    paths, _ = digits_files(store, dry_run=True)
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        sys.exit(f"--store {store}: no digits features ({missing[0]}); run make field first")
    sets = [load_features(p) for p in paths]
    x = torch.cat([fs.features if fs.features.dim() == 2 else fs.features[:, 0] for fs in sets]).float()
    return Fn.normalize(x), [np.asarray(fs.labels) for fs in sets]


def lifted(x: torch.Tensor, width: int, noise: float, seed: int = 0) -> torch.Tensor:
    """x [N, k] unit rows -> unit(x Q^T + noise / sqrt(width) * N(0, I)) [N, width], Q a seeded random
    orthonormal [width, k] map: the same geometry plus isotropic noise of norm about `noise`."""
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(width, x.shape[1], generator=g, dtype=torch.float64))
    e = torch.randn(x.shape[0], width, generator=g, dtype=torch.float64) * (noise / width**0.5)
    return Fn.normalize((x.double() @ q.T + e).float())


def mixture(width: int, seed: int = 0, domains: int = 4, per: int = 600, classes: int = 10):
    """Generated domains at `width`: unit(offset_j + mean_c + noise), norms 1, 1.5, 1 -> (x, labels)."""
    g = torch.Generator().manual_seed(seed)
    unit = lambda *s: Fn.normalize(torch.randn(*s, width, generator=g, dtype=torch.float64))
    means, offsets = 1.5 * unit(classes), unit(domains)
    xs, labels = [], []
    for j in range(domains):
        y = torch.arange(per) % classes
        noise = torch.randn(per, width, generator=g, dtype=torch.float64) / width**0.5
        xs.append(Fn.normalize((offsets[j] + means[y] + noise).float()))
        labels.append(y.numpy())
    return torch.cat(xs), labels


def streams_of(labels: list[np.ndarray], kind: str, seed: int, lead: int, segment: int):
    """(label, Stream) of one kind and seed, as `mstta-bench streams` builds them."""
    sizes = [len(y) for y in labels]
    if kind in SCENES:
        if kind == "chain":
            return [("→".join(DOMAINS), scene(sizes, SCENE_DOMAINS["chain"], lead, segment, seed, kind))]
        paths = [(0, b) if kind == "cut" else (0, b, 0) for b in range(1, len(sizes))]
        return [("→".join(DOMAINS[d] for d in p), scene(sizes, p, lead, segment, seed, kind)) for p in paths]
    return [(DOMAINS[j], build(kind, labels, seed, lead, segment, j)) for j in range(len(sizes))]


def detect(x: torch.Tensor, orders: list[np.ndarray], cfg: ForgetConfig) -> list[np.ndarray]:
    """The detector over streams of one length at once -> each stream's detected cut steps."""
    feats = torch.stack([x[torch.as_tensor(o)] for o in orders])  # [S, N, d]
    d = Drift.empty(feats.shape[0], feats.shape[-1], feats.device, cfg)
    cuts = torch.stack([drift_step_t(d, feats[:, t], cfg) for t in range(feats.shape[1])], 1)
    return [np.flatnonzero(c) for c in cuts.numpy()]


def measure(x, labels, cfg: ForgetConfig, kinds, seeds, lead, segment, within) -> dict:
    """Every stream of `kinds` x `seeds` -> per kind: cuts found, delays, false cuts per 10,000 steps."""
    out = {}
    for kind in kinds:
        made = [(lab, s) for seed in seeds for lab, s in streams_of(labels, kind, seed, lead, segment)]
        found, delays, false, steps, per = 0, [], 0, 0, {}
        for n in sorted({len(s.order) for _, s in made}):
            group = [(lab, s) for lab, s in made if len(s.order) == n]
            for (lab, s), det in zip(group, detect(x, [s.order for _, s in group], cfg)):
                m = detections(det, s.cuts, n, within)
                hits = [v for v in m["delays"] if v is not None]
                found, delays, false, steps = found + len(hits), delays + hits, false + m["false"], steps + n
                row = per.setdefault(lab, {"found": 0, "cuts": 0, "false": 0})
                row["found"] += len(hits)
                row["cuts"] += len(s.cuts)
                row["false"] += m["false"]
        cuts = sum(len(s.cuts) for _, s in made)
        out[kind] = {
            "streams": len(made),
            "steps": steps,
            "cuts": cuts,
            "found": found,
            "mean_delay": float(np.mean(delays)) if delays else None,
            "max_delay": int(max(delays)) if delays else None,
            "false": false,
            "false_per_10k": 1e4 * false / steps,
            "per_stream": per,
        }
    return out


def seed_list(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", default="out/field/features", help="the digits feature store (make field)")
    p.add_argument("--seeds", default="1-10", help="stream seeds, e.g. 1-10 or 1,2,3")
    p.add_argument("--streams", default=",".join(ORDERS), help="stream kinds")
    p.add_argument("--lead", type=int, default=200)
    p.add_argument("--segment", type=int, default=599)
    p.add_argument("--within", type=int, default=30)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a forget.detect_* key")
    p.add_argument("--source", choices=("digits", "mixture"), default="digits", help="the features (see above)")
    p.add_argument("--width", type=int, default=0, help="lift to this width (0: the digits' own 64)")
    p.add_argument("--noise", type=float, default=0.5, help="--width: the isotropic noise's norm")
    p.add_argument("--out", help="also write the JSON here")
    a = p.parse_args(argv)
    keys = {k: float(v) if "." in v or "e" in v else int(v) for k, _, v in (s.partition("=") for s in a.set)}
    cfg = ForgetConfig(detect=True, **keys)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    if a.source == "mixture":
        x, labels = mixture(a.width or 64)
    else:
        x, labels = digits_features(Path(a.store))
        x = lifted(x, a.width, a.noise) if a.width else x
    t1 = time.perf_counter()
    with torch.inference_mode():
        res = measure(x, labels, cfg, a.streams.split(","), seed_list(a.seeds), a.lead, a.segment, a.within)
    iid = res.get("iid")
    settings = {k: getattr(cfg, k) for k in vars(cfg) if k.startswith("detect_")}
    out = {
        "settings": settings,
        "seeds": a.seeds,
        "source": a.source,
        "width": x.shape[1],
        "noise": a.noise if a.width and a.source == "digits" else None,
        "within": a.within,
        "results": res,
        "goals": {
            "every_cut_found": all(r["found"] == r["cuts"] for k, r in res.items() if k in SCENES),
            "iid_false_per_10k_le_1": None if iid is None else iid["false_per_10k"] <= 1,
        },
        "seconds": {"load": round(t1 - t0, 2), "detector": round(time.perf_counter() - t1, 2)},
    }
    text = json.dumps(out, indent=1, ensure_ascii=False)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
