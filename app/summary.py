"""Run statistics: what the demo prints at the end, accumulated frame by frame.

`Tally.add(result, truth)` counts what every run counts (processed frames, agreement of zero-shot
CLIP and the adapted method, top-1 switches, per-method accuracy on labelled frames); the headless
`RunSummary` and the browser UI's `History` both hold one, so the page and the headless summary
count alike. `RunSummary.update(frame, result, truth)` per processed frame, `finish(...)` -> a flat
dict: frame counts (received = read + dropped + unreadable = processed + skipped + dropped +
unreadable), processing fps, latency percentiles, agreement, switches per minute of source time
and accuracy. Percentages are in 0..100. Memory stays flat on an endless stream: counters only,
and latency percentiles from a bounded uniform sample.
"""

from __future__ import annotations

import random
import time
from collections import deque
from typing import Any

import numpy as np

from .progress import plural
from .session import FrameResult, MethodResult, method_title
from .sources import Frame, SourceStats

CUTS_KEPT = 1_000  # the newest scene cuts each raced method keeps (their count stays exact): flat memory
LATENCY_SAMPLES = 10_000  # latency percentiles from a uniform sample of this many frames (flat memory)
SIDES = ("clip", "tta")  # zero-shot CLIP, the adapted method


class Racer:
    """One raced method's running counts: agreement with CLIP, correct, fixed and broke (labelled
    frames CLIP got wrong and the method right, and the reverse), summed step and encoder time, and
    the scene cuts its forgetting detected (`cuts`: (processed number, source frame index), newest
    CUTS_KEPT)."""

    def __init__(self, method: str) -> None:
        self.method = method
        self.frames = self.agree = self.correct = self.fixed = self.broke = self.cut_count = 0
        self.ms = 0.0
        self.cuts: deque[tuple[int, int | None]] = deque(maxlen=CUTS_KEPT)

    def add(self, result: FrameResult, raced: MethodResult, truth: str | None, frame: int | None = None) -> None:
        self.frames += 1
        if raced.cut:
            self.cut_count += 1
            self.cuts.append((self.frames, frame))
        self.agree += raced.index == result.clip_topk[0].index
        self.ms += result.encode_ms + raced.ms
        if truth is not None:
            right, clip_right = raced.label == truth, result.clip_label == truth
            self.correct += right
            self.fixed += right and not clip_right
            self.broke += clip_right and not right


class Tally:
    """Running counts of one run: processed, agree, switches and correct per side, labelled, and
    per raced method (`Racer`)."""

    def __init__(self) -> None:
        self.processed = 0
        self.agree = 0
        self.switches = dict.fromkeys(SIDES, 0)
        self.correct = dict.fromkeys(SIDES, 0)
        self.labelled = 0
        self.racers: dict[str, Racer] = {}
        self.clip_ms = 0.0
        self.model_ms = 0.0  # every frame's encoder pass + all raced steps (FrameResult.latency_ms)
        self._prev: tuple[int, int] | None = None

    def add(self, result: FrameResult, truth: str | None = None, frame: int | None = None) -> None:
        """Count one processed frame; `truth` is its true class name (None: unlabelled), `frame` its
        index in the source (where a detected cut is reported)."""
        clip, tta = result.clip_topk[0].index, result.tta_topk[0].index
        self.processed += 1
        self.agree += clip == tta
        if self._prev is not None:
            self.switches["clip"] += clip != self._prev[0]
            self.switches["tta"] += tta != self._prev[1]
        self._prev = (clip, tta)
        if truth is not None:
            self.labelled += 1
            self.correct["clip"] += result.clip_label == truth
            self.correct["tta"] += result.tta_label == truth
        self.clip_ms += result.encode_ms
        self.model_ms += result.latency_ms
        for raced in result.methods:
            self.racers.setdefault(raced.method, Racer(raced.method)).add(result, raced, truth, frame)

    def racer(self, method: str) -> Racer | None:
        return self.racers.get(method)

    def leaderboard(self) -> list[dict[str, Any]]:
        """CLIP and every raced method, best accuracy first where frames are labelled (else in the
        order raced): accuracy (%), agreement with CLIP (%), fixed / broke, ms per frame (the
        encoder pass plus the method's own step: what running it alone costs)."""

        def pct(n: int, of: int) -> float | None:
            return round(100.0 * n / of, 2) if of else None

        rows = [
            {
                "method": "clip",
                "title": "CLIP (reference)",
                "marks": [],
                "accuracy": pct(self.correct["clip"], self.labelled),
                "agreement": 100.0 if self.processed else None,
                "fixed": 0,
                "broke": 0,
                "ms_per_frame": round(self.clip_ms / self.processed, 2) if self.processed else None,
                "cuts": 0,
                "cut_frames": [],
            }
        ]
        for r in self.racers.values():
            rows.append(
                {
                    "method": r.method,
                    "title": method_title(r.method),
                    "marks": method_marks(r.method),
                    "accuracy": pct(r.correct, self.labelled),
                    "agreement": pct(r.agree, r.frames),
                    "fixed": r.fixed,
                    "broke": r.broke,
                    "ms_per_frame": round(r.ms / r.frames, 2) if r.frames else None,
                    "cuts": r.cut_count,  # scene cuts its forgetting detected (state reset there)
                    "cut_frames": [f for _, f in r.cuts],  # their source frame indices, the newest CUTS_KEPT
                }
            )
        if self.labelled:
            rows.sort(key=lambda row: -(row["accuracy"] or 0.0))  # stable: ties keep the raced order
        return rows

    @property
    def mean_ms(self) -> float:
        """The model's mean time per processed frame (ms): encoder pass + every raced step."""
        return self.model_ms / self.processed if self.processed else 0.0

    @property
    def agreement(self) -> float | None:
        """% of processed frames where both agree (None before the first frame)."""
        return 100.0 * self.agree / self.processed if self.processed else None

    def accuracy(self, side: str) -> float | None:
        """Running accuracy in % of "clip" or "tta" on labelled frames (None before the first)."""
        return 100.0 * self.correct[side] / self.labelled if self.labelled else None


