"""Frame sources: `open_source(spec)` is the one place that decides what a source is.

    with open_source("clip.mp4") as src:          # or a folder, "rtsp://...", "http://...", 0 (webcam)
        for frame in src:                          # Frame(index, timestamp, image RGB uint8 [H,W,3], source)
            ...

- A video file (anything OpenCV reads) yields every decodable frame in order. Frame indices and
  timestamps come from the container's timestamps, so they stay aligned with the file even when a
  corrupt frame is skipped; frames whose decoding OpenCV reports as failed are counted in
  `stats.unreadable` (a decoder that silently drops a frame leaves only a gap in the indices).
  A file that ends before the frame count its container announced sets `stats.ended_early`.
- An image folder yields its images in natural name order (`img2` before `img10`), one frame
  each; files that do not decode are skipped and counted.
- Frames above `max_pixels` (width x height, `frames.MAX_PIXELS` by default) are refused before
  they are decoded whole where the format says its size first: an image's header, a container's
  declared frame size. Frames with a long side above `frames.MAX_SIDE` are scaled down at once.
- Statistics add up: `received = read + dropped + unreadable`.
- A network stream or a webcam is live: a reader thread keeps only the newest frame, so a slow
  consumer never builds a queue; every frame overwritten before use is counted in `stats.dropped`.
  A stream that stops delivering frames is reopened a few times with exponential back-off, then
  the iteration ends cleanly.

Every source is a context manager with `close()`. OpenCV decodes videos, PIL images; BGR->RGB
happens at this boundary. FFmpeg's and OpenCV's own console messages are silenced (failures come
back as one-line `UserError`s); set OPENCV_FFMPEG_LOGLEVEL / OPENCV_LOG_LEVEL to see them.
"""
from __future__ import annotations

import logging
import math
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from mstta.errors import UserError

from .frames import MAX_PIXELS, check_frame_size, decode_image, shrink

os.environ.setdefault("CV_IO_MAX_IMAGE_PIXELS", str(MAX_PIXELS))  # OpenCV's own image decoders
os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")  # FFmpeg: quiet (read when a capture opens)
import cv2  # noqa: E402  (after the environment default above)

if "OPENCV_LOG_LEVEL" not in os.environ:
    cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_SILENT)

log = logging.getLogger(__name__)

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")
STREAM_SCHEMES = ("rtsp", "rtsps", "rtmp", "rtmps", "http", "https", "udp", "tcp", "srt")
FALLBACK_FPS = 30.0          # when a file or stream reports no usable frame rate
FOLDER_FPS = 5.0             # an image folder is played at this many images per second
MAX_CONSECUTIVE_FAILS = 30   # a file whose decoder fails this often in a row has ended


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

    read: int = 0           # frames decoded and handed on
    dropped: int = 0        # live: frames replaced by a newer one (or left at the end) before they were used
    unreadable: int = 0     # frames that failed to decode or were too large / image files that did not decode
    received: int = 0       # every frame the source delivered or tried to (live: since it was opened)
    reconnects: int = 0     # live: successful reopenings after the stream stopped
    ended_early: bool = False  # file: ended before the frame count its container announced


class Source:
    """Base of every source: `kind`, `spec`, nominal `fps`, `live`, `stats`; iterate for Frames."""

    kind = "source"
    live = False
    length: int | None = None   # frames the source will yield, when it knows (files, folders)

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


# ---------------------------------------------------------------------------- classification
def classify_source(spec: str | int | Path) -> tuple[str, str | int]:
    """`(kind, value)` for a source spec: ("camera", 0), ("stream", url), ("folder", path), ("file", path)."""
    if isinstance(spec, bool):
        raise UserError(f"source {spec!r}: expected a path, URL or camera index")
    if isinstance(spec, int):
        if spec < 0:
            raise UserError(f"--camera {spec}: a camera index is an integer >= 0")
        return "camera", spec
    text = str(spec).strip()
    if not text:
        raise UserError("--video: empty source; pass a video file, an image folder or a stream URL")
    scheme = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://", text)
    if scheme:
        name = scheme.group(1).lower()
        if name == "file":
            text = text[len("file://"):]
        elif name in STREAM_SCHEMES:
            return "stream", text
        else:
            raise UserError(f"--video {text}: unsupported URL scheme '{name}'; use one of {', '.join(STREAM_SCHEMES)}")
    path = Path(text).expanduser()
    if path.is_dir():
        return "folder", str(path)
    if path.is_file():
        return "file", str(path)
    if text.isdigit():
        return "camera", int(text)
    raise UserError(f"--video {text}: no such file or folder; pass a video file, an image folder, "
                    "a stream URL (rtsp://, http://) or --camera INDEX")


