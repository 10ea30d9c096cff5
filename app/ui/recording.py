"""A run's downloads: the annotated MP4 (H.264, browser-playable) and the JSONL prediction log,
written frame by frame with the headless demo's own sinks (`app.sinks`) into the session's folder.

    folder = Downloads(root)                             # one per session, under the server's root
    rec = folder.start("clip", fps=30.0)                  # a new run: its own folder and files
    picture = rec.write(step)                             # every processed frame (a pipeline.Step)
    paths = folder.finish(rec)                            # [mp4, jsonl] of that run; the run before's go
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
from typing import Any

import numpy as np

from ..record import FrameRecord
from ..sinks import JsonlSink, VideoSink

log = logging.getLogger(__name__)

_root_lock = threading.Lock()
_root: Path | None = None


def downloads_root() -> Path:
    """This server's folder for run downloads, removed at exit. It lies in Gradio's upload folder,
    so Gradio serves a download in place instead of copying it: deleting a run's files (a newer run,
    the session's end) makes their URLs stop working at once."""
    from .gradio_patches import served_folder

    global _root
    with _root_lock:
        if _root is None or not _root.is_dir():
            base = served_folder()
            base.mkdir(parents=True, exist_ok=True)
            _root = Path(tempfile.mkdtemp(prefix="mstta-ui-downloads-", dir=base))
            atexit.register(shutil.rmtree, _root, True)
        return _root


def safe_stem(name: str) -> str:
    """A file-name stem from a video's name: letters, digits, '-' and '_' only, at most 60."""
    stem = re.sub(r"[^A-Za-z0-9_-]+", "_", Path(name).stem).strip("_")[:60]
    return stem or "run"


KEEP_FINISHED = 2  # finished runs whose files a session keeps: the one offered, and one before it (its
# caller may still be fetching them when a newer run ends first)


class Recording:
    """One run's annotated video and prediction log, being written (in the run's own folder)."""

    def __init__(self, folder: Path, stem: str, fps: float, **record: Any):
        self.folder = folder
        self.video = VideoSink(folder / f"{stem}-annotated.mp4", fps=max(fps, 1e-3))
        self.log = JsonlSink(folder / f"{stem}-predictions.jsonl")
        self.record = FrameRecord(log=self.log, video=self.video, picture=True, **record)
        self.closed = False
        self.number = 0  # the session's run number (order asked for)

    @property
    def rows(self) -> int:
        return self.record.rows

    def write(self, step: Any) -> np.ndarray:
        """Record one processed frame (a `pipeline.Step`) with the run's one per-frame record
        (`app.record.FrameRecord`: counts, JSONL row, MP4 frame); its annotated picture."""
        return self.record.write(step)

    def finish(self) -> list[str]:
        """Close both files; their paths (none when no frame was processed)."""
        if self.closed:
            return [str(self.video.path), str(self.log.path)] if self.rows else []
        self.closed = True
        self.video.close()
        self.log.close()
        if not self.rows:
            shutil.rmtree(self.folder, ignore_errors=True)
            return []
        return [str(self.video.path), str(self.log.path)]

    def delete(self) -> None:
        with contextlib.suppress(Exception):
            self.finish()
        shutil.rmtree(self.folder, ignore_errors=True)


class Downloads:
    """A session's downloads: every run writes its own `Recording` (its own folder, so two runs of
    one session never share a file), and the session offers the files of its last finished run.

        rec = downloads.start("clip", fps=30.0)     # a new run's recording
        rec.write(...); files = downloads.finish(rec)   # its files; older finished runs' are deleted
    """

    def __init__(self, root: Path | None = None):
        self.root = root
        self.folder: Path | None = None
        self.running: list[Recording] = []
        self.last: Recording | None = None
        self.finished: list[Recording] = []  # the newest finished runs (the last one is offered)
        self.files: list[str] = []
        self._runs = 0
        self._lock = threading.Lock()

    @property
    def current(self) -> Recording | None:
        """The newest run being written (None when none is)."""
        return self.running[-1] if self.running else None

    def start(self, name: str, fps: float, **record: Any) -> Recording:
        """A new run's recording, in a folder of its own under the session's; `record` are the
        `FrameRecord`'s options (counts, mark, bank_limit)."""
        with self._lock:
            if self.folder is None:
                self.folder = Path(tempfile.mkdtemp(prefix="session-", dir=self.root or downloads_root()))
            self._runs += 1
            run_folder = self.folder / f"run-{self._runs}"
            run_folder.mkdir()
            rec = Recording(run_folder, safe_stem(name), fps, **record)
            rec.number = self._runs
            self.running.append(rec)
            return rec

    def finish(self, rec: Recording | None = None) -> list[str]:
        """Run `rec` (default: the newest) ended: its files are the session's downloads, the previous
        finished run's are deleted. The files `rec` wrote: [mp4, jsonl], or [] (no frame, or a failure)."""
        with self._lock:
            rec = rec if rec is not None else self.current
            if rec is None:
                return self.files
            if rec.closed and rec not in self.running:  # finished before: the same files, once
                return rec.finish() if rec in self.finished else []
            if rec in self.running:
                self.running.remove(rec)
            try:
                files = rec.finish()
            except Exception as exc:  # a failed encoder loses the downloads, not the run
                log.warning("the run's downloads could not be finished: %s", exc)
                rec.delete()
                files = []
            if files:
                self.finished = sorted([*self.finished, rec], key=lambda r: r.number)
                for old in self.finished[:-KEEP_FINISHED]:  # an older run's files go once newer ones exist
                    old.delete()
                self.finished = self.finished[-KEEP_FINISHED:]
                self.last = self.finished[-1]  # the newest run asked for, not the one that ended last
                self.files = self.last.finish()
            return files

    def discard(self) -> None:
        """Drop every run being written and the last run's files."""
        with self._lock:
            for rec in self.running + self.finished:
                rec.delete()
            self.running, self.finished, self.last, self.files = [], [], None, []

    def close(self) -> None:
        """The session ended: remove its folder (open recordings closed first)."""
        self.discard()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