def method_marks(method: str) -> list[str]:
    """The notes a method's row carries wherever it is shown (`Method.marks`: e.g. not training-free)."""
    from .forgetting import parse_racer

    try:
        return list(parse_racer(method).marks)
    except Exception:  # an unknown name (a result file of another version): no marks to show
        return []


class FpsMeter:
    """Processed frames per second over the last `window` frames (wall clock)."""

    def __init__(self, window: int = 30):
        self._times: deque[float] = deque(maxlen=window + 1)

    def tick(self) -> float | None:
        self._times.append(time.perf_counter())
        if len(self._times) < 2:
            return None
        span = self._times[-1] - self._times[0]
        return (len(self._times) - 1) / span if span > 0 else None


class RunSummary:
    """Accumulates per-frame results (counts in a `Tally`); `finish()` returns the summary dict."""

    def __init__(self) -> None:
        self.tally = Tally()
        self.latencies: list[float] = []  # a uniform reservoir sample of per-frame latencies
        self._rng = random.Random(0)
        self.first_ts: float | None = None
        self.last_ts: float | None = None
        self.last: FrameResult | None = None
        self._start = time.perf_counter()

    @property
    def processed(self) -> int:
        return self.tally.processed

    def update(self, frame: Frame, result: FrameResult, truth: str | None = None) -> None:
        """Count one processed frame; `truth` is its true class name (None: unlabelled)."""
        if self.processed == 0:
            self._start = time.perf_counter() - result.latency_ms / 1000.0
            self.first_ts = frame.timestamp
        self.tally.add(result, truth, frame.index)
        if len(self.latencies) < LATENCY_SAMPLES:
            self.latencies.append(result.latency_ms)
        else:
            j = self._rng.randrange(self.processed)
            if j < LATENCY_SAMPLES:
                self.latencies[j] = result.latency_ms
        self.last_ts = frame.timestamp
        self.last = result

    def finish(self, stats: SourceStats, skipped: int = 0, interrupted: bool = False, **extra: Any) -> dict[str, Any]:
        """The summary dict; `extra` (source, method, outputs...) is merged in first."""
        seconds = time.perf_counter() - self._start if self.processed else 0.0
        span_min = ((self.last_ts or 0.0) - (self.first_ts or 0.0)) / 60.0
        lat = np.asarray(self.latencies) if self.latencies else None
        t = self.tally

        def pct(value: float | None) -> float | None:
            return round(value, 2) if value is not None else None

        def per_min(n: int) -> float | None:
            return round(n / span_min, 2) if span_min > 0 else None

        out = dict(extra)
        out.update(
            {
                "frames_received": stats.received,
                "frames_read": stats.read,
                "frames_processed": self.processed,
                "frames_skipped": skipped,
                "frames_dropped": stats.dropped,
                "frames_unreadable": stats.unreadable,
                "reconnects": stats.reconnects,
                "ended_early": stats.ended_early,
                "seconds": round(seconds, 3),
                "fps": round(self.processed / seconds, 2) if seconds > 0 else None,
                "latency_ms_p50": round(float(np.percentile(lat, 50)), 2) if lat is not None else None,
                "latency_ms_p95": round(float(np.percentile(lat, 95)), 2) if lat is not None else None,
                "agreement": pct(t.agreement),
                "switches_per_min_clip": per_min(t.switches["clip"]),
                "switches_per_min_tta": per_min(t.switches["tta"]),
                "labelled_frames": t.labelled if t.labelled else None,
                "accuracy_clip": pct(t.accuracy("clip")),
                "accuracy_tta": pct(t.accuracy("tta")),
                "leaderboard": t.leaderboard(),
                "cache_size": self.last.cache_size if self.last else 0,
                "bank_size": self.last.bank_rows if self.last else 0,
                "interrupted": interrupted,
            }
        )
        return out


