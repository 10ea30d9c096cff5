"""The shifted-digits benchmark (docs/field.md, "The digits table"): scikit-learn's handwritten
digits, the held-out third that `mstta-digits` never trained on (assets/make_digits.py's split),
drawn as that model saw them (dark ink on light paper), under a few named shifts a person can
still read, written as `imagefolder:` datasets (one folder per class, `zero` .. `nine`):

    clean    as trained
    camera   a new camera: tinted paper, a smaller off-centre digit, specks of dirt, JPEG at quality 25
    rotate   turned by 25-40 degrees either way
    blur     Gaussian blur (sigma 8 px at 96 px high)
    photos   not digits: crops of scikit-learn's two sample photographs (classes `temple`, `flower`),
             the samples mixed into the streams in the open-set setting

Everything follows from SEED: `make_shifted_digits(root)` writes the same PNGs on every machine
with the same OpenCV; a folder already holding this version (its MANIFEST.json) is used as is.

    python -m mstta.data.digits out/field/features/shifted-digits
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from ..errors import UserError

SEED = 0
VERSION = 2
SHIFTS = ("clean", "camera", "rotate", "blur")
CLASSNAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
WIDTH, HEIGHT = 128, 96  # the training frames' 4:3 shape (384x288), a third of the size
PAPER, INK = 236.0, 24.0  # grey levels of the page and of full ink (as assets/make_digits.py)
DIGIT_FRACTION = 0.8
TEST_FRACTION, SPLIT_SEED = 1 / 3, 0  # assets/make_digits.py's fixed split: the test third
PHOTO_CROPS = 150  # per photograph


def test_digits() -> tuple[np.ndarray, np.ndarray]:
    """The held-out digits (images [n, 8, 8] in 0..16, labels [n]): the split the model never saw."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    _, xte, _, yte = train_test_split(
        d.images.astype(np.float32),
        d.target.astype(np.int64),
        test_size=TEST_FRACTION,
        stratify=d.target,
        random_state=SPLIT_SEED,
    )
    return xte, yte


def render(digit: np.ndarray, scale: float = 1.0, offset: tuple[int, int] = (0, 0)) -> np.ndarray:
    """An 8x8 digit as a grey float32 frame [H, W]: dark ink on light paper (`scale` of the training
    size, moved by `offset` (dx, dy) pixels from the centre)."""
    import cv2

    side = int(round(HEIGHT * DIGIT_FRACTION * scale))
    ink = np.zeros((HEIGHT, WIDTH), np.float32)
    y, x = (HEIGHT - side) // 2 + offset[1], (WIDTH - side) // 2 + offset[0]
    ink[y : y + side, x : x + side] = np.clip(
        cv2.resize(digit / 16.0, (side, side), interpolation=cv2.INTER_CUBIC), 0, 1
    )
    ink = cv2.GaussianBlur(ink, (0, 0), HEIGHT * DIGIT_FRACTION / 40)
    return PAPER - (PAPER - INK) * ink


def _grey_rgb(frame: np.ndarray) -> np.ndarray:
    return np.repeat(np.clip(frame, 0, 255).astype(np.uint8)[..., None], 3, axis=-1)


