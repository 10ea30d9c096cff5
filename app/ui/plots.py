"""What the browser UI shows, as markup: pure functions that draw a stream's `History`
(`app.ui.state`) as self-contained SVG/HTML strings (no Gradio here; `app.ui.layout` places them).
Here: the plots over time, the current frame's charts and the page's text. The race's renderers
(leaderboard, running accuracy, gain, per-class accuracy, disagreement strip) are in
`app.ui.race_plots`, the drawing primitives (ticks, line and bar charts) in `app.ui.charts`; both
are re-exported here, so `plots.<name>` reaches every renderer the page draws.

    confidence_chart(history, "MS-TTA")        # <figure> with one <polyline> per series
    agreement_chart(history), switches_chart(history, ...), accuracy_chart(history, ...)
    topk_chart(result.tta_topk, ADAPTED_COLOR, "MS-TTA: top-3")
    cache_chart(labels, result.cache_per_class, capacity=3, title=...)
    verdict_html(result), stats_markdown(history, stream, fps), run_summary(history, seconds)

The charts are drawn on the server: a page update swaps one finished SVG for another, so a plot is
never blank while it redraws, and what the server holds (after Reset: nothing) is what the page
shows. Every series carries its data for tests and screen readers: `data-series`, `data-points`
(how many), and each bar `data-class` / `data-value`. The x axis of every plot over time is the
number of processed frames (1, 2, ...), the same unit for video and webcam.

Counting matches the headless summary (`app.summary.RunSummary`): agreement and accuracy in
0..100, a switch is a change of top-1 between consecutive processed frames.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Sequence

from .. import palette
from ..progress import plural
from ..session import FrameResult, Scored
from ..summary import cuts_entry
from .charts import ADAPTED_COLOR, CLIP_COLOR, CLIP_NAME, frames, hbar_chart, line_chart

# re-exported: the page (`app.ui.page`) and the tests reach every renderer as `plots.<name>`
from .charts import nice_ticks as nice_ticks
from .race_plots import ACCURACY_HEADINGS as ACCURACY_HEADINGS
from .race_plots import accuracy_chart as accuracy_chart
from .race_plots import disagreement_strip as disagreement_strip
from .race_plots import gain_chart as gain_chart
from .race_plots import leaderboard_html as leaderboard_html
from .race_plots import per_class_chart as per_class_chart
from .race_plots import thumbnail as thumbnail

if TYPE_CHECKING:
    from ..session import StreamSession
    from .state import History

AGREEMENT_COLOR = palette.AGREEMENT
MAX_CACHE_BARS = 40  # classes shown in the cache plot (the fullest ones when there are more)


# ---------------------------------------------------------------------------- plots over time
def _pairs(history: History, clip_of, tta_of) -> tuple[list, list]:
    clip, tta = [], []
    for p in history.points:
        a, b = clip_of(p), tta_of(p)
        if a is not None and b is not None:
            clip.append((p.x, a))
            tta.append((p.x, b))
    return clip, tta


def confidence_chart(history: History, title: str) -> str:
    clip, tta = _pairs(history, lambda p: p.clip_conf, lambda p: p.tta_conf)
    return line_chart(
        "mstta-confidence",
        "Confidence of the top class",
        [(CLIP_NAME, CLIP_COLOR, clip), (title, ADAPTED_COLOR, tta)],
        y_title="top-1 prob.",  # fits the plot's height: never clipped
        y_range=(0, 1),
    )


def agreement_chart(history: History, title: str) -> str:
    points = [(p.x, p.agreement) for p in history.points]
    return line_chart(
        "mstta-agreement",
        f"Running agreement, CLIP vs {title}",
        [("agreement", AGREEMENT_COLOR, points)],
        y_title="agree (%)",
        y_range=(0, 100),
    )


def switches_chart(history: History, title: str) -> str:
    clip, tta = _pairs(history, lambda p: p.switches_clip, lambda p: p.switches_tta)
    return line_chart(
        "mstta-switches",
        "Prediction switches (top-1 changes so far)",
        [(CLIP_NAME, CLIP_COLOR, clip), (title, ADAPTED_COLOR, tta)],
        y_title="switches",
        integer_y=True,
    )


# ---------------------------------------------------------------------------- the current frame
def topk_chart(chart_id: str, items: Sequence[Scored], color: str, title: str) -> str:
    """One method's top-k for the current frame, best first."""
    rows = [(s.label, float(s.prob), color if i == 0 else "#9ca3af") for i, s in enumerate(items)]
    return hbar_chart(chart_id, title, rows, x_max=1.0, x_title="", percent=True)


def cache_chart(
    labels: Sequence[str], per_class: Sequence[int], capacity: int | None, title: str, limit: int = MAX_CACHE_BARS
) -> str:
    """Positive-cache entries per class on a 0..Q axis with whole-number ticks (the `limit` fullest)."""
    rows = list(zip(labels, (int(v) for v in per_class)))
    if len(rows) > limit:
        rows = sorted(rows, key=lambda r: -r[1])[:limit]
    return hbar_chart(
        "mstta-cache",
        title,
        [(name, v, ADAPTED_COLOR) for name, v in rows],
        x_max=max(capacity or 1, 1),
        x_title="cache entries",
        integer_x=True,
    )


