"""What the browser UI shows, as data: pandas tables for its plots and the HTML/Markdown of its
banners and summary lines. Pure functions, no Gradio (app/ui.py puts them on the page).

`History` accumulates one stream's results frame by frame (bounded, so an endless webcam stream
keeps flat memory) and turns them into the long-format tables the UI's line and bar plots take:

    history = History()
    history.update(frame_index, result, truth=None)      # after every processed frame
    confidence_frame(history)   # frame, confidence, model: top-1 probability of both
    agreement_frame(history)    # frame, agreement: running % of frames where both agree
    switches_frame(history)     # frame, switches, model: top-1 changes so far
    accuracy_frame(history)     # frame, accuracy, model: running % correct (labelled frames)
    topk_frame(result.tta_topk, ADAPTED_NAME)     # class, probability: a bar chart of the current frame
    cache_frame(labels, result.cache_per_class)   # class, entries: cache occupancy
    verdict_html(result), stats_markdown(history, stream, fps), legend_html(method), ...

Counting matches the headless summary (`summary.RunSummary`): agreement and accuracy in 0..100,
a switch is a change of top-1 between consecutive processed frames.
"""
from __future__ import annotations

import html
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import pandas as pd

from mstta.methods import get_method

from .session import FrameResult, Scored, method_title

if TYPE_CHECKING:
    from .session import StreamSession

CLIP_NAME = "CLIP zero-shot"   # legend names are fixed: a browser plot keeps the series it started with,
ADAPTED_NAME = "adapted"       # so the method's name goes into the plot labels instead
CLIP_COLOR = "#5096ff"         # the colours of app.annotate's panel, so frame and plots match
ADAPTED_COLOR = "#ffaa28"
COLOR_MAP = {CLIP_NAME: CLIP_COLOR, ADAPTED_NAME: ADAPTED_COLOR}
HISTORY_POINTS = 600           # plotted frames kept per stream (the counters cover every frame)
MAX_CACHE_BARS = 40            # classes shown in the cache plot (the fullest ones when there are more)
NAN = float("nan")


@dataclass(frozen=True)
class Point:
    """One processed frame as plotted."""

    frame: int
    clip_conf: float
    tta_conf: float
    agreement: float               # running %, all frames so far
    switches_clip: int             # running counts
    switches_tta: int
    accuracy_clip: float | None    # running %, labelled frames so far; None before the first
    accuracy_tta: float | None


class History:
    """Running counters of one stream plus its last `limit` points for the plots."""

    def __init__(self, limit: int = HISTORY_POINTS):
        self.limit = limit
        self.clear()

    def clear(self) -> None:
        """Start over (a new video, new labels, new settings, Reset)."""
        self.points: deque[Point] = deque(maxlen=self.limit)
        self.processed = 0
        self.agree = 0
        self.switches = [0, 0]
        self.correct = [0, 0]
        self.labelled = 0
        self.last: FrameResult | None = None
        self._prev: tuple[int, int] | None = None

    def update(self, frame: int, result: FrameResult, truth: int | None = None) -> None:
        """Add one processed frame (its index in the source, its result, its true class if known)."""
        clip, tta = result.clip_topk[0].index, result.tta_topk[0].index
        self.processed += 1
        self.agree += clip == tta
        if self._prev is not None:
            self.switches[0] += clip != self._prev[0]
            self.switches[1] += tta != self._prev[1]
        self._prev = (clip, tta)
        if truth is not None:
            self.labelled += 1
            self.correct[0] += clip == truth
            self.correct[1] += tta == truth
        self.points.append(Point(
            frame=int(frame),
            clip_conf=float(result.clip_topk[0].prob),
            tta_conf=float(result.tta_topk[0].prob),
            agreement=self.agreement,
            switches_clip=self.switches[0],
            switches_tta=self.switches[1],
            accuracy_clip=self.accuracy(0),
            accuracy_tta=self.accuracy(1),
        ))
        self.last = result

    @property
    def agreement(self) -> float:
        """% of processed frames where CLIP and the adapted method agree (0 before any frame)."""
        return 100.0 * self.agree / self.processed if self.processed else 0.0

    def accuracy(self, which: int) -> float | None:
        """Running accuracy in % of CLIP (0) or the adapted method (1) on labelled frames."""
        return 100.0 * self.correct[which] / self.labelled if self.labelled else None


def frame_range(history: History) -> list[float]:
    """x-axis limits of the plots over time: the frames shown, at least 10 frames wide (whole ticks)."""
    if not history.points:
        return [0, 10]
    first, last = history.points[0].frame, history.points[-1].frame
    return [first, max(last, first + 10)]


def _long(history: History, column: str, clip_of, tta_of, dtype: str = "float64") -> pd.DataFrame:
    """Two series (CLIP, adapted) in long format: frame, <column>, model. With no point yet, one
    empty (NaN) point per series, so a browser plot shows its axes and legend, and both series."""
    rows = []
    for p in history.points:
        a, b = clip_of(p), tta_of(p)
        if a is None or b is None:
            continue
        rows.append((p.frame, a, CLIP_NAME))
        rows.append((p.frame, b, ADAPTED_NAME))
    if not rows:
        rows, dtype = [(0, NAN, CLIP_NAME), (1, NAN, ADAPTED_NAME)], "float64"   # x axis 0..1, not 0..0
    return pd.DataFrame(rows, columns=["frame", column, "model"]).astype({"frame": "int64", column: dtype})


def confidence_frame(history: History) -> pd.DataFrame:
    """frame, confidence (top-1 probability, 0..1), model."""
    return _long(history, "confidence", lambda p: p.clip_conf, lambda p: p.tta_conf)


