"""Real-time playback: a video's frames handed on at their own time, the newest one when late.

    pacer = Pacer(realtime=True)                  # clock and sleep are injectable (tests need no sleeping)
    for frame in pacer(Sampler(every)(source)):   # a 10 s clip takes about 10 s
        ...                                       # pacer.skipped: frames dropped to keep up

Frame i is due at start + (timestamp_i - timestamp_0). A consumer that asks early waits until the
next frame is due; a consumer that is late (the engine is slower than the video) gets the newest
frame already due, and every older one is skipped and counted, so the run never falls behind the
video. `realtime=False` hands every frame on at once (as fast as possible, for benchmarking).
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Iterator

from .sources import Frame

MAX_NAP_S = 0.1  # a wait is slept in slices this long, so `stopped()` is seen within one slice


class Pacer:
    """Paces frames by their timestamps (`realtime`) or not at all; counts what it skips."""

    def __init__(
        self,
        realtime: bool = True,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        stopped: Callable[[], bool] = lambda: False,
    ):
        self.realtime = realtime
        self.clock, self.sleep, self.stopped = clock, sleep, stopped
        self.skipped = 0  # frames dropped because a newer one was already due
        self.late_s = 0.0  # how far behind the video the last frame handed on was (s)

    def __call__(self, frames: Iterable[Frame]) -> Iterator[Frame]:
        if not self.realtime:
            yield from frames
            return
        it = iter(frames)
        pending = next(it, None)
        if pending is None:
            return
        start, first = self.clock(), pending.timestamp

        def due(frame: Frame) -> float:
            return start + max(0.0, frame.timestamp - first)

        while pending is not None:
            following = next(it, None)
            while following is not None and due(following) <= self.clock():
                self.skipped += 1  # the engine is late: the newer frame replaces it
                pending, following = following, next(it, None)
            self._wait_until(due(pending))
            if self.stopped():
                return
            self.late_s = max(0.0, self.clock() - due(pending))
            yield pending
            pending = following

    def _wait_until(self, when: float) -> None:
        while not self.stopped():
            left = when - self.clock()
            if left <= 0:
                return
            self.sleep(min(left, MAX_NAP_S))