def cache_title(stream: StreamSession | None) -> str:
    """The cache plot's title: the method, its Q, or that it keeps no cache."""
    if stream is None:
        return "Cache occupancy per class"
    title = stream.method.title
    if not stream.method.keeps_cache:
        return f"Cache occupancy per class: none, {title} keeps no cache"
    return f"{title} cache occupancy per class (Q = {stream.config.capacity})"


# ---------------------------------------------------------------------------- page text (HTML, Markdown)
def verdict_html(result: FrameResult | None) -> str:
    """The agree / DISAGREE banner for the current frame: the predicted classes first, so a long
    method title (a raced run's "MS-TTA (no forgetting)") is what an ellipsis cuts at 1280x720."""
    if result is None:
        return '<div id="mstta-verdict-box" class="none">No frame processed yet</div>'
    clip, tta = html.escape(result.clip_label), html.escape(result.tta_label)
    title = html.escape(result.title)
    if result.disagree:
        text = f'✗ DISAGREE: CLIP <b class="name">{clip}</b>, {title} <b class="name">{tta}</b>'
        return f'<div id="mstta-verdict-box" class="disagree" title="{_plain(text)}">{text}</div>'
    text = f'✓ Agree on <b class="name">{clip}</b>: CLIP and {title}'
    return f'<div id="mstta-verdict-box" class="agree" title="{_plain(text)}">{text}</div>'


def _plain(markup: str) -> str:
    """The banner's text without its tags (the hover text when it is cut short), attribute-safe."""
    import re

    return re.sub(r"<[^>]+>", "", markup).replace('"', "&quot;")


RANDOM_WEIGHTS_HTML = (  # one short line, whole at 1280x720; the rest on hover
    '<div id="mstta-random-weights" role="alert" title="--pretrained none: a tiny random model, for trying the '
    'UI only">⚠️ Random weights — predictions are meaningless</div>'
)


def speed(h: History, views: int = 1) -> str:
    """The run's one speed figure, as the numbers line and the summary say it, with what it measures:
    the model's mean time per processed frame (the encoder pass plus every raced method's step), in ms."""
    if not h.processed:
        return ""
    steps = len(h.last.methods) if h.last is not None and h.last.methods else 1
    encoder = "encoder" if views == 1 else f"encoder on {views} views"
    return f"{h.tally.mean_ms:.1f} ms per frame ({encoder} + {steps} {plural(steps, 'step')}, mean)"


def stats_markdown(
    h: History, s: StreamSession | None, fps: float | None = None, views: int = 1, skipped: int = 0
) -> str:
    """The numbers line under the frame (Markdown, one line at 1280x720): frames, agreement, the
    speed (`speed`; with the views per frame when more than one), frames skipped to keep real time.
    Accuracy, fixed and broke are the leaderboard's, cache and bank drawn on the frame; `fps` is
    not shown (one speed figure)."""
    if h.processed == 0 or s is None or h.last is None:
        return ""
    parts = [f"**{frames(h.processed)}**", f"agreement **{h.agreement:.1f}%**"]
    parts.append(speed(h, views))
    if skipped:
        parts.append(f"{frames(skipped)} skipped (real time)")
    return " · ".join(parts)


def run_summary(h: History, seconds: float, title: str, skipped: int = 0, views: int = 1) -> str:
    """The end-of-run summary, the same for a video and the webcam: frames, the time it took, the
    speed (`speed`), agreement, switches, frames skipped to keep real time, and accuracy when
    frames were labelled."""
    t = h.tally
    text = (
        f"{frames(h.processed)} processed in {seconds:.1f} s, {speed(h, views)}; agreement "
        f"{h.agreement:.1f}%; switches CLIP {t.switches['clip']}, {title} {t.switches['tta']}"
    )
    if skipped:
        text += f"; {frames(skipped)} skipped to keep real time"
    if h.labelled:
        text += f"; accuracy {accuracies(h, title)} ({h.labelled} labelled)"
    cuts = [cuts_entry(row) for row in t.leaderboard() if row.get("cuts")]
    if cuts:  # where a method's forgetting reset it (issue 29), by source frame as in the JSONL
        text += "; scene cuts detected: " + ", ".join(cuts)
    return text + "."


def accuracies(h: History, title: str) -> str:
    """'CLIP 67.1%, MS-TTA (no forgetting) 68.1%, MS-TTA + forgetting 72.3%': CLIP's, then every
    raced method's in the leaderboard's order (best first); the one method's when none is raced."""
    t = h.tally
    racers = [row for row in t.leaderboard() if row["method"] != "clip" and row["accuracy"] is not None]
    parts = [f"{row['title']} {row['accuracy']:.1f}%" for row in racers] or [f"{title} {t.accuracy('tta'):.1f}%"]
    return ", ".join([f"CLIP {t.accuracy('clip'):.1f}%", *parts])


def progress_bar(done: int, expected: int | None, width: int = 24) -> str:
    """`  ▰▰▰▱▱▱ 42%` for the status line (nothing when the length is unknown)."""
    if not expected:
        return ""
    fraction = min(1.0, done / expected)
    filled = int(round(fraction * width))
    return f"  {'▰' * filled}{'▱' * (width - filled)} {100 * fraction:.0f}%"