def open_source(spec: str | int | Path, *, retries: int = 3, backoff: float = 0.5,
                connect_timeout: float = 10.0, max_pixels: int = MAX_PIXELS) -> Source:
    """Open `spec` (see the module doc); bad or unreachable sources raise a one-line UserError.

    `retries`/`backoff` (s, doubled each try) apply to live sources that stop mid-run;
    `connect_timeout` (s) bounds the wait for a live source's first frame; frames above
    `max_pixels` are refused.
    """
    kind, value = classify_source(spec)
    if kind == "file":
        return VideoFileSource(str(value), max_pixels=max_pixels)
    if kind == "folder":
        return ImageFolderSource(str(value), max_pixels=max_pixels)
    if kind == "camera":
        opener = lambda: cv2.VideoCapture(int(value))  # noqa: E731
        return LiveSource(f"camera {value}", opener, kind="camera", flag=f"--camera {value}", retries=retries,
                          backoff=backoff, connect_timeout=connect_timeout, max_pixels=max_pixels)
    timeout_ms = int(connect_timeout * 1000)
    params = [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, timeout_ms, cv2.CAP_PROP_READ_TIMEOUT_MSEC, timeout_ms]
    opener = lambda: cv2.VideoCapture(str(value), cv2.CAP_FFMPEG, params)  # noqa: E731
    return LiveSource(str(value), opener, kind="stream", flag=f"--video {value}", retries=retries,
                      backoff=backoff, connect_timeout=connect_timeout, max_pixels=max_pixels)


def _check_declared(cap: Any, max_pixels: int, what: str) -> None:
    """Refuse a capture whose declared frame size is above `max_pixels` (before decoding a frame)."""
    w, h = cap.get(cv2.CAP_PROP_FRAME_WIDTH), cap.get(cv2.CAP_PROP_FRAME_HEIGHT)
    if w and h and math.isfinite(w) and math.isfinite(h) and w * h > max_pixels:
        check_frame_size(int(w), int(h), max_pixels, what)


def _usable_fps(value: float) -> float | None:
    return float(value) if value and math.isfinite(value) and 0.0 < value <= 1000.0 else None


def _rgb(bgr: np.ndarray) -> np.ndarray:
    if bgr.ndim == 2:
        return cv2.cvtColor(bgr, cv2.COLOR_GRAY2RGB)
    if bgr.shape[2] == 4:
        return cv2.cvtColor(bgr, cv2.COLOR_BGRA2RGB)
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


# ---------------------------------------------------------------------------- files
class VideoFileSource(Source):
    """Every decodable frame of a video file, indexed by its position in the file."""

    kind = "file"

    def __init__(self, path: str, max_pixels: int = MAX_PIXELS):
        cap = cv2.VideoCapture(path)
        if not cap.isOpened():
            cap.release()
            raise UserError(f"--video {path}: not a video OpenCV can read (wrong format, unsupported codec "
                            "or a damaged file); pass a video file, an image folder or a stream URL")
        try:  # the container's declared frame size, before any frame is decoded
            _check_declared(cap, max_pixels, f"--video {path}")
        except UserError:
            cap.release()
            raise
        fps = _usable_fps(cap.get(cv2.CAP_PROP_FPS))
        if fps is None:
            log.warning("%s reports no frame rate; assuming %.0f fps", path, FALLBACK_FPS)
        super().__init__(path, fps or FALLBACK_FPS, max_pixels)
        count = cap.get(cv2.CAP_PROP_FRAME_COUNT)
        self.frame_count = int(count) if count and math.isfinite(count) and count > 0 else None
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
                return bgr, float(self._cap.get(cv2.CAP_PROP_POS_MSEC))
            fails += 1
            pos = self._cap.get(cv2.CAP_PROP_POS_FRAMES)
            at_end = self.frame_count is not None and pos >= self.frame_count
            if at_end or fails >= MAX_CONSECUTIVE_FAILS:   # the end of the file, not unreadable frames
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
            yield Frame(index, timestamp, _rgb(shrink(bgr)), self.spec)
            item = self._next_decoded()
        if self.frame_count is not None and last + 1 < self.frame_count:
            self.stats.ended_early = True
            log.warning("%s ended at frame %d of %d announced (truncated or damaged file?)",
                        self.spec, last + 1, self.frame_count)

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
        files = [p for p in Path(path).iterdir()
                 if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in IMAGE_EXTENSIONS]
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