def format_summary(summary: dict[str, Any]) -> str:
    """The one-line human summary printed at the end of a run."""
    s = summary
    title = s.get("method_title", "adapted")
    parts = [
        f"{count(s['frames_processed'], 'frame')} processed of {s['frames_received']} received "
        f"({s['frames_skipped']} skipped, {s['frames_dropped']} dropped, {s['frames_unreadable']} unreadable)"
    ]
    if s.get("fps"):
        parts.append(f"{s['fps']:.1f} fps (p50 {s['latency_ms_p50']:.1f} ms, p95 {s['latency_ms_p95']:.1f} ms)")
    if s.get("agreement") is not None:
        parts.append(f"CLIP/{title} agree {s['agreement']:.1f}%")
    if s.get("switches_per_min_clip") is not None:
        parts.append(f"switches/min CLIP {s['switches_per_min_clip']:.1f}, {title} {s['switches_per_min_tta']:.1f}")
    if s.get("accuracy_clip") is not None:
        parts.append(
            f"accuracy CLIP {s['accuracy_clip']:.1f}%, {title} {s['accuracy_tta']:.1f}% "
            f"on {count(s['labelled_frames'], 'labelled frame')}"
        )
    board = s.get("leaderboard") or []
    if len(board) > 2:  # more than one method raced: every method's line
        parts.append("leaderboard: " + ", ".join(leaderboard_entry(row) for row in board))
    cuts = [cuts_entry(row) for row in board if row.get("cuts")]
    if cuts:
        parts.append("scene cuts detected: " + ", ".join(cuts))
    outputs = [p for p in (s.get("out"), s.get("log")) if p]
    if outputs:
        parts.append("wrote " + ", ".join(outputs))
    if s.get("interrupted"):
        parts.append("interrupted")
    return "; ".join(parts)


def leaderboard_entry(row: dict[str, Any]) -> str:
    """'TDA 84.2% (agree 97.5%, fixed 3 · broke 1, 12.3 ms/frame)' for the one-line summary."""
    title = row["title"] + "".join(f" [{m}]" for m in row.get("marks") or [])
    facts = []
    if row.get("agreement") is not None and row["method"] != "clip":
        facts.append(f"agree {row['agreement']:.1f}%")
    if row.get("accuracy") is not None and row["method"] != "clip":
        facts.append(f"fixed {row['fixed']} · broke {row['broke']}")
    if row.get("ms_per_frame") is not None:
        facts.append(f"{row['ms_per_frame']:.1f} ms/frame")
    acc = f" {row['accuracy']:.1f}%" if row.get("accuracy") is not None else ""
    return f"{title}{acc}" + (f" ({', '.join(facts)})" if facts else "")


def cuts_entry(row: dict[str, Any]) -> str:
    """'MS-TTA + forgetting + cuts 2 (frames 482, 962)': a method's detected cuts, by source frame."""
    shown = [str(f) for f in row.get("cut_frames") or [] if f is not None][-10:]
    earlier = row["cuts"] - len(shown)
    frames = ", ".join(shown) + (f", and {earlier} earlier" if earlier > 0 else "")
    return f"{row['title']} {row['cuts']}" + (f" (frames {frames})" if shown else "")


def count(n: int, word: str) -> str:
    """'1 frame', '2 frames', '0 frames'."""
    return f"{n} {plural(n, word)}"
