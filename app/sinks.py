"""Output sinks: the annotated H.264 video and the JSONL prediction log.

Both are context managers that write to a hidden temp file beside the target and rename it into
place in `__exit__`, on success and on interruption alike (Ctrl-C, a source that died): the file
that appears is always complete and valid, holding every frame written so far; a second Ctrl-C
during that finalisation is held back until it is done. Missing parent folders are created.
A sink that received no frame leaves no file. A sink whose own writing fails (disk full, a file
size limit) removes its temp file and raises a one-line `UserError` naming the flag and the file:
nothing truncated ever appears under the final name.

The video goes through PyAV (libx264, yuv420p, faststart), which browsers play; OpenCV's wheel
cannot encode H.264. Frame times come from the source's timestamps (millisecond pts), so a live
stream with an uneven rate plays back at its real pace.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import signal
import sys
import threading
from fractions import Fraction
from pathlib import Path
from typing import IO, Any, Iterator

import numpy as np

from mstta.atomic import temp_path
from mstta.errors import UserError
from mstta.safety import STDOUT

from .progress import plural
from .session import FrameResult
from .sources import Frame

log = logging.getLogger(__name__)

VIDEO_SUFFIXES = {".mp4": "mp4", ".mov": "mov", ".mkv": "matroska"}
TIME_BASE = Fraction(1, 1000)
_SHIELDED = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def shield_interrupts() -> Iterator[None]:
    """Hold SIGINT/SIGTERM back during a block (main thread only), then deliver them to the
    handlers in place before it (Ctrl-C raises KeyboardInterrupt after the block)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: caught.append(signum)) for sig in _SHIELDED}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    for sig in dict.fromkeys(caught):
        signal.raise_signal(sig)


def check_output(path: str | Path, flag: str, suffixes: tuple[str, ...] | None = None) -> Path:
    """A writable output path: right suffix, not a folder, parent creatable. One-line errors."""
    p = Path(path)
    if suffixes is not None and p.suffix.lower() not in suffixes:
        raise UserError(f"{flag} {p}: must end in {' or '.join(suffixes)}")
    if p.is_dir():
        raise UserError(f"{flag} {p}: is a folder; pass a file name")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{flag} {p}: cannot create its folder ({exc.strerror or exc})") from None
    if not os.access(p.parent, os.W_OK):
        raise UserError(f"{flag} {p}: folder {p.parent} is not writable")
    return p


def write_failed(flag: str, path: Path, exc: BaseException, done: int) -> UserError:
    """The one-line error of an output that could not be written whole (its temp file is gone)."""
    reason = getattr(exc, "strerror", None) or str(exc) or exc.__class__.__name__
    return UserError(
        f"{flag} {path}: writing failed after {done} {plural(done, 'frame')} ({reason}); nothing was "
        "kept under that name; check the free disk space or pass another path"
    )


def _temp_beside(path: Path, sink) -> Path:
    """A hidden temp file beside `path` (`.<name>.<pid>-<token>.part<suffix>`, which
    `mstta.atomic.sweep_stale` removes once its process is gone), named in `sink._tmp` before it
    exists (an interrupt then finds it for the cleanup)."""
    return temp_path(path, f".part{path.suffix}", record=lambda t: setattr(sink, "_tmp", t))


class VideoSink:
    """Annotated frames -> an H.264 video at `path` (.mp4/.mov/.mkv); `write(image, timestamp)`.

    The container opens on the first frame (its size sets the video size; later frames of another
    size are letterboxed into it). A run that wrote no frame leaves no file.
    """

    def __init__(self, path: str | Path, fps: float = 5.0, crf: int = 23, preset: str = "veryfast"):
        self.path = check_output(path, "--out", tuple(VIDEO_SUFFIXES))
        self.fps = fps
        self.options = {"crf": str(crf), "preset": preset}
        self.frames = 0
        self._tmp: Path | None = None
        self._container: Any = None
        self._stream: Any = None
        self._size: tuple[int, int] | None = None
        self._last_pts = -1

    def __enter__(self) -> "VideoSink":
        return self

    def _open(self, width: int, height: int) -> None:
        import av

        self._tmp = _temp_beside(self.path, self)
        self._container = av.open(
            str(self._tmp),
            mode="w",
            format=VIDEO_SUFFIXES[self.path.suffix.lower()],
            options={"movflags": "+faststart"},
        )
        stream = self._container.add_stream(
            "libx264", rate=Fraction(max(self.fps, 1e-3)).limit_denominator(1000), options=self.options
        )
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.time_base = TIME_BASE
        stream.codec_context.time_base = TIME_BASE
        self._stream, self._size = stream, (width, height)

    def _fit(self, image: np.ndarray) -> np.ndarray:
        h, w = image.shape[:2]
        if self._size is None:
            return np.pad(image, ((0, h % 2), (0, w % 2), (0, 0))) if (h % 2 or w % 2) else image
        tw, th = self._size
        if (w, h) == (tw, th):
            return image
        import cv2

        scale = min(tw / w, th / h)
        nw, nh = max(1, int(w * scale)), max(1, int(h * scale))
        out = np.zeros((th, tw, 3), np.uint8)
        top, left = (th - nh) // 2, (tw - nw) // 2
        out[top : top + nh, left : left + nw] = cv2.resize(image, (nw, nh), interpolation=cv2.INTER_AREA)
        return out

    def write(self, image: np.ndarray, timestamp: float | None = None) -> None:
        """Append one RGB uint8 frame shown at `timestamp` s (default: frames / fps)."""
        import av

        image = self._fit(np.ascontiguousarray(image, dtype=np.uint8))
        t = self.frames / self.fps if timestamp is None else timestamp
        pts = max(int(round(t * 1000)), self._last_pts + 1)
        try:
            if self._container is None:
                self._open(image.shape[1], image.shape[0])
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            frame.pts, frame.time_base = pts, TIME_BASE
            for packet in self._stream.encode(frame):
                self._container.mux(packet)
        except (OSError, av.FFmpegError) as exc:  # disk full, a file size limit: the file is not whole
            self._discard()
            raise write_failed("--out", self.path, exc, self.frames) from None
        self._last_pts = pts
        self.frames += 1

    def _discard(self) -> None:
        container, self._container = self._container, None
        if container is not None:
            with contextlib.suppress(Exception):
                container.close()
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)

    def close(self) -> None:
        """Flush the encoder, finish the container and rename it into place (idempotent)."""
        if self._container is None:
            return
        container, tmp = self._container, self._tmp
        try:
            with shield_interrupts():
                for packet in self._stream.encode():
                    container.mux(packet)
                container.close()
                self._container = None
                os.replace(tmp, self.path)
        except BaseException as exc:
            self._discard()
            import av

            if isinstance(exc, (OSError, av.FFmpegError)):
                raise write_failed("--out", self.path, exc, self.frames) from None
            raise
        log.info("wrote %s (%d frames)", self.path, self.frames)

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _round(x: float, nd: int = 4) -> float | None:
    """A rounded number for the log; None (JSON null) for NaN or an infinity, which JSON cannot hold."""
    x = float(x)
    return float(round(x, nd)) if math.isfinite(x) else None


