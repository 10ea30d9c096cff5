"""Sources that are read to their end: a video file, an image folder, frames in memory.

- A video file yields every decodable frame in order. Frame indices and timestamps come from the
  container's timestamps, so they stay aligned with the file even when a corrupt frame is skipped;
  frames whose decoding OpenCV reports as failed are counted in `stats.unreadable`. A file that
  declares no usable frame rate (none, or outside `FPS_RANGE`: 1/1,000,000 fps) is played at
  `FALLBACK_FPS` with its frames numbered in order. A file that ends before the frame count its
  container announced sets `stats.ended_early`.
- An image folder yields its images in natural name order (`img2` before `img10`), one frame each;
  files that do not decode are skipped and counted, and a folder none of whose images decodes is a
  one-line `UserError` once it has been read through.
"""

from __future__ import annotations

import logging
import math
import re
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

from mstta.data.common import IMAGE_EXTENSIONS as COMMON_IMAGE_EXTENSIONS
from mstta.errors import UserError

from .frames import MAX_PIXELS, check_frame_size, decode_image, shrink
from .source_base import FALLBACK_FPS, Frame, Source, check_declared, cv2, to_rgb, usable_fps

log = logging.getLogger(__name__)

IMAGE_EXTENSIONS = tuple(sorted(COMMON_IMAGE_EXTENSIONS))  # the engine's list (one list), in a fixed order
FOLDER_FPS = 5.0  # an image folder is played at this many images per second
MAX_CONSECUTIVE_FAILS = 30  # a file whose decoder fails this often in a row has ended


class VideoFileSource(Source):
    """Every decodable frame of a video file, indexed by its position in the file."""

    kind = "file"

    def __init__(self, path: str, max_pixels: int = MAX_PIXELS):
        cap = cv2.VideoCapture(path)
        if not cap.isOpened():
            cap.release()
            raise UserError(
                f"--video {path}: not a video OpenCV can read (wrong format, unsupported codec "
                "or a damaged file); pass a video file, an image folder or a stream URL"
            )
        try:  # the container's declared frame size, before any frame is decoded
            check_declared(cap, max_pixels, f"--video {path}")
        except UserError:
            cap.release()
            raise
        declared = cap.get(cv2.CAP_PROP_FPS)
        fps = usable_fps(declared)
        if fps is None:
            log.warning(
                "%s declares no usable frame rate (%s); playing it at %.0f fps, frames numbered in order",
                path,
                f"{declared:g} fps" if declared and math.isfinite(declared) else "none",
                FALLBACK_FPS,
            )
        super().__init__(path, fps or FALLBACK_FPS, max_pixels)
        self.timed = fps is not None  # the container's timestamps are usable for indices and times
        count = cap.get(cv2.CAP_PROP_FRAME_COUNT)
        self.frame_count = int(count) if self.timed and count and math.isfinite(count) and count > 0 else None
        self.length = self.frame_count
        self._cap = cap
        self._first = self._next_decoded()
        if self._first is None:
            self.close()
            raise UserError(f"--video {path}: no frame could be decoded (empty, truncated or not a video)")

    def _next_decoded(self) -> tuple[np.ndarray, float] | None:
        """The next frame that decodes, with its position in ms; failures before it are unreadable."""
        fails = 0
        while True:
            ok, bgr = self._cap.read()
            if ok and bgr is not None and bgr.size:
                self.stats.unreadable += fails
                self.stats.received += fails + 1
                check_frame_size(bgr.shape[1], bgr.shape[0], self.max_pixels, f"--video {self.spec}")
                return bgr, float(self._cap.get(cv2.CAP_PROP_POS_MSEC)) if self.timed else -1.0
            fails += 1
            pos = self._cap.get(cv2.CAP_PROP_POS_FRAMES)
            at_end = self.frame_count is not None and pos >= self.frame_count
            if at_end or fails >= MAX_CONSECUTIVE_FAILS:  # the end of the file, not unreadable frames
                return None

    def __iter__(self) -> Iterator[Frame]:
        if self._cap is None:
            return
        item, last = self._first, -1
        self._first = None
        while item is not None:
            bgr, ms = item
            # Position from the container's timestamp keeps indices aligned after skipped frames;
            # without usable timestamps (missing, not increasing) frames are numbered in order.
            index = int(round(ms * self.fps / 1000.0)) if ms >= 0 else -1
            if index > last:
                timestamp = ms / 1000.0
            else:
                index = last + 1
                timestamp = index / self.fps
            last = index
            self.stats.read += 1
            yield Frame(index, timestamp, to_rgb(shrink(bgr)), self.spec)
            item = self._next_decoded()
        if self.frame_count is not None and last + 1 < self.frame_count:
            self.stats.ended_early = True
            log.warning(
                "%s ended at frame %d of %d announced (truncated or damaged file?)",
                self.spec,
                last + 1,
                self.frame_count,
            )

    def close(self) -> None:
        if self._cap is not None:
            self._cap.release()
            self._cap = None


def _natural_key(path: Path) -> list[Any]:
    return [int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", path.name)]


class ImageFolderSource(Source):
    """The images of a folder in natural name order; an image is one frame at FOLDER_FPS."""

    kind = "folder"

    def __init__(self, path: str, max_pixels: int = MAX_PIXELS):
        files = [
            p
            for p in Path(path).iterdir()
            if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in IMAGE_EXTENSIONS
        ]
        if not files:
            raise UserError(f"--video {path}: the folder holds no images ({', '.join(IMAGE_EXTENSIONS)})")
        super().__init__(path, FOLDER_FPS, max_pixels)
        self.files = sorted(files, key=_natural_key)
        self.length = len(self.files)

    def __iter__(self) -> Iterator[Frame]:
        for i, f in enumerate(self.files):
            self.stats.received += 1
            try:  # an image above the pixel limit is refused from its header (a one-line UserError)
                rgb = decode_image(f, self.max_pixels, what=f"--video {f}")
            except UserError as exc:
                if "above the limit" in str(exc):
                    raise
                self.stats.unreadable += 1
                log.warning("skipping %s: not a readable image", f)
                continue
            self.stats.read += 1
            yield Frame(i, i / self.fps, shrink(rgb), str(f))
        if self.stats.read == 0 and self.stats.received == len(self.files):
            raise UserError(
                f"--video {self.spec}: none of its {len(self.files)} image files could be decoded "
                "(damaged, or not images); pass a folder of readable images"
            )


class IterableSource(Source):
    """Frames from any iterable of RGB uint8 images (in-memory video, tests, benchmarks)."""

    kind = "memory"

    def __init__(self, images: Iterable[np.ndarray], fps: float = FALLBACK_FPS, name: str = "<memory>"):
        super().__init__(name, fps)
        self._images = images

    def __iter__(self) -> Iterator[Frame]:
        for i, image in enumerate(self._images):
            self.stats.received += 1
            self.stats.read += 1
            yield Frame(i, i / self.fps, image, self.spec)
