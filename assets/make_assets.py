"""Make the demo assets: `labels.txt`, `demo.mp4` and `truth.csv` (deterministic, a few seconds).

    python assets/make_assets.py            # writes into assets/

The video shows one drawn shape at a time (circle, square, triangle, star, heart, arrow) in
random colours on a plain gradient, moving and turning slowly; each appears twice, in segments of
2.5 s. Over the whole clip the scene shifts gradually, as a camera at dusk would: it darkens,
blurs, gets noisier and takes a blue cast, so zero-shot CLIP degrades and test-time adaptation
has something to do. `truth.csv` gives each segment's frame range and class.
H.264 (libx264, yuv420p) written with PyAV; 320x240 at 30 fps; well under 3 MB.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from fractions import Fraction
from pathlib import Path

import cv2
import numpy as np

HERE = Path(__file__).resolve().parent
CLASSES = ["circle", "square", "triangle", "star", "heart", "arrow"]
LABELS_HEADER = "# Classes drawn in demo.mp4 (made by assets/make_assets.py); one name per line.\n"


def _rotate(points: np.ndarray, angle: float) -> np.ndarray:
    c, s = math.cos(angle), math.sin(angle)
    return points @ np.array([[c, s], [-s, c]])


def shape_points(name: str, angle: float) -> np.ndarray | None:
    """Outline of a unit-size shape (radius ~1, centred at 0) turned by `angle`; None for a circle."""
    if name == "circle":
        return None
    if name == "square":
        pts = np.array([(-1, -1), (1, -1), (1, 1), (-1, 1)], float) * 0.8
    elif name == "triangle":
        pts = np.array([(math.cos(a), math.sin(a)) for a in np.radians([-90, 30, 150])])
    elif name == "star":
        pts = np.array([(r * math.cos(a), r * math.sin(a))
                        for i, a in enumerate(np.radians(np.arange(-90, 270, 36)))
                        for r in [1.0 if i % 2 == 0 else 0.42]])
    elif name == "heart":
        t = np.linspace(0, 2 * math.pi, 80)
        x = 16 * np.sin(t) ** 3
        y = -(13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t) - np.cos(4 * t))
        pts = np.stack([x, y], 1) / 17.0
    elif name == "arrow":
        pts = np.array([(-1, -0.28), (0.2, -0.28), (0.2, -0.65), (1, 0), (0.2, 0.65), (0.2, 0.28), (-1, 0.28)], float)
    else:
        raise ValueError(name)
    return _rotate(pts, angle)


def render(name: str, t_seg: float, shift: float, rng: np.random.Generator, style: dict, w: int, h: int) -> np.ndarray:
    """One RGB frame: the shape at segment time `t_seg` (0..1) under domain shift `shift` (0..1)."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    g = (xx / w * style["dir"][0] + yy / h * style["dir"][1] + 1) / 3
    img = style["bg0"][None, None] * (1 - g[..., None]) + style["bg1"][None, None] * g[..., None]
    img = img.astype(np.uint8).copy()
    cx = w / 2 + style["dx"] * w * (t_seg - 0.5)
    cy = h / 2 + style["dy"] * h * (t_seg - 0.5)
    r = style["size"] * min(w, h) * (0.95 + 0.1 * math.sin(2 * math.pi * t_seg))
    color = tuple(int(c) for c in style["color"])
    pts = shape_points(name, style["angle"] + style["spin"] * t_seg)
    if pts is None:
        cv2.circle(img, (int(cx * 16), int(cy * 16)), int(r * 16), color, -1, cv2.LINE_AA, shift=4)
    else:
        poly = np.round((pts * r + (cx, cy)) * 16).astype(np.int32)
        cv2.fillPoly(img, [poly], color, cv2.LINE_AA, shift=4)
    # The gradual shift: darker, bluer, blurrier, noisier.
    out = img.astype(np.float32)
    out *= 1.0 - 0.55 * shift
    out[..., 2] += 25.0 * shift
    out[..., 0] *= 1.0 - 0.15 * shift
    sigma = 2.6 * shift
    if sigma > 0.3:
        out = cv2.GaussianBlur(out, (0, 0), sigma)
    out += rng.normal(0.0, 16.0 * shift, out.shape).astype(np.float32)
    return np.clip(out, 0, 255).astype(np.uint8)


def segment_styles(n: int, rng: np.random.Generator) -> list[dict]:
    styles = []
    for _ in range(n):
        hue = rng.integers(0, 180)
        color = cv2.cvtColor(np.uint8([[[hue, rng.integers(170, 256), rng.integers(170, 256)]]]), cv2.COLOR_HSV2RGB)[0, 0]
        bg_hue = (hue + 90 + rng.integers(-30, 30)) % 180
        bg0 = cv2.cvtColor(np.uint8([[[bg_hue, rng.integers(20, 90), rng.integers(180, 240)]]]), cv2.COLOR_HSV2RGB)[0, 0]
        bg1 = cv2.cvtColor(np.uint8([[[bg_hue, rng.integers(20, 90), rng.integers(90, 160)]]]), cv2.COLOR_HSV2RGB)[0, 0]
        styles.append({
            "color": color.astype(np.float32), "bg0": bg0.astype(np.float32), "bg1": bg1.astype(np.float32),
            "dir": rng.uniform(-1, 1, 2), "dx": rng.uniform(-0.3, 0.3), "dy": rng.uniform(-0.2, 0.2),
            "size": rng.uniform(0.28, 0.36), "angle": rng.uniform(-0.4, 0.4), "spin": rng.uniform(-0.8, 0.8),
        })
    return styles


def make(out_dir: Path, width: int = 320, height: int = 240, fps: int = 30, segment_s: float = 2.5,
         repeats: int = 2, crf: int = 25, seed: int = 0) -> dict:
    import av

    rng = np.random.default_rng(seed)
    order: list[str] = []
    for _ in range(repeats):
        order += list(rng.permutation(CLASSES))
    seg_frames = int(round(segment_s * fps))
    total = seg_frames * len(order)
    styles = segment_styles(len(order), rng)
    out_dir.mkdir(parents=True, exist_ok=True)

    video, tmp = out_dir / "demo.mp4", out_dir / ".demo.part.mp4"
    with av.open(str(tmp), "w", format="mp4", options={"movflags": "+faststart"}) as container:
        stream = container.add_stream("libx264", rate=fps, options={"crf": str(crf), "preset": "slow"})
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for s, name in enumerate(order):
            for j in range(seg_frames):
                i = s * seg_frames + j
                frame = render(name, j / (seg_frames - 1), i / (total - 1), rng, styles[s], width, height)
                for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                    container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    os.replace(tmp, video)

    (out_dir / "labels.txt").write_text(LABELS_HEADER + "\n".join(CLASSES) + "\n", encoding="utf-8")
    rows = [f"{s * seg_frames},{(s + 1) * seg_frames - 1},{name}" for s, name in enumerate(order)]
    (out_dir / "truth.csv").write_text("start_frame,end_frame,label\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return {"video": str(video), "frames": total, "seconds": total / fps, "bytes": video.stat().st_size,
            "order": order}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", type=Path, default=HERE, help="where to write (default: assets/)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    info = make(args.out_dir, seed=args.seed)
    print(f"wrote {info['video']}: {info['frames']} frames, {info['seconds']:.0f} s, {info['bytes'] / 1e6:.2f} MB; "
          f"labels.txt and truth.csv beside it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
