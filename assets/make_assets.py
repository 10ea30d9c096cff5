"""Make the demo assets from real photographs: `demo.mp4`, `labels.txt` and `truth.csv` (deterministic).

    pip install -e '.[assets]'               # scikit-image: only to regenerate, never at run time
    python assets/make_assets.py             # writes into assets/

The clip shows the photographs scikit-image ships in its wheel (`skimage.data`; sources and
licences in assets/README.md), one at a time, each twice, with a slow pan and zoom over it. Over
the whole clip the picture shifts as a camera at dusk would: it darkens, takes a blue cast,
blurs and gets noisier, so zero-shot CLIP has a distribution shift to cope with and test-time
adaptation something to absorb. `truth.csv` gives each segment's frame range and class.
H.264 (libx264, yuv420p, faststart) written with PyAV; 384x288 at 24 fps; 45 s; a few MB.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import cv2
import numpy as np

HERE = Path(__file__).resolve().parent
# class name (what CLIP is asked) -> the skimage.data function that returns the photograph
PHOTOS = {
    "cat": "chelsea",
    "cup of coffee": "coffee",
    "rocket": "rocket",
    "astronaut": "astronaut",
    "galaxies": "hubble_deep_field",
    "retina": "retina",
    "brick wall": "brick",
    "coins": "coins",
    "clock": "clock",
}
LABELS_HEADER = (
    "# Classes shown in demo.mp4 (scikit-image's sample photographs, made by assets/make_assets.py);\n"
    "# one name per line.\n"
)


def load_photos() -> dict[str, np.ndarray]:
    """Class name -> RGB uint8 photograph from `skimage.data` (grey ones stacked to RGB)."""
    try:
        from skimage import data
    except ImportError:
        sys.exit("make_assets.py needs scikit-image: pip install -e '.[assets]'")
    out = {}
    for name, fn in PHOTOS.items():
        img = np.asarray(getattr(data, fn)())
        if img.ndim == 2:
            img = np.stack([img] * 3, axis=-1)
        out[name] = np.ascontiguousarray(img[..., :3]).astype(np.uint8)
    return out


def _smooth(t: float) -> float:
    return t * t * (3.0 - 2.0 * t)


def camera_path(rng: np.random.Generator, width: int, height: int, aspect: float) -> tuple[np.ndarray, np.ndarray]:
    """Start and end boxes (cx, cy, w) of a slow pan and zoom inside a photo of `width` x `height`."""
    full = min(width, height * aspect)  # widest box of the clip's aspect that fits
    boxes = []
    for zoom in rng.permutation([rng.uniform(0.92, 1.0), rng.uniform(0.6, 0.75)]):
        w = full * zoom
        h = w / aspect
        cx = rng.uniform(w / 2, width - w / 2) if width > w else width / 2
        cy = rng.uniform(h / 2, height - h / 2) if height > h else height / 2
        boxes.append((cx, cy, w))
    return np.array(boxes[0]), np.array(boxes[1])


def view(photo: np.ndarray, box: np.ndarray, width: int, height: int) -> np.ndarray:
    """The box (cx, cy, w) of the photo, resampled to width x height (area/linear interpolation)."""
    cx, cy, w = box
    scale = width / w
    m = np.array([[scale, 0, width / 2 - cx * scale], [0, scale, height / 2 - cy * scale]], np.float32)
    interp = cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR
    return cv2.warpAffine(photo, m, (width, height), flags=interp, borderMode=cv2.BORDER_REFLECT)


def dusk(img: np.ndarray, shift: float, rng: np.random.Generator) -> np.ndarray:
    """The distribution shift at strength `shift` (0..1): darker, bluer, blurrier, noisier."""
    out = img.astype(np.float32)
    out *= 1.0 - 0.5 * shift  # light fades
    out[..., 0] *= 1.0 - 0.35 * shift  # a dusk cast: less red and green, more blue
    out[..., 1] *= 1.0 - 0.15 * shift
    out[..., 2] += 30.0 * shift
    sigma = 2.2 * shift
    if sigma > 0.3:
        out = cv2.GaussianBlur(out, (0, 0), sigma)
    out += rng.normal(0.0, 14.0 * shift, out.shape[:2])[..., None].astype(np.float32)  # luma sensor noise
    out += rng.normal(0.0, 5.0 * shift, out.shape).astype(np.float32)  # and a little chroma
    return np.clip(out, 0, 255).astype(np.uint8)


def make(
    out_dir: Path,
    width: int = 384,
    height: int = 288,
    fps: int = 24,
    segment_s: float = 2.5,
    repeats: int = 2,
    crf: int = 28,
    seed: int = 0,
) -> dict:
    import av

    photos = load_photos()
    classes = list(PHOTOS)
    rng = np.random.default_rng(seed)
    order: list[str] = []
    for _ in range(repeats):
        order += [classes[i] for i in rng.permutation(len(classes))]
    seg_frames = int(round(segment_s * fps))
    total = seg_frames * len(order)
    out_dir.mkdir(parents=True, exist_ok=True)

    video = out_dir / "demo.mp4"
    tmp = out_dir / f".demo.mp4.{os.getpid()}-00000000.part.mp4"
    try:
        with av.open(str(tmp), "w", format="mp4", options={"movflags": "+faststart"}) as container:
            stream = container.add_stream("libx264", rate=fps, options={"crf": str(crf), "preset": "slow"})
            stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
            for s, name in enumerate(order):
                photo = photos[name]
                start, end = camera_path(rng, photo.shape[1], photo.shape[0], width / height)
                for j in range(seg_frames):
                    i = s * seg_frames + j
                    box = start + (end - start) * _smooth(j / (seg_frames - 1))
                    frame = dusk(view(photo, box, width, height), i / (total - 1), rng)
                    for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                        container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
        os.replace(tmp, video)
    finally:
        tmp.unlink(missing_ok=True)

    (out_dir / "labels.txt").write_text(LABELS_HEADER + "\n".join(classes) + "\n", encoding="utf-8")
    rows = [f"{s * seg_frames},{(s + 1) * seg_frames - 1},{name}" for s, name in enumerate(order)]
    (out_dir / "truth.csv").write_text("start_frame,end_frame,label\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return {"video": str(video), "frames": total, "seconds": total / fps, "bytes": video.stat().st_size, "order": order}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", type=Path, default=HERE, help="where to write (default: assets/)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    info = make(args.out_dir, seed=args.seed)
    print(
        f"wrote {info['video']}: {info['frames']} frames, {info['seconds']:.0f} s, {info['bytes'] / 1e6:.2f} MB; "
        f"labels.txt and truth.csv beside it"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