def prediction_row(frame: Frame, result: FrameResult, truth: str | None = None) -> dict[str, Any]:
    """The JSONL record of one processed frame (schema in `JsonlSink`'s doc)."""
    row: dict[str, Any] = {
        "frame": int(frame.index),
        "timestamp": _round(frame.timestamp, 3),
        "clip": [{"label": s.label, "prob": _round(s.prob)} for s in result.clip_topk],
        "tta": [{"label": s.label, "prob": _round(s.prob)} for s in result.tta_topk],
        "method": result.method,
        "disagree": result.disagree,
        "entropy": _round(result.entropy),
        "cache_size": result.cache_size,
        "bank_size": result.bank_rows,  # the key users know; a count of rows, not the limit
        "latency_ms": _round(result.latency_ms, 2),
        "methods": [
            {
                "method": m.method,
                "topk": [{"label": s.label, "prob": _round(s.prob)} for s in m.topk],
                "ms": _round(m.ms, 2),
                "cut": m.cut,  # its forgetting reset its state at this frame (a detected scene cut)
            }
            for m in result.methods
        ],
    }
    if truth is not None:
        row["truth"] = truth
    return row


class JsonlSink:
    """One JSON object per line at `path`; `write(row)`. Rows from `prediction_row`:

    frame (source index), timestamp (s), clip / tta (top-k lists of {label, prob}, best first),
    method, disagree (bool), entropy (CLIP, nats), cache_size, bank_size, latency_ms, methods (every
    raced method, the first = tta: {method, topk [{label, prob}], ms = its own step, cut = its
    forgetting reset its state at this frame: a detected scene cut, `--forget detect`}), and truth
    (class name) when a truth file labels the frame. `path` "-" writes the lines to standard output
    as they come.
    """

    def __init__(self, path: str | Path):
        self.rows = 0
        if str(path) == STDOUT:
            self.path, self._tmp, self._fh = Path(STDOUT), None, None
            self._stdout = True
            return
        self._stdout = False
        self.path = check_output(path, "--log")
        self._tmp = _temp_beside(self.path, self)
        self._fh: IO[str] | None = open(self._tmp, "w", encoding="utf-8")

    def __enter__(self) -> "JsonlSink":
        return self

    def write(self, row: dict[str, Any]) -> None:
        line = json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n"
        if self._stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
        elif self._fh is not None:
            try:
                self._fh.write(line)
            except OSError as exc:  # part of a line may be on disk: the file is not whole
                self._discard()
                raise write_failed("--log", self.path, exc, self.rows) from None
        self.rows += 1

    def _discard(self) -> None:
        fh, self._fh = self._fh, None
        if fh is not None:
            with contextlib.suppress(OSError):
                fh.close()
        self._tmp.unlink(missing_ok=True)

    def close(self) -> None:
        """Flush, sync and rename into place (idempotent); no rows: no file."""
        if self._fh is None:
            return
        if self.rows == 0:
            self._discard()
            return
        fh = self._fh
        try:
            with shield_interrupts():
                fh.flush()
                os.fsync(fh.fileno())
                fh.close()
                self._fh = None
                os.replace(self._tmp, self.path)
        except BaseException as exc:
            self._discard()
            if isinstance(exc, OSError):
                raise write_failed("--log", self.path, exc, self.rows) from None
            raise
        log.info("wrote %s (%d rows)", self.path, self.rows)

    def __exit__(self, *exc: Any) -> None:
        self.close()
