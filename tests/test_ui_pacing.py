"""Real-time pacing (app/pacing.py) on a fake clock: no real sleeping."""

from __future__ import annotations

import numpy as np

from app.pacing import Pacer
from app.sources import Frame


class FakeClock:
    """A clock that moves only when slept on, or when the consumer 'works'."""

    def __init__(self):
        self.now = 100.0
        self.slept = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.now += seconds
        self.slept += seconds


def frames(n: int, fps: float = 10.0):
    image = np.zeros((2, 2, 3), np.uint8)
    return [Frame(i, i / fps, image, "clip") for i in range(n)]


def test_a_fast_consumer_sees_every_frame_at_its_own_time():
    clock = FakeClock()
    pacer = Pacer(True, clock=clock, sleep=clock.sleep)
    seen = [(f.index, round(clock() - 100.0, 6)) for f in pacer(frames(100))]  # a 10 s clip
    assert [i for i, _ in seen] == list(range(100)) and pacer.skipped == 0
    assert all(abs(t - i / 10) < 1e-6 for i, t in seen), "each frame handed on when it is due"
    assert abs(clock.slept - 9.9) < 1e-6


def test_a_slow_consumer_gets_the_newest_frame_and_the_rest_are_counted():
    clock = FakeClock()
    pacer = Pacer(True, clock=clock, sleep=clock.sleep)
    seen, late = [], []
    for f in pacer(frames(100)):  # the engine takes 0.35 s a frame: 3.5 video frames
        seen.append(f.index)
        late.append(pacer.late_s)
        clock.now += 0.35
    assert len(seen) + pacer.skipped == 100, "every frame is either processed or counted as skipped"
    assert 25 <= len(seen) <= 32 and seen == sorted(seen)
    assert max(late) <= 0.35 + 1e-6, "a frame handed on is never older than one frame's work"
    assert clock.now - 100.0 <= 9.9 + 2 * 0.35 + 1e-6, "the run keeps real time: it never falls behind"
    assert all(b - a in (3, 4) for a, b in zip(seen, seen[1:-1])) and seen[-1] == 99, seen


def test_as_fast_as_possible_never_waits_or_skips():
    clock = FakeClock()
    pacer = Pacer(False, clock=clock, sleep=clock.sleep)
    assert [f.index for f in pacer(frames(50))] == list(range(50))
    assert clock.slept == 0 and pacer.skipped == 0


def test_stop_ends_a_wait_within_one_nap():
    clock = FakeClock()
    stop = {"at": None}
    pacer = Pacer(
        True, clock=clock, sleep=clock.sleep, stopped=lambda: stop["at"] is not None and clock() >= stop["at"]
    )
    long_gap = [Frame(0, 0.0, np.zeros((2, 2, 3), np.uint8), "c"), Frame(1, 3600.0, np.zeros((2, 2, 3), np.uint8), "c")]
    seen = []
    for f in pacer(long_gap):
        seen.append(f.index)
        stop["at"] = clock() + 0.5
    assert seen == [0] and clock.slept <= 0.5 + 0.1 + 1e-9, "an hour's gap is not slept through after Stop"


def test_empty_and_single_frame_sources():
    clock = FakeClock()
    assert list(Pacer(True, clock=clock, sleep=clock.sleep)(frames(0))) == []
    assert [f.index for f in Pacer(True, clock=clock, sleep=clock.sleep)(frames(1))] == [0]
