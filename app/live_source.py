"""A live source (a webcam or a network stream) read on a thread: the newest frame wins.

A slow consumer never builds a queue: every frame overwritten before use is counted in
`stats.dropped`. A stream that stops delivering frames is reopened a few times with exponential
back-off, then the iteration ends cleanly. A frame above `max_pixels` ends the stream with a
one-line `UserError`.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Iterator

import numpy as np

from mstta.errors import UserError

from .frames import MAX_PIXELS, shrink
from .source_base import FALLBACK_FPS, Frame, Source, check_declared, cv2, to_rgb, usable_fps

log = logging.getLogger(__name__)


class LiveSource(Source):
    """A webcam or network stream read on a thread; the newest frame wins, stale ones are dropped.

    `opener()` returns a cv2.VideoCapture-like object (isOpened/read/release). Drops and reads are
    counted from the first iteration on; the wait for the first frame is bounded by `connect_timeout`.
    """

    live = True

    def __init__(
        self,
        spec: str,
        opener: Callable[[], Any],
        *,
        kind: str = "stream",
        flag: str | None = None,
        retries: int = 3,
        backoff: float = 0.5,
        connect_timeout: float = 10.0,
        max_pixels: int = MAX_PIXELS,
    ):
        self.kind = kind
        self._flag = flag or spec
        self._opener = opener
        self._retries = retries
        self._backoff = backoff
        cap = opener()
        if not cap.isOpened():
            cap.release()
            what = (
                "the camera could not be opened (no such device, or in use)"
                if kind == "camera"
                else "could not connect to the stream (check the URL and that the server is up)"
            )
            raise UserError(f"{self._flag}: {what}")
        try:
            check_declared(cap, max_pixels, self._flag)
        except UserError:
            cap.release()
            raise
        super().__init__(spec, usable_fps(cap.get(cv2.CAP_PROP_FPS)) or FALLBACK_FPS, max_pixels)
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
            raise UserError(
                f"{self._flag}: opened, but no frame arrived within {connect_timeout:g} s; "
                "check that the source is sending video"
            )

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
                            self._error = (
                                f"{self._flag}: a {bgr.shape[1]}x{bgr.shape[0]} frame is above the "
                                f"limit of {self.max_pixels:,} pixels; raise --max-pixels or send smaller frames"
                            )
                        break
                    self._publish(bgr)
                    continue
                if attempts >= self._retries:
                    log.warning("%s: no frames after %d reconnect attempts; ending the stream", self.spec, attempts)
                    break
                delay = self._backoff * (2**attempts)
                attempts += 1
                log.warning(
                    "%s: stream stopped; reconnecting in %.1f s (attempt %d of %d)",
                    self.spec,
                    delay,
                    attempts,
                    self._retries,
                )
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
        except Exception as exc:  # any failure to reopen is one more failed attempt
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
            yield Frame(seq, t, to_rgb(bgr), self.spec)

    def close(self) -> None:
        if getattr(self, "_stop", None) is None:
            return
        self._stop.set()
        with self._cond:
            if self._slot is not None:  # received but never used: dropped
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
