"""Generated test media for the app tests: small videos written by OpenCV, damaged copies, image
folders, labels files, and the shared tiny CLIP model (random weights, no network)."""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Sequence

import cv2
import numpy as np

LABELS = ["red circle", "green square", "blue triangle"]
COLORS_RGB = {"red circle": (230, 40, 40), "green square": (40, 200, 60), "blue triangle": (40, 80, 230)}


def scene(i: int, w: int = 96, h: int = 64, label: str | None = None) -> np.ndarray:
    """An RGB uint8 frame: a coloured shape on a gradient, with the frame number drawn in."""
    label = label or LABELS[(i // 10) % len(LABELS)]
    img = np.zeros((h, w, 3), np.uint8)
    img[:] = np.linspace(30, 120, w, dtype=np.uint8)[None, :, None]
    color = COLORS_RGB[label]
    cx, cy, r = w // 2 + (i % 7) - 3, h // 2, min(w, h) // 3
    if "circle" in label:
        cv2.circle(img, (cx, cy), r, color, -1)
    elif "square" in label:
        cv2.rectangle(img, (cx - r, cy - r), (cx + r, cy + r), color, -1)
    else:
        pts = np.array([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], np.int32)
        cv2.fillPoly(img, [pts], color)
    cv2.putText(img, str(i), (2, h - 4), cv2.FONT_HERSHEY_SIMPLEX, 0.35, (255, 255, 255), 1)
    return img


def write_video(
    path: str | Path, n: int = 30, size: tuple[int, int] = (96, 64), fps: float = 30.0, fourcc: str = "MJPG"
) -> Path:
    """Write `n` scene frames with OpenCV (MJPG .avi by default: every frame its own JPEG)."""
    path = Path(path)
    w, h = size
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc), fps, (w, h))
    assert writer.isOpened(), f"OpenCV cannot write {fourcc} to {path}"
    for i in range(n):
        writer.write(cv2.cvtColor(scene(i, w, h), cv2.COLOR_RGB2BGR))
    writer.release()
    return path


def corrupt_mjpeg_frames(path: str | Path, indices: Sequence[int]) -> Path:
    """Zero out the whole JPEG of the given frames of an MJPG file (the decoder rejects them)."""
    path = Path(path)
    data = bytearray(path.read_bytes())
    starts = [i for i in range(len(data) - 2) if data[i] == 0xFF and data[i + 1] == 0xD8 and data[i + 2] == 0xFF]
    for k in indices:
        s = starts[k]
        e = data.index(b"\xff\xd9", s) + 2
        data[s:e] = bytes(e - s)
    path.write_bytes(bytes(data))
    return path


def truncate(path: str | Path, keep: float) -> Path:
    """Cut a file to the first `keep` fraction of its bytes."""
    path = Path(path)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    return path


def write_image_folder(
    folder: str | Path, n: int = 12, size: tuple[int, int] = (80, 60), broken: Sequence[int] = ()
) -> Path:
    """`frame1.png ... frameN.png` (natural order differs from string order), some broken on request."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        f = folder / f"frame{i + 1}.png"
        if i in broken:
            f.write_bytes(b"not a png at all")
        else:
            cv2.imwrite(str(f), cv2.cvtColor(scene(i, *size), cv2.COLOR_RGB2BGR))
    (folder / "notes.txt").write_text("not an image\n", encoding="utf-8")
    return folder


def write_labels(path: str | Path, names: Sequence[str] = LABELS) -> Path:
    path = Path(path)
    path.write_text("\n".join(names) + "\n", encoding="utf-8")
    return path


def read_video(path: str | Path) -> tuple[list[np.ndarray], list[float], float]:
    """Every frame (RGB) of a video with its time (s) and the stream's average rate, via PyAV."""
    import av

    with av.open(str(path)) as c:
        stream = c.streams.video[0]
        frames, times = [], []
        for f in c.decode(stream):
            frames.append(f.to_ndarray(format="rgb24"))
            times.append(float(f.time))
        return frames, times, float(stream.average_rate or 0)


class FakeCapture:
    """A cv2.VideoCapture stand-in: `n` frames, one every `period` s, then read() fails."""

    def __init__(self, n: int, period: float = 0.0, opened: bool = True, start: int = 0):
        self.n, self.period, self.opened, self.i, self.start = n, period, opened, 0, start

    def isOpened(self):  # OpenCV's method name
        return self.opened

    def read(self):
        if not self.opened or self.i >= self.n:
            time.sleep(0.001)
            return False, None
        time.sleep(self.period)
        img = np.full((8, 8, 3), (self.start + self.i) % 256, np.uint8)
        self.i += 1
        return True, img

    def get(self, prop):
        return 0.0

    def release(self):
        self.opened = False


def opener(*caps):
    """Returns each capture in turn, then unopenable ones."""
    queue = list(caps)
    return lambda: queue.pop(0) if queue else FakeCapture(0, opened=False)


@functools.lru_cache(maxsize=1)
def tiny_clip():
    """The random-weight `mstta-tiny` model (64x64 input), loaded once per test process: every call
    returns the same object (`functools.lru_cache`; `tests/test_app_pipeline.py` checks it), so a
    module-level or session-scoped fixture may hand it out freely. Do not modify it in a test."""
    from mstta.features.models import load_clip

    return load_clip("mstta-tiny", "none", device="cpu")
