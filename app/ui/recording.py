"""A run's downloads: the annotated MP4 (H.264, browser-playable) and the JSONL prediction log,
written frame by frame with the headless demo's own sinks (`app.sinks`) into the session's folder.

    folder = Downloads(root)                             # one per session, under the server's root
    rec = folder.start("clip", fps=30.0)                  # a new run: the last run's files go
    rec.write(frame, result, truth, picture)              # every processed frame
    paths = rec.finish()                                  # [mp4, jsonl]: finished, ready to download
    folder.close()                                        # the session ends: its folder goes

The sinks write hidden temp files and rename them into place when closed, so a download is always
a whole file: a stopped run is finished like a completed one. The server's root folder is removed
at exit.
"""
from __future__ import annotations

import atexit
import contextlib
import logging
import re
import shutil
import tempfile
import threading
from pathlib import Path

import numpy as np

from ..sinks import JsonlSink, VideoSink, prediction_row
from ..sources import Frame

log = logging.getLogger(__name__)

_root_lock = threading.Lock()
_root: Path | None = None


def downloads_root() -> Path:
    """This server's folder for run downloads (in the system's temp folder; removed at exit)."""
    global _root
    with _root_lock:
        if _root is None or not _root.is_dir():
            _root = Path(tempfile.mkdtemp(prefix="mstta-ui-downloads-"))
            atexit.register(shutil.rmtree, _root, True)
        return _root


def safe_stem(name: str) -> str:
    """A file-name stem from a video's name: letters, digits, '-' and '_' only, at most 60."""
    stem = re.sub(r"[^A-Za-z0-9_-]+", "_", Path(name).stem).strip("_")[:60]
    return stem or "run"


class Recording:
    """One run's annotated video and prediction log, being written."""

    def __init__(self, folder: Path, stem: str, fps: float):
        self.video = VideoSink(folder / f"{stem}-annotated.mp4", fps=max(fps, 1e-3))
        self.log = JsonlSink(folder / f"{stem}-predictions.jsonl")
        self.rows = 0

    def write(self, frame: Frame, result, truth: str | None, picture: np.ndarray) -> None:
        """Record one processed frame: its JSONL row and its annotated picture."""
        self.log.write(prediction_row(frame, result, truth))
        self.video.write(picture, frame.timestamp)
        self.rows += 1

    def finish(self) -> list[str]:
        """Close both files; their paths (none when no frame was processed)."""
        self.video.close()
        self.log.close()
        if not self.rows:
            Path(self.log.path).unlink(missing_ok=True)
            return []
        return [str(self.video.path), str(self.log.path)]


class Downloads:
    """A session's folder of downloads: the files of its last run only."""

    def __init__(self, root: Path | None = None):
        self.root = root
        self.folder: Path | None = None
        self.current: Recording | None = None
        self.files: list[str] = []

    def start(self, name: str, fps: float) -> Recording:
        """A new run: the previous run's files are deleted, a new recording starts."""
        self.discard()
        if self.folder is None:
            self.folder = Path(tempfile.mkdtemp(prefix="session-", dir=self.root or downloads_root()))
        self.current = Recording(self.folder, safe_stem(name), fps)
        return self.current

    def finish(self) -> list[str]:
        """The current run ended: its files are the session's downloads."""
        rec, self.current = self.current, None
        if rec is not None:
            try:
                self.files = rec.finish()
            except Exception as exc:  # a failed encoder loses the downloads, not the run
                log.warning("the run's downloads could not be finished: %s", exc)
                self.files = []
        return self.files

    def discard(self) -> None:
        """Drop the run being written (if any) and the last run's files."""
        if self.current is not None:
            with contextlib.suppress(Exception):
                self.current.finish()
            self.current = None
        for path in self.files:
            Path(path).unlink(missing_ok=True)
        if self.folder is not None:
            for leftover in self.folder.iterdir():
                leftover.unlink(missing_ok=True)
        self.files = []

    def close(self) -> None:
        """The session ended: remove its folder."""
        self.discard()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