# ---------------------------------------------------------------------------- live
class LiveSource(Source):
    """A webcam or network stream read on a thread; the newest frame wins, stale ones are dropped.

    `opener()` returns a cv2.VideoCapture-like object (isOpened/read/release). Drops and reads are
    counted from the first iteration on; the wait for the first frame is bounded by `connect_timeout`.
    """

    live = True

    def __init__(self, spec: str, opener: Callable[[], Any], *, kind: str = "stream", flag: str | None = None,
                 retries: int = 3, backoff: float = 0.5, connect_timeout: float = 10.0,
                 max_pixels: int = MAX_PIXELS):
        self.kind = kind
        self._flag = flag or spec
        self._opener = opener
        self._retries = retries
        self._backoff = backoff
        cap = opener()
        if not cap.isOpened():
            cap.release()
            what = "the camera could not be opened (no such device, or in use)" if kind == "camera" \
                else "could not connect to the stream (check the URL and that the server is up)"
            raise UserError(f"{self._flag}: {what}")
        try:
            _check_declared(cap, max_pixels, self._flag)
        except UserError:
            cap.release()
            raise
        super().__init__(spec, _usable_fps(cap.get(cv2.CAP_PROP_FPS)) or FALLBACK_FPS, max_pixels)
        self._error: str | None = None
        self._cap = cap
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._slot: tuple[np.ndarray, int, float] | None = None
        self._seq = 0
        self._t0: float | None = None
        self._ended = False
        self._thread = threading.Thread(target=self._reader, name=f"mstta-source-{kind}", daemon=True)
        self._thread.start()
        with self._cond:
            self._cond.wait_for(lambda: self._slot is not None or self._ended, timeout=connect_timeout)
            ok = self._slot is not None
        if not ok:
            self.close()
            if self._error:
                raise UserError(self._error)
            raise UserError(f"{self._flag}: opened, but no frame arrived within {connect_timeout:g} s; "
                            "check that the source is sending video")

    def _reader(self) -> None:
        attempts = 0
        try:
            while not self._stop.is_set():
                ok, bgr = self._cap.read() if self._cap is not None else (False, None)
                if ok and bgr is not None and bgr.size:
                    attempts = 0
                    if bgr.shape[0] * bgr.shape[1] > self.max_pixels:
                        with self._cond:
                            self.stats.received += 1
                            self.stats.unreadable += 1
                            self._error = (f"{self._flag}: a {bgr.shape[1]}x{bgr.shape[0]} frame is above the "
                                           f"limit of {self.max_pixels:,} pixels; raise --max-pixels or send smaller frames")
                        break
                    self._publish(bgr)
                    continue
                if attempts >= self._retries:
                    log.warning("%s: no frames after %d reconnect attempts; ending the stream",
                                self.spec, attempts)
                    break
                delay = self._backoff * (2 ** attempts)
                attempts += 1
                log.warning("%s: stream stopped; reconnecting in %.1f s (attempt %d of %d)",
                            self.spec, delay, attempts, self._retries)
                if self._stop.wait(delay):
                    break
                self._reopen()
        finally:
            with self._cond:
                self._ended = True
                self._cond.notify_all()

    def _reopen(self) -> None:
        if self._cap is not None:
            self._cap.release()
        try:
            cap = self._opener()
        except Exception as exc:  # noqa: BLE001 - a failed reopen is one more failed attempt
            log.warning("%s: reopen failed: %s", self.spec, exc)
            self._cap = None
            return
        if cap.isOpened():
            self.stats.reconnects += 1
            self._cap = cap
        else:
            cap.release()
            self._cap = None

    def _publish(self, bgr: np.ndarray) -> None:
        now = time.monotonic()
        bgr = shrink(bgr)
        with self._cond:
            if self._t0 is None:
                self._t0 = now
            self.stats.received += 1
            if self._slot is not None:
                self.stats.dropped += 1
            self._slot = (bgr, self._seq, now - self._t0)
            self._seq += 1
            self._cond.notify_all()

    def __iter__(self) -> Iterator[Frame]:
        while True:
            with self._cond:
                # A timed wait keeps Ctrl-C responsive on the main thread.
                while self._slot is None and not self._ended:
                    self._cond.wait(timeout=0.2)
                if self._slot is None:
                    if self._error:
                        raise UserError(self._error)
                    return
                bgr, seq, t = self._slot
                self._slot = None
                self.stats.read += 1
            yield Frame(seq, t, _rgb(bgr), self.spec)

    def close(self) -> None:
        if getattr(self, "_stop", None) is None:
            return
        self._stop.set()
        with self._cond:
            if self._slot is not None:   # received but never used: dropped
                self._slot = None
                self.stats.dropped += 1
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        if self._thread.is_alive():  # stuck in a blocking read: leave the capture to the daemon thread
            log.warning("%s: reader thread did not stop within 5 s", self.spec)
            return
        if self._cap is not None:
            self._cap.release()
            self._cap = None
