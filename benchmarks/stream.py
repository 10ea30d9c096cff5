"""Streaming benchmark of the demo pipeline; prints one JSON object (and writes it with --out).

    python benchmarks/stream.py                       # ViT-B-16 (random weights) + mstta-tiny, CPU or GPU
    python benchmarks/stream.py --frames 24 --long-frames 20000 --out results/stream.json
    python benchmarks/stream.py --device cuda --models ViT-B-16 --long-frames 0   # GPU, no memory part
    python benchmarks/stream.py --device cuda --models ViT-B-16 --parts speed --views 64 --views-on device

Parts:
- speed: one generated H.264 video, decoded once; the same frames go through the same encoder
  with zero-shot CLIP only and with MS-TTA (bank of 4096 already full: the steady state of a
  long stream), frame by frame in alternating order. Reports fps, per-frame latency p50/p95
  (preprocess + encode + engine) and the fps ratio MS-TTA / zero-shot (target >= 0.95). With
  `--views V` both modes encode V views per frame (the frame + V-1 crops, `mstta-demo --views`),
  made where `--views-on` says (auto: on the GPU under CUDA, `mstta.features.tensor_views`; cpu: PIL).
- engine: the engine step alone at the ViT-B-16 feature size with a full bank.
- race: the bundled digits model on its clip, MS-TTA alone vs four methods raced on the same
  frames (`mstta-demo --methods`): ms per frame p50/p95 against the real-time budget.
- memory: a long generated stream (default 20,000 frames) through the whole headless pipeline
  (tiny model, JSONL log) with the bounded bank; RSS sampled every 250 frames; growth after
  warm-up (target <= 50 MB). The same for the engine alone at the ViT-B-16 feature size.

Every part can be switched off: `--parts` picks a subset, `--long-frames 0` skips the memory part,
`--models ''` the speed part. On CUDA every timing synchronises the device first.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.encoder import FrameEncoder
from app.pipeline import DemoConfig, run_pipeline
from app.session import StreamSession
from app.sinks import VideoSink
from app.sources import IterableSource, open_source
from mstta import Engine, EngineConfig, __version__
from mstta.atomic import atomic_open
from mstta.checks import int_in
from mstta.errors import UserError
from mstta.features.models import load_clip
from mstta.features.views import MAX_VIEWS

LABELS = ["circle", "square", "triangle", "star", "heart", "arrow"]
BANK = 4096
TARGET_RATIO = 0.95
TARGET_GROWTH_MB = 50.0
PARTS = ("speed", "engine", "memory", "race")
RACE = ("ms-tta", "tda", "zero-shot", "tda+ms")  # the race part: 1 method vs these 4 on the same frames


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def rss_mb() -> float:
    """Current resident set size of this process (MB), from /proc (Linux) or ru_maxrss."""
    try:
        for line in open("/proc/self/status", encoding="ascii"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def scene(i: int, w: int = 320, h: int = 240, rng: np.random.Generator | None = None) -> np.ndarray:
    """A drawn shape on a gradient, with a little noise (what the demo video looks like)."""
    import cv2

    img = np.empty((h, w, 3), np.uint8)
    img[:] = np.linspace(40, 160, w, dtype=np.uint8)[None, :, None]
    r, cx, cy = h // 4, w // 2 + int(30 * np.sin(i / 20)), h // 2
    color = [(230, 60, 40), (40, 200, 80), (50, 90, 230)][(i // 30) % 3]
    kind = (i // 30) % 3
    if kind == 0:
        cv2.circle(img, (cx, cy), r, color, -1, cv2.LINE_AA)
    elif kind == 1:
        cv2.rectangle(img, (cx - r, cy - r), (cx + r, cy + r), color, -1, cv2.LINE_AA)
    else:
        cv2.fillPoly(img, [np.array([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], np.int32)], color, cv2.LINE_AA)
    if rng is not None:
        img = np.clip(img + rng.normal(0, 6, img.shape), 0, 255).astype(np.uint8)
    return img


def generated_video(path: Path, n: int) -> list[np.ndarray]:
    """Write `n` frames as H.264 and decode them back (the frames every mode then shares)."""
    rng = np.random.default_rng(0)
    with VideoSink(path, fps=30) as sink:
        for i in range(n):
            sink.write(scene(i, rng=rng), i / 30)
    with open_source(str(path)) as src:
        return [f.image for f in src]


def _session(clip, method: str, views: int = 1, views_on: str = "auto") -> StreamSession:
    session = StreamSession(
        clip, LABELS, template="a photo of a {}.", method=method, config=EngineConfig(bank_size=BANK), views=views
    )
    if views_on != "auto":  # StreamSession builds the default (auto) encoder; swap in the asked one
        session.encoder = FrameEncoder(clip, views=views, seed=session.seed, views_on=views_on)
    if session.engine.method.mean_shift:  # steady state of a long stream: bank full, cache full
        g = torch.Generator().manual_seed(0)
        feats = torch.nn.functional.normalize(torch.randn(BANK, session.engine.dim, generator=g), dim=-1)
        for f in feats.to(session.engine.device):
            session.engine.step(f)
    return session


def speed(
    model: str, frames: list[np.ndarray], rounds: int, device: str, views: int = 1, views_on: str = "auto"
) -> dict:
    clip = load_clip(model, "none", device=device)
    sessions = {
        "zero_shot": _session(clip, "zero-shot", views, views_on),
        "ms_tta": _session(clip, "ms-tta", views, views_on),
    }
    for s in sessions.values():  # warm-up (allocator, kernels)
        for img in frames[:3]:
            s.process(img)
    # Frame by frame, both modes back to back in alternating order: slow drifts in machine load
    # hit both modes alike, so the ratio measures the adaptation's own cost.
    total = {k: 0.0 for k in sessions}
    lat: dict[str, list[float]] = {k: [] for k in sessions}
    sync = torch.cuda.synchronize if clip.device.type == "cuda" else (lambda: None)
    for r in range(rounds):
        for i, img in enumerate(frames):
            order = list(sessions) if (r + i) % 2 == 0 else list(sessions)[::-1]
            for name in order:
                sync()
                start = time.perf_counter()
                sessions[name].process(img)
                sync()
                elapsed = time.perf_counter() - start
                total[name] += elapsed
                lat[name].append(elapsed * 1000)
    fps = {k: len(frames) * rounds / total[k] for k in sessions}
    out: dict = {
        "model": model,
        "pretrained": "none (random weights)",
        "device": str(clip.device),
        "frames": len(frames),
        "rounds": rounds,
        "bank_size": BANK,
        "views": views,
        "views_on": sessions["ms_tta"].encoder.views_on,
        "ms_tta_bank_filled": sessions["ms_tta"].engine.bank_len,
    }
    for name in sessions:
        out[name] = {
            "fps": round(fps[name], 2),
            "latency_ms_p50": round(float(np.percentile(lat[name], 50)), 2),
            "latency_ms_p95": round(float(np.percentile(lat[name], 95)), 2),
        }
    out["fps_ratio"] = round(out["ms_tta"]["fps"] / out["zero_shot"]["fps"], 3)
    out["target_ratio"] = TARGET_RATIO
    out["meets_target"] = out["fps_ratio"] >= TARGET_RATIO
    return out


def race(rounds: int, device: str, limit: int = 120) -> dict:
    """Per-frame cost of racing: the bundled digits model on the first `limit` frames of its clip
    (assets/digits.mp4, the demo's default stride), MS-TTA alone vs the four methods of `RACE`
    (one encoder pass, one engine step each), alternating frame by frame. The clip plays in real
    time when a frame costs less than the stride / fps."""
    from app.sampling import Sampler, default_every

    clip = load_clip("mstta-digits", "bundled", device=device)
    labels = [
        ln.strip()
        for ln in (ROOT / "assets" / "digits_labels.txt").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    with open_source(str(ROOT / "assets" / "digits.mp4")) as src:
        every, fps = default_every(src.fps), src.fps
        frames = [f.image for _, f in zip(range(limit), Sampler(every)(src))]
    sessions = {
        "1": StreamSession(clip, labels, methods=[RACE[0]]),
        str(len(RACE)): StreamSession(clip, labels, methods=RACE),
    }
    for s in sessions.values():
        for img in frames[:3]:
            s.process(img)
    lat: dict[str, list[float]] = {k: [] for k in sessions}
    for r in range(rounds):
        for i, img in enumerate(frames):
            for name in list(sessions) if (r + i) % 2 == 0 else list(sessions)[::-1]:
                _sync(device)
                start = time.perf_counter()
                sessions[name].process(img)
                _sync(device)
                lat[name].append((time.perf_counter() - start) * 1000)
    budget = 1000.0 * every / fps
    out: dict = {
        "model": "mstta-digits (bundled)",
        "video": "assets/digits.mp4",
        "frames": len(frames),
        "every": every,
        "real_time_budget_ms": round(budget, 1),
        "methods": list(RACE),
    }
    for name, values in lat.items():
        out[f"{name}_method{'s' if name != '1' else ''}"] = {
            "ms_per_frame_p50": round(float(np.percentile(values, 50)), 2),
            "ms_per_frame_p95": round(float(np.percentile(values, 95)), 2),
            "real_time": bool(np.percentile(values, 95) < budget),
        }
    return out


def engine_step(dim: int, steps: int, device: str) -> dict:
    text = torch.nn.functional.normalize(torch.randn(len(LABELS), dim), dim=-1).to(device)
    engine = Engine(text, "ms-tta", EngineConfig(bank_size=BANK), device=device)
    feats = torch.nn.functional.normalize(torch.randn(BANK + steps, dim), dim=-1).to(device)
    for f in feats[:BANK]:
        engine.step(f)
    times = []
    for f in feats[BANK:]:
        _sync(device)
        start = time.perf_counter()
        engine.step(f)
        _sync(device)
        times.append((time.perf_counter() - start) * 1000)
    return {
        "dim": dim,
        "bank_size": BANK,
        "bank_filled": engine.bank_len,
        "steps": steps,
        "cuda_graph": engine.cuda_graph,
        "ms_p50": round(float(np.percentile(times, 50)), 3),
        "ms_p95": round(float(np.percentile(times, 95)), 3),
    }


def memory_pipeline(n: int, tmp: Path) -> dict:
    """The whole headless pipeline over a long generated stream with the bounded bank."""
    rng = np.random.default_rng(1)
    base = [scene(i, 96, 72) for i in range(90)]

    def frames():
        for i in range(n):  # a fresh array per frame, like a decoder
            yield base[i % 90] + rng.integers(0, 8, (72, 96, 3), dtype=np.uint8) // 2

    samples: list[tuple[int, float]] = []

    def on_frame(frame, result):
        if frame.index % 250 == 0:
            samples.append((frame.index, rss_mb()))

    clip = load_clip("mstta-tiny", "none", device="cpu")
    cfg = DemoConfig(
        labels=str(tmp / "labels.txt"),
        log=str(tmp / "long.jsonl"),
        bank_size=BANK,
        every=1,
        model="mstta-tiny",
        pretrained="none",
    )
    (tmp / "labels.txt").write_text("\n".join(LABELS) + "\n", encoding="utf-8")
    start = time.perf_counter()
    summary = run_pipeline(
        cfg, clip=clip, source=IterableSource(frames(), fps=30, name="<generated>"), on_frame=on_frame
    )
    return _growth(
        "pipeline (mstta-tiny, d=64, JSONL log)",
        samples,
        summary["frames_processed"],
        time.perf_counter() - start,
        summary["bank_size"],
    )


def memory_engine(n: int, dim: int, device: str) -> dict:
    """The engine alone at ViT-B-16's feature size over a long stream of features."""
    g = torch.Generator().manual_seed(2)
    protos = torch.nn.functional.normalize(torch.randn(len(LABELS), dim, generator=g), dim=-1)
    engine = Engine(protos, "ms-tta", EngineConfig(bank_size=BANK), device=device)
    samples = []
    start = time.perf_counter()
    for i in range(n):
        f = protos[i % len(LABELS)] + 0.5 * torch.randn(dim, generator=g) / dim**0.5
        engine.step(f.to(device))
        if i % 250 == 0:
            samples.append((i, rss_mb()))
    return _growth(f"engine alone (d={dim})", samples, n, time.perf_counter() - start, engine.bank_len)


def _growth(what: str, samples: list[tuple[int, float]], frames: int, seconds: float, bank: int) -> dict:
    if not samples:  # a stream too short to sample (or empty): nothing to measure
        return {"what": what, "frames": frames, "seconds": round(seconds, 1), "measured": False}
    warm = [r for i, r in samples if i >= 1000] or [r for _, r in samples]
    base = warm[0]
    peak = max(r for _, r in samples)
    return {
        "what": what,
        "frames": frames,
        "seconds": round(seconds, 1),
        "bank_size": BANK,
        "bank_final": bank,
        "rss_mb_after_1000_frames": round(base, 1),
        "rss_mb_peak_sampled": round(peak, 1),
        "rss_mb_last": round(samples[-1][1], 1),
        "growth_mb": round(peak - base, 1),
        "target_growth_mb": TARGET_GROWTH_MB,
        "meets_target": peak - base <= TARGET_GROWTH_MB,
    }


def _parser() -> argparse.ArgumentParser:
    """The command line (its flags, in one table)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=24, help="frames of the speed video (default 24)")
    p.add_argument("--rounds", type=int, default=2, help="passes over the frames (default 2)")
    p.add_argument("--models", default="ViT-B-16,mstta-tiny", help="comma-separated architectures (random weights)")
    p.add_argument("--views", type=int, default=1, help="views per frame in the speed part, 1..256 (default 1)")
    p.add_argument(
        "--views-on",
        default="auto",
        choices=("auto", "cpu", "device"),
        help="where the speed part makes extra views (default auto: the GPU under CUDA, else PIL)",
    )
    p.add_argument(
        "--long-frames",
        type=int,
        default=20000,
        help="length of the memory stream (default 20000; 0 skips the memory part)",
    )
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda or cuda:N")
    p.add_argument(
        "--threads", type=int, help="torch CPU threads (default: torch's choice); 1 is steadier on a busy machine"
    )
    p.add_argument(
        "--parts", default=",".join(PARTS), help="comma-separated parts to run: speed, engine, memory (default all)"
    )
    p.add_argument("--out", type=Path, help="also write the JSON here")
    return p


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    parts = {x for x in args.parts.split(",") if x}
    if parts - set(PARTS):
        p.error(f"--parts: unknown part(s) {', '.join(sorted(parts - set(PARTS)))}; choose from {', '.join(PARTS)}")
    try:
        int_in(args.views, "--views", 1, MAX_VIEWS)
        int_in(args.long_frames, "--long-frames", 0, extra=" (0 skips the memory part)")
    except UserError as exc:
        p.error(str(exc))
    models = [m for m in args.models.split(",") if m]
    logging.basicConfig(level=logging.ERROR)
    from mstta.features.devices import resolve_device

    try:
        device = str(resolve_device(args.device))
    except Exception as exc:  # a UserError: one line, exit 2
        p.error(str(exc))
    if args.threads:
        torch.set_num_threads(args.threads)
    result: dict = {
        "benchmark": "stream",
        "mstta": __version__,
        "torch": torch.__version__,
        "device": device,
        "cpu": platform.processor() or platform.machine(),
        "cpu_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "gpu": torch.cuda.get_device_name(0) if device.startswith("cuda") else None,
    }
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        if "speed" in parts and models and args.frames > 0:
            frames = generated_video(t / "speed.mp4", args.frames)
            result["video"] = {"frames": len(frames), "size": [frames[0].shape[1], frames[0].shape[0]], "codec": "h264"}
            result["speed"] = [speed(m, frames, args.rounds, device, args.views, args.views_on) for m in models]
        if "race" in parts:
            result["race"] = race(args.rounds, device)
        if "engine" in parts:
            result["engine_step"] = engine_step(512, 300, device)
        if "memory" in parts and args.long_frames > 0:
            result["memory"] = [memory_pipeline(args.long_frames, t), memory_engine(args.long_frames, 512, device)]
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(args.out) as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