def switches_frame(history: History) -> pd.DataFrame:
    """frame, switches (top-1 changes so far), model."""
    return _long(history, "switches", lambda p: p.switches_clip, lambda p: p.switches_tta, "int64")


def accuracy_frame(history: History) -> pd.DataFrame:
    """frame, accuracy (running %, labelled frames only), model."""
    return _long(history, "accuracy", lambda p: p.accuracy_clip, lambda p: p.accuracy_tta)


def agreement_frame(history: History) -> pd.DataFrame:
    """frame, agreement (running %), one series."""
    rows = [(p.frame, p.agreement) for p in history.points]
    return pd.DataFrame(rows, columns=["frame", "agreement"]).astype({"frame": "int64", "agreement": "float64"})


def topk_frame(items: Sequence[Scored], model: str) -> pd.DataFrame:
    """class, probability (0..1), model: one method's top-k for a bar chart, best first
    (one empty bar when there is nothing yet; see `_long`)."""
    rows = [(s.label, float(s.prob), model) for s in items] or [("", NAN, model)]
    return pd.DataFrame(rows, columns=["class", "probability", "model"]).astype({"probability": "float64"})


def cache_frame(labels: Sequence[str], per_class: Sequence[int], limit: int = MAX_CACHE_BARS) -> pd.DataFrame:
    """class, entries: positive-cache entries per class (the `limit` fullest when there are more)."""
    rows = list(zip(labels, (int(v) for v in per_class)))
    if len(rows) > limit:
        rows = sorted(rows, key=lambda r: -r[1])[:limit]
    return pd.DataFrame(rows, columns=["class", "entries"]).astype({"entries": "int64"})


# ---------------------------------------------------------------------------- page text (HTML, Markdown)
def verdict_html(result: FrameResult | None) -> str:
    """The agree / DISAGREE banner for the current frame."""
    style = ("padding:10px 14px;border-radius:8px;font-size:1.15rem;font-weight:600;"
             "color:white;background:{bg};")
    if result is None:
        return (f'<div id="mstta-verdict-box" style="{style.format(bg="#6b7280")}">'
                "No frame processed yet</div>")
    clip, tta = html.escape(result.clip_label), html.escape(result.tta_label)
    title = html.escape(method_title(result.method))
    if result.disagree:
        return (f'<div id="mstta-verdict-box" class="disagree" style="{style.format(bg="#dc2626")}">'
                f"✗ DISAGREE: CLIP says <u>{clip}</u>, {title} says <u>{tta}</u></div>")
    return (f'<div id="mstta-verdict-box" class="agree" style="{style.format(bg="#16a34a")}">'
            f"✓ Agree: CLIP and {title} both say <u>{clip}</u></div>")


def legend_html(method: str | None) -> str:
    """The heading of the plots over time, with the colour legend of both series."""
    title = html.escape(method_title(method)) if method else "adapted"
    swatch = ('<span style="display:inline-block;width:22px;height:4px;border-radius:2px;background:{c};'
              'vertical-align:middle;margin:0 6px 0 18px"></span>')
    return ('<div style="display:flex;align-items:baseline;flex-wrap:wrap;gap:4px">'
            '<h2 style="margin:8px 12px 4px 0">Over time</h2><span style="font-size:1rem">'
            f'{swatch.format(c=CLIP_COLOR)}CLIP zero-shot'
            f'{swatch.format(c=ADAPTED_COLOR)}{title} (adapted)</span></div>')


def stats_markdown(h: History, s: StreamSession | None, fps: float | None) -> str:
    """The one-line summary under the bar charts (Markdown): counts, rates, cache, bank, accuracy."""
    if h.processed == 0 or s is None or h.last is None:
        return ""
    title = method_title(s.method)
    last = h.last
    parts = [f"**{h.processed}** frames", f"agreement **{h.agreement:.1f}%**",
             f"switches CLIP **{h.switches[0]}**, {title} **{h.switches[1]}**"]
    if fps:
        parts.append(f"{fps:.1f} fps")
    if last.cache_capacity:
        parts.append(f"cache {last.cache_size}/{last.cache_capacity}")
    if last.bank_size:
        parts.append(f"bank {last.bank_size}/{s.config.bank_size or '∞'}")
    if h.labelled:
        parts.append(f"accuracy CLIP **{h.accuracy(0):.1f}%**, {title} **{h.accuracy(1):.1f}%** "
                     f"({h.labelled} labelled)")
    return " · ".join(parts)


def progress_bar(done: int, expected: int | None, width: int = 24) -> str:
    """`  ▰▰▰▱▱▱ 42%` for the status line (nothing when the length is unknown)."""
    if not expected:
        return ""
    fraction = min(1.0, done / expected)
    filled = int(round(fraction * width))
    return f"  {'▰' * filled}{'▱' * (width - filled)} {100 * fraction:.0f}%"


def cache_label(stream: StreamSession | None) -> str:
    """The cache plot's title: the method, its Q, or that it keeps no cache."""
    if stream is None:
        return "Cache occupancy per class"
    title = method_title(stream.method)
    if not get_method(stream.method).cache:
        return f"Cache occupancy per class: none, {title} keeps no cache"
    return f"{title} cache occupancy per class (Q = {stream.config.capacity})"


def finite_max(values: pd.Series) -> int:
    """Largest value as an int; 0 when there is none (NaN only)."""
    top = values.max(skipna=True)
    return int(top) if top == top else 0   # NaN (no point yet) -> 0
