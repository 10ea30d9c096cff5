"""Headless progress on stderr: a tqdm bar on a terminal, a plain line every few seconds otherwise.

    progress = Progress(total=120, enabled=not quiet)
    progress.update(processed, fps)   # after every processed frame
    progress.close()

`total` is the number of frames that will be processed when the source says how long it is
(files, folders), else None (streams, webcams): the bar then shows frames and fps but no ETA.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, TextIO

PLAIN_INTERVAL_S = 3.0  # a non-terminal stderr (a log file, CI) gets one line this often
CLOCK: Callable[[], float] = time.monotonic  # the default clock (tests put a fake one here)


def _clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """Frames processed, fps and ETA on `stream` (stderr); nothing at all when not `enabled`.

    `clock()` gives the time in seconds (default `CLOCK`, the monotonic clock)."""

    def __init__(
        self,
        total: int | None = None,
        *,
        enabled: bool = True,
        stream: TextIO | None = None,
        prog: str = "mstta-demo",
        interval: float | None = None,
        clock: Callable[[], float] | None = None,
    ):
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.prog = prog
        self.interval = PLAIN_INTERVAL_S if interval is None else interval
        self.enabled = enabled
        self._bar = None
        self._done = 0
        self._clock = clock if clock is not None else CLOCK
        self._start = self._clock()
        self._last = self._start
        if enabled and _isatty(self.stream):
            from tqdm import tqdm

            self._bar = tqdm(
                total=total, unit="frame", file=self.stream, desc=prog, dynamic_ncols=True, leave=True, smoothing=0.1
            )

    def update(self, processed: int, fps: float | None = None) -> None:
        """`processed` frames are done so far; `fps` is the recent processing rate."""
        if not self.enabled:
            return
        step, self._done = processed - self._done, processed
        if self._bar is not None:
            self._bar.update(step)
            return
        now = self._clock()
        if now - self._last >= self.interval:
            self._last = now
            self.stream.write(f"{self.prog}: {self.line(processed, fps, now - self._start)}\n")
            self.stream.flush()

    def line(self, processed: int, fps: float | None, elapsed: float) -> str:
        """'42/120 frames, 5.1 fps, ETA 0:15' (no total: '42 frames, 5.1 fps, 0:08 elapsed')."""
        rate = fps if fps else (processed / elapsed if elapsed > 0 else None)
        text = f"{processed}/{self.total} frames" if self.total else f"{processed} {plural(processed, 'frame')}"
        if rate:
            text += f", {rate:.1f} fps"
        if self.total and rate:
            text += f", ETA {_clock(max(0, self.total - processed) / rate)}"
        else:
            text += f", {_clock(elapsed)} elapsed"
        return text

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def plural(n: int, word: str, many: str | None = None) -> str:
    """'frame' for 1, 'frames' otherwise (or `many`)."""
    return word if n == 1 else (many or word + "s")


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
