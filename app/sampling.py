"""Frame sampling: which frames of a source reach the encoder.

Files and folders: every `every`-th frame by source index (index % every == 0), so a run is
deterministic and frames the decoder skipped do not shift the choice. Live sources pace
themselves (the newest frame wins, see `sources.LiveSource`), so they are not subsampled.
"""

from __future__ import annotations

from typing import Iterable, Iterator

from mstta.checks import int_in

from .sources import Frame

TARGET_FPS = 5.0  # the default stride gives about this many processed frames per second of video


def default_every(fps: float, target: float = TARGET_FPS) -> int:
    """Stride giving about `target` processed frames per second: 30 fps -> 6, 5 fps -> 1."""
    return max(1, int(round(fps / target)))


class Sampler:
    """Yields every `every`-th frame by index and counts the rest in `skipped`."""

    def __init__(self, every: int = 1):
        self.every = int_in(every, "--every", 1)
        self.skipped = 0

    def __call__(self, frames: Iterable[Frame]) -> Iterator[Frame]:
        for frame in frames:
            if frame.index % self.every == 0:
                yield frame
            else:
                self.skipped += 1
