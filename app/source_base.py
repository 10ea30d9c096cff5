"""What every frame source shares: the `Frame` it yields, its `SourceStats`, the `Source` base
class, and the OpenCV helpers the file and live sources both use (declared size, frame rate, BGR->RGB).

OpenCV is imported here once, quiet: FFmpeg's and OpenCV's own console messages are silenced
(failures come back as one-line `UserError`s); set OPENCV_FFMPEG_LOGLEVEL / OPENCV_LOG_LEVEL to
see them.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from .frames import MAX_PIXELS, check_frame_size

# Read by OpenCV when it is imported / when a capture opens: set them before the import below.
os.environ.setdefault("CV_IO_MAX_IMAGE_PIXELS", str(MAX_PIXELS))  # OpenCV's own image decoders
os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")  # FFmpeg: quiet
import cv2  # after the environment defaults above (ruff's E402 is not selected)

if "OPENCV_LOG_LEVEL" not in os.environ:
    cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_SILENT)

FALLBACK_FPS = 30.0  # when a file or stream reports no usable frame rate
FPS_RANGE = (1 / 60, 1000.0)  # a usable declared rate: one frame a minute (time-lapse) .. 1000 fps


@dataclass
class Frame:
    """One decoded frame: index and timestamp (s) in its source, RGB uint8 image [H, W, 3]."""

    index: int
    timestamp: float
    image: np.ndarray
    source: str


@dataclass
class SourceStats:
    """What a source saw: `received = read + dropped + unreadable`."""

    read: int = 0  # frames decoded and handed on
    dropped: int = 0  # live: frames replaced by a newer one (or left at the end) before they were used
    unreadable: int = 0  # frames that failed to decode or were too large / image files that did not decode
    received: int = 0  # every frame the source delivered or tried to (live: since it was opened)
    reconnects: int = 0  # live: successful reopenings after the stream stopped
    ended_early: bool = False  # file: ended before the frame count its container announced


class Source:
    """Base of every source: `kind`, `spec`, nominal `fps`, `live`, `stats`; iterate for Frames."""

    kind = "source"
    live = False
    length: int | None = None  # frames the source will yield, when it knows (files, folders)

    def __init__(self, spec: str, fps: float, max_pixels: int = MAX_PIXELS):
        self.spec = spec
        self.fps = fps
        self.max_pixels = max_pixels
        self.stats = SourceStats()

    def __iter__(self) -> Iterator[Frame]:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the source holds (idempotent)."""

    def __enter__(self) -> "Source":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def check_declared(cap: Any, max_pixels: int, what: str) -> None:
    """Refuse a capture whose declared frame size is above `max_pixels` (before decoding a frame)."""
    w, h = cap.get(cv2.CAP_PROP_FRAME_WIDTH), cap.get(cv2.CAP_PROP_FRAME_HEIGHT)
    if w and h and math.isfinite(w) and math.isfinite(h) and w * h > max_pixels:
        check_frame_size(int(w), int(h), max_pixels, what)


def usable_fps(value: float) -> float | None:
    """A declared frame rate inside `FPS_RANGE`, else None (missing, absurd: 1/1,000,000 fps, NaN)."""
    lo, hi = FPS_RANGE
    return float(value) if value and math.isfinite(value) and lo <= value <= hi else None


def to_rgb(bgr: np.ndarray) -> np.ndarray:
    """OpenCV's BGR (or gray, BGRA) frame -> RGB uint8."""
    if bgr.ndim == 2:
        return cv2.cvtColor(bgr, cv2.COLOR_GRAY2RGB)
    if bgr.shape[2] == 4:
        return cv2.cvtColor(bgr, cv2.COLOR_BGRA2RGB)
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