def shifted(digit: np.ndarray, shift: str, rng: np.random.Generator) -> np.ndarray:
    """One digit under a named shift -> RGB uint8 [H, W, 3]."""
    import cv2

    if shift == "clean":
        return _grey_rgb(render(digit))
    if shift == "rotate":
        angle = float(rng.uniform(25, 40) * rng.choice([-1, 1]))
        m = cv2.getRotationMatrix2D((WIDTH / 2, HEIGHT / 2), angle, 1.0)
        return _grey_rgb(cv2.warpAffine(render(digit), m, (WIDTH, HEIGHT), flags=cv2.INTER_LINEAR, borderValue=PAPER))
    if shift == "blur":
        return _grey_rgb(cv2.GaussianBlur(render(digit), (0, 0), 8.0))
    if shift == "camera":
        scale = 0.8  # smaller, off-centre by up to half the room
        room_x, room_y = (
            (int(WIDTH - HEIGHT * DIGIT_FRACTION * scale) // 2 - 2) // 2,
            (int(HEIGHT * (1 - DIGIT_FRACTION * scale)) // 2 - 2) // 2,
        )
        off = (int(rng.integers(-room_x, room_x + 1)), int(rng.integers(-room_y, room_y + 1)))
        grey = render(digit, scale, off) / PAPER  # 1 = paper, darker = ink
        tint = np.array([0.93, 0.86, 0.70]) * 255  # yellowed paper (RGB)
        rgb = grey[..., None] * tint[None, None, :]
        for _ in range(int(rng.integers(6, 12))):  # specks of dirt
            cy, cx, r = int(rng.integers(0, HEIGHT)), int(rng.integers(0, WIDTH)), int(rng.integers(1, 3))
            cv2.circle(rgb, (cx, cy), r, (60.0, 50.0, 40.0), -1)
        img = np.clip(rgb, 0, 255).astype(np.uint8)
        ok, buf = cv2.imencode(".jpg", img[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, 25])
        return cv2.imdecode(buf, cv2.IMREAD_COLOR)[..., ::-1].copy()
    raise UserError(f"unknown shift '{shift}'; choose one of: {', '.join(SHIFTS)}")


def photo_crops(rng: np.random.Generator) -> dict[str, list[np.ndarray]]:
    """Not-digit images: random crops of scikit-learn's two bundled sample photographs."""
    import cv2
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images  # china.jpg (a temple), flower.jpg
    out: dict[str, list[np.ndarray]] = {}
    for name, img in zip(("temple", "flower"), photos):
        h, w = img.shape[:2]
        crops = []
        for _ in range(PHOTO_CROPS):
            ch = int(rng.integers(h // 5, h // 2))
            cw = ch * WIDTH // HEIGHT
            y, x = int(rng.integers(0, h - ch)), int(rng.integers(0, w - cw))
            crops.append(
                cv2.resize(
                    np.ascontiguousarray(img[y : y + ch, x : x + cw]), (WIDTH, HEIGHT), interpolation=cv2.INTER_AREA
                )
            )
        out[name] = crops
    return out


def _write(folder: Path, images: dict[str, list[np.ndarray]]) -> None:
    import cv2

    for cls, imgs in images.items():
        (folder / cls).mkdir(parents=True, exist_ok=True)
        for i, img in enumerate(imgs):
            if not cv2.imwrite(str(folder / cls / f"{i:04d}.png"), img[..., ::-1]):
                raise UserError(f"{folder / cls}: could not write an image; check the free disk space")


def manifest() -> dict:
    return {
        "benchmark": "shifted-digits",
        "version": VERSION,
        "seed": SEED,
        "shifts": list(SHIFTS),
        "size": [WIDTH, HEIGHT],
        "mixed_in": "photos",
    }


def make_shifted_digits(root: str | Path, write: bool = True) -> Path:
    """Write the benchmark under `root` (a folder per shift and `photos`), unless `root` already holds
    this version; returns `root`. A `root` holding anything else is refused, never overwritten."""
    root = Path(root).expanduser()
    mf = root / "MANIFEST.json"
    if mf.is_file():
        try:
            if json.loads(mf.read_text(encoding="utf-8")) == manifest():
                return root
        except (OSError, ValueError):
            pass
    if root.exists():
        raise UserError(
            f"{root}: exists but does not hold this shifted-digits benchmark (version {VERSION}); "
            "move it away or pass another --store"
        )
    if not write:
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    try:
        xs, ys = test_digits()
        for i, shift in enumerate(SHIFTS):
            rng = np.random.default_rng([SEED, i])
            images: dict[str, list[np.ndarray]] = {c: [] for c in CLASSNAMES}
            for x, y in zip(xs, ys):
                images[CLASSNAMES[int(y)]].append(shifted(x, shift, rng))
            _write(work / shift, images)
        _write(work / "photos", photo_crops(np.random.default_rng([SEED, len(SHIFTS)])))
        (work / "MANIFEST.json").write_text(json.dumps(manifest(), indent=1) + "\n", encoding="utf-8")
        os.replace(work, root)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return root


if __name__ == "__main__":
    print(make_shifted_digits(sys.argv[1] if len(sys.argv) > 1 else "shifted-digits"))
