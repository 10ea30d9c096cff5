"""Frame sources: `open_source(spec)` is the one place that decides what a source is.

    with open_source("clip.mp4") as src:          # or a folder, "rtsp://...", "http://...", 0 (webcam)
        for frame in src:                          # Frame(index, timestamp, image RGB uint8 [H,W,3], source)
            ...

- A video file or an image folder is read to its end (`file_sources`: `VideoFileSource`,
  `ImageFolderSource`; frames in memory: `IterableSource`).
- A network stream or a webcam is live (`live_source.LiveSource`): a reader thread keeps only the
  newest frame, so a slow consumer never builds a queue.
- Frames above `max_pixels` (width x height, `frames.MAX_PIXELS` by default) are refused before
  they are decoded whole where the format says its size first: an image's header, a container's
  declared frame size. Frames with a long side above `frames.MAX_SIDE` are scaled down at once.
- Statistics add up: `received = read + dropped + unreadable` (`SourceStats`).

Every source is a context manager with `close()`; BGR->RGB happens at this boundary, and bad or
unreachable sources are one-line `UserError`s (`source_base` holds what the sources share).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from mstta.errors import UserError

from .file_sources import IMAGE_EXTENSIONS, ImageFolderSource, IterableSource, VideoFileSource
from .frames import MAX_PIXELS
from .live_source import LiveSource
from .source_base import FALLBACK_FPS, Frame, Source, SourceStats, cv2

__all__ = [
    "FALLBACK_FPS",
    "IMAGE_EXTENSIONS",
    "MAX_CAMERA_INDEX",
    "STREAM_SCHEMES",
    "Frame",
    "ImageFolderSource",
    "IterableSource",
    "LiveSource",
    "Source",
    "SourceStats",
    "VideoFileSource",
    "classify_source",
    "open_source",
]

STREAM_SCHEMES = ("rtsp", "rtsps", "rtmp", "rtmps", "http", "https", "udp", "tcp", "srt")
MAX_CAMERA_INDEX = 1023  # webcam indices are small (OpenCV's V4L2 backend: /dev/video0 ..)


def _camera(index: int, flag: str, shown: str | None = None) -> tuple[str, int]:
    if not 0 <= index <= MAX_CAMERA_INDEX:
        shown = shown if shown is not None else str(index)
        shown = shown if len(shown) <= 24 else f"{shown[:10]}...({len(shown)} digits)"
        raise UserError(
            f"{flag} {shown}: a camera index is an integer from 0 to {MAX_CAMERA_INDEX} (0 is the first webcam)"
        )
    return "camera", index


def classify_source(spec: str | int | Path) -> tuple[str, str | int]:
    """`(kind, value)` for a source spec: ("camera", 0), ("stream", url), ("folder", path), ("file", path)."""
    if isinstance(spec, bool):
        raise UserError(f"source {spec!r}: expected a path, URL or camera index")
    if isinstance(spec, int):
        return _camera(spec, "--camera")
    text = str(spec).strip()
    if not text:
        raise UserError("--video: empty source; pass a video file, an image folder or a stream URL")
    scheme = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://", text)
    if scheme:
        name = scheme.group(1).lower()
        if name == "file":
            text = text[len("file://") :]
        elif name in STREAM_SCHEMES:
            return "stream", text
        else:
            raise UserError(f"--video {text}: unsupported URL scheme '{name}'; use one of {', '.join(STREAM_SCHEMES)}")
    path = Path(text).expanduser()
    if path.is_dir():
        return "folder", str(path)
    if path.is_file():
        return "file", str(path)
    if text.isdigit() and text.isascii():
        return _camera(int(text) if len(text) <= 6 else MAX_CAMERA_INDEX + 1, "--video", shown=text)
    raise UserError(
        f"--video {text}: no such file or folder; pass a video file, an image folder, "
        "a stream URL (rtsp://, http://) or --camera INDEX"
    )


def open_source(
    spec: str | int | Path,
    *,
    retries: int = 3,
    backoff: float = 0.5,
    connect_timeout: float = 10.0,
    max_pixels: int = MAX_PIXELS,
) -> Source:
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
        return LiveSource(
            f"camera {value}",
            functools.partial(cv2.VideoCapture, int(value)),
            kind="camera",
            flag=f"--camera {value}",
            retries=retries,
            backoff=backoff,
            connect_timeout=connect_timeout,
            max_pixels=max_pixels,
        )
    timeout_ms = int(connect_timeout * 1000)
    params = [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, timeout_ms, cv2.CAP_PROP_READ_TIMEOUT_MSEC, timeout_ms]
    return LiveSource(
        str(value),
        functools.partial(cv2.VideoCapture, str(value), cv2.CAP_FFMPEG, params),
        kind="stream",
        flag=f"--video {value}",
        retries=retries,
        backoff=backoff,
        connect_timeout=connect_timeout,
        max_pixels=max_pixels,
    )
