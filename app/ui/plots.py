"""What the browser UI shows, as markup: pure functions that draw a stream's `History`
(`app.ui.state`) as self-contained SVG/HTML strings (no Gradio here; `app.ui.layout` places them).

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
import math
from typing import TYPE_CHECKING, Sequence

from .. import palette
from ..progress import plural
from ..session import FrameResult, Scored, method_title

if TYPE_CHECKING:
    from ..session import StreamSession
    from .state import History

CLIP_NAME = "CLIP zero-shot"
CLIP_COLOR = palette.CLIP  # one palette with the annotated frame (app.palette)
ADAPTED_COLOR = palette.method_color(0)
AGREEMENT_COLOR = palette.AGREEMENT
MAX_CACHE_BARS = 40  # classes shown in the cache plot (the fullest ones when there are more)
X_TITLE = "processed frames"


# ---------------------------------------------------------------------------- SVG charts
W, H = 400, 125  # a chart's drawing size (it scales to its box: >= 340 px wide on the page)
FONT = 13  # SVG units: >= 11 px of text once the chart is scaled to a 340 px box
LEFT, RIGHT, TOP, BOTTOM = 54, 10, 10, 40


def nice_ticks(low: float, high: float, count: int = 5, integer: bool = False) -> list[float]:
    """Round tick values covering [low, high]: steps of 1, 2 or 5 x 10^n (whole numbers if `integer`)."""
    span = max(high - low, 1e-9)
    raw = span / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    if integer:
        step = max(1, round(step))
    first = math.ceil(low / step - 1e-9) * step
    ticks, value = [], first
    while value <= high + 1e-9:
        ticks.append(round(value, 10))
        value += step
    return ticks


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _axes(x0: float, x1: float, y0: float, y1: float, x_title: str, y_title: str, integer_y: bool) -> tuple:
    """Grid, ticks and axis titles; returns (svg parts, x->px, y->px)."""
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM
    sx = lambda v: LEFT + (v - x0) / (x1 - x0) * pw  # tiny local maps
    sy = lambda v: TOP + ph - (v - y0) / (y1 - y0) * ph
    parts = []
    for t in nice_ticks(y0, y1, 5, integer_y):
        y = sy(t)
        parts.append(
            f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e7eb"/>'
            f'<text class="tick y" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(t)}</text>'
        )
    for t in nice_ticks(x0, x1, 6, integer=True):
        x = sx(t)
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP + ph}" y2="{TOP + ph + 4}" stroke="#6b7280"/>'
            f'<text class="tick x" x="{x:.1f}" y="{TOP + ph + 17}" text-anchor="middle">{_fmt(t)}</text>'
        )
    parts.append(
        f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{TOP + ph}" y2="{TOP + ph}" stroke="#6b7280"/>'
        f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + ph}" stroke="#6b7280"/>'
        f'<text class="axis-title x" x="{LEFT + pw / 2}" y="{H - 4}" text-anchor="middle">'
        f"{html.escape(x_title)}</text>"
        f'<text class="axis-title y" transform="translate(14 {TOP + ph / 2}) rotate(-90)" '
        f'text-anchor="middle">{html.escape(y_title)}</text>'
    )
    return parts, sx, sy


def _figure(chart_id: str, title: str, legend: Sequence[tuple[str, str]], svg_body: str, height: int = H) -> str:
    keys = "".join(f'<span class="key"><i style="background:{c}"></i>{html.escape(n)}</span>' for n, c in legend)
    return (
        f'<figure class="mstta-chart" id="{chart_id}-chart"><figcaption><b>{html.escape(title)}</b>{keys}'
        f'</figcaption><svg viewBox="0 0 {W} {height}" role="img" aria-label="{html.escape(title)}" '
        f'font-size="{FONT}" font-family="system-ui, sans-serif" fill="#374151">{svg_body}</svg></figure>'
    )


def line_chart(
    chart_id: str,
    title: str,
    series: Sequence[tuple[str, str, Sequence[tuple[int, float]]]],
    *,
    y_title: str,
    y_range: tuple[float, float] | None = None,
    integer_y: bool = False,
    x_title: str = X_TITLE,
) -> str:
    """Lines over processed frames. `series`: (name, colour, [(x, y), ...]); `y_range` None fits the
    data (from 0, whole-number ticks with `integer_y`). An empty series draws axes only."""
    xs = [x for _, _, pts in series for x, _ in pts]
    x0, x1 = (min(xs), max(xs)) if xs else (1, 10)
    x1 = max(x1, x0 + 1)
    if y_range is None:
        top = max([y for _, _, pts in series for _, y in pts] + [1])
        ticks = nice_ticks(0, top, 5, integer_y)
        step = ticks[1] - ticks[0] if len(ticks) > 1 else 1
        y_range = (0, ticks[-1] if ticks[-1] >= top else ticks[-1] + step)  # the top gridline labelled
    parts, sx, sy = _axes(x0, x1, *y_range, x_title, y_title, integer_y)
    # CLIP is drawn last and dashed, so where both methods agree both lines stay visible
    for name, color, pts in sorted(series, key=lambda item: item[0] == CLIP_NAME):
        dash = ' stroke-dasharray="6 4"' if name == CLIP_NAME and len(series) > 1 else ""
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        attrs = f'data-series="{html.escape(name)}" data-points="{len(pts)}"'
        if len(pts) == 1:  # one frame: a dot (a polyline of one point draws nothing)
            x, y = pts[0]
            parts.append(f'<circle class="series" {attrs} cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}"/>')
        else:
            parts.append(
                f'<polyline class="series" {attrs} points="{coords}" fill="none" stroke="{color}" '
                f'stroke-width="2" stroke-linejoin="round"{dash}/>'
            )
    return _figure(chart_id, title, [(n, c) for n, c, _ in series], "".join(parts))


def hbar_chart(
    chart_id: str,
    title: str,
    rows: Sequence[tuple[str, float, str]],
    *,
    x_max: float,
    x_title: str,
    integer_x: bool = False,
    percent: bool = False,
) -> str:
    """Horizontal bars in HTML (text at the page's size): rows of (class, value, colour) on a
    0..x_max axis whose ticks are printed below (whole numbers with `integer_x`)."""

    def pct(v: float) -> float:
        return 100.0 * max(0.0, min(v, x_max)) / x_max

    def shown(v: float) -> str:
        return f"{v * 100:.0f}%" if percent else _fmt(v)

    lines = []
    for name, value, color in rows:
        lines.append(
            f'<div class="row"><span class="name" title="{html.escape(name)}">{html.escape(name)}</span>'
            f'<span class="track"><span class="bar" data-class="{html.escape(name)}" data-value="{value:g}" '
            f'style="width:{pct(value):.1f}%;background:{color}"></span></span>'
            f'<span class="val">{shown(value)}</span></div>'
        )
    if not rows:
        lines.append(
            '<div class="row empty"><span class="name">—</span><span class="track"></span>'
            '<span class="val"></span></div>'
        )
    ticks = "".join(
        f'<span class="tick" style="left:{pct(t):.1f}%">{shown(t) if not percent else f"{t * 100:.0f}"}</span>'
        for t in nice_ticks(0, x_max, 5, integer_x)
    )
    axis = (
        f'<div class="row axis"><span class="name"></span><span class="track ticks">{ticks}</span>'
        f'<span class="val"></span></div>'
        + (f'<div class="axis-title">{html.escape(x_title)}</div>' if x_title else "")
    )
    return (
        f'<figure class="mstta-chart mstta-bars" id="{chart_id}-chart"><figcaption><b>{html.escape(title)}'
        f"</b></figcaption>{''.join(lines)}{axis}</figure>"
    )


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
        y_title="top-1 probability",
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


ACCURACY_HEADINGS = {  # the accuracy plot says what ground truth the run shown has
    "loaded": "Running accuracy: ground truth loaded, no labelled frame yet",
    "off": "Running accuracy: off (the ground truth names classes the labels lack)",
    "none": "Running accuracy: no ground-truth CSV for this run",
    "webcam": "Running accuracy: the webcam has no ground truth",
}


def accuracy_chart(history: History, title: str, truth_state: str = "none", titles: Sequence[str] | None = None) -> str:
    """Running accuracy of CLIP and of every raced method on one plot (`titles`: the raced methods'
    titles in race order; default the one `title`); `truth_state` ("loaded", "off", "none",
    "webcam") titles a plot without points."""
    titles = list(titles) if titles else [title]
    series = [(CLIP_NAME, CLIP_COLOR, [(p.x, p.accuracy_clip) for p in history.points if p.accuracy_clip is not None])]
    for i, name in enumerate(titles):
        pts = [
            (p.x, p.accuracy_methods[i] if i < len(p.accuracy_methods) else (p.accuracy_tta if i == 0 else None))
            for p in history.points
        ]
        series.append((name, palette.method_color(i), [(x, y) for x, y in pts if y is not None]))
    heading = (
        "Running accuracy (labelled frames)"
        if history.labelled
        else ACCURACY_HEADINGS.get(truth_state, ACCURACY_HEADINGS["none"])
    )
    return line_chart("mstta-accuracy", heading, series, y_title="accuracy (%)", y_range=(0, 100))


def gain_chart(history: History, title: str) -> str:
    """The gain in sight: the first method's running accuracy minus CLIP's, in points, around a zero line."""
    pts = [(p.x, p.gain) for p in history.points if p.gain is not None]
    t = history.tally
    racer = t.racers.get(history.last.method) if history.last is not None and history.last.methods else None
    counts = f" · fixed {racer.fixed} · broke {racer.broke}" if racer is not None and t.labelled else ""
    heading = f"Gain of {title} over CLIP (points){counts}" if pts else f"Gain of {title} over CLIP: needs ground truth"
    top = max([abs(y) for _, y in pts] + [1.0])
    ticks = nice_ticks(0, top, 3)
    bound = ticks[-1] if ticks[-1] >= top else ticks[-1] + (ticks[1] - ticks[0] if len(ticks) > 1 else 1)
    chart = line_chart(
        "mstta-gain",
        heading,
        [(f"{title} − CLIP", palette.method_color(0), pts)],
        y_title="points",
        y_range=(-bound, bound),
    )
    return chart


def leaderboard_html(history: History, stream: StreamSession | None) -> str:
    """The live leaderboard: CLIP and every raced method, with accuracy (labelled frames), agreement
    with CLIP, fixed · broke, and ms per frame (the encoder pass + the method's own step); a
    method's `marks` beside its name."""
    rows = history.tally.leaderboard()
    if not history.processed and stream is not None:  # before the first frame: the names, nothing measured
        rows = [{"method": "clip", "title": "CLIP (reference)", "marks": []}] + [
            {"method": m.name, "title": m.title, "marks": list(m.marks)} for m in stream.methods
        ]
    order = {m.name: i for i, m in enumerate(stream.methods)} if stream is not None else {}
    labelled = history.tally.labelled

    def cell(value, fmt: str) -> str:
        return fmt.format(value) if value is not None else "–"

    body = []
    for rank, row in enumerate(rows, 1):
        color = CLIP_COLOR if row["method"] == "clip" else palette.method_color(order.get(row["method"], 0))
        marks = "".join(f' <span class="mark">{html.escape(m)}</span>' for m in row.get("marks") or [])
        fixed = f"{row.get('fixed', 0)} · {row.get('broke', 0)}" if labelled and row["method"] != "clip" else "–"
        body.append(
            f'<tr data-method="{html.escape(row["method"])}"><td class="rank">{rank if labelled else ""}</td>'
            f'<td class="name" title="{html.escape(row["title"])}"><i style="background:{color}"></i>'
            f"{html.escape(row['title'])}{marks}</td>"
            f"<td>{cell(row.get('accuracy'), '{:.1f}%')}</td><td>{cell(row.get('agreement'), '{:.1f}%')}</td>"
            f"<td>{fixed}</td><td>{cell(row.get('ms_per_frame'), '{:.1f}')}</td></tr>"
        )
    what = "best accuracy first" if labelled else "no ground truth: no accuracy"
    return (
        f'<figure class="mstta-chart mstta-board" id="mstta-leaderboard-chart"><figcaption><b>Leaderboard</b>'
        f"<span>{frames(history.processed)}, {what}</span></figcaption><table><thead><tr><th></th><th>method</th>"
        f'<th>accuracy</th><th title="agrees with CLIP">agree</th><th title="frames CLIP got wrong and it got right · '
        f'the reverse">fixed · broke</th>'
        f'<th title="milliseconds per frame: encoder pass + its own step">ms / frame</th></tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></figure>"
    )


def per_class_chart(history: History, title: str) -> str:
    """Per-class accuracy of CLIP and the first method on labelled frames (two bars per class)."""
    rows = []
    for name, (n, clip, tta) in history.per_class.items():
        rows.append((f"{name} · CLIP ({n})", clip / n, CLIP_COLOR))
        rows.append((f"{name} · {title}", tta / n, ADAPTED_COLOR))
    return hbar_chart(
        "mstta-per-class",
        "Per-class accuracy (labelled frames; frames in brackets)",
        rows,
        x_max=1.0,
        x_title="accuracy (%)",
        percent=True,
    )


def disagreement_strip(history: History, title: str) -> str:
    """The newest frames where CLIP and the first method disagree, newest first: both predictions
    and the truth; a picture grows when clicked (focused)."""
    items = []
    for d in history.disagreements:
        verdict = ""
        if d.truth is not None:
            verdict = (
                " fixed"
                if d.tta == d.truth and d.clip != d.truth
                else " broke"
                if d.clip == d.truth and d.tta != d.truth
                else ""
            )
        picture = (
            f'<img tabindex="0" src="{d.thumbnail}" alt="frame {d.x}" title="click to enlarge"/>' if d.thumbnail else ""
        )
        truth = f'<span class="truth">truth <b>{html.escape(d.truth)}</b></span>' if d.truth is not None else ""
        items.append(
            f'<div class="item{verdict}" data-frame="{d.x}">{picture}<span>frame {d.x}</span>'
            f'<span class="clip">CLIP <b>{html.escape(d.clip)}</b></span>'
            f'<span class="tta">{html.escape(title)} <b>{html.escape(d.tta)}</b></span>{truth}</div>'
        )
    if not items:
        items.append('<div class="empty">No disagreement yet.</div>')
    return (
        f'<figure class="mstta-chart mstta-strip" id="mstta-disagreements-chart"><figcaption><b>Frames where '
        f"CLIP and {html.escape(title)} disagree</b><span>newest first; click a frame to enlarge</span>"
        f'</figcaption><div class="strip">{"".join(items)}</div></figure>'
    )


def thumbnail(image, width: int = 240) -> str:
    """A small JPEG of an RGB frame as a data: URL (for the disagreement strip)."""
    import base64
    import io

    from PIL import Image

    picture = Image.fromarray(image)
    if picture.width > width:
        picture = picture.resize((width, max(1, round(picture.height * width / picture.width))))
    buffer = io.BytesIO()
    picture.save(buffer, format="JPEG", quality=80)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def topk_chart(chart_id: str, items: Sequence[Scored], color: str, title: str) -> str:
    """One method's top-k for the current frame, best first."""
    rows = [(s.label, float(s.prob), color if i == 0 else "#9ca3af") for i, s in enumerate(items)]
    return hbar_chart(chart_id, f"{title} (probability, %)", rows, x_max=1.0, x_title="", percent=True)


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
    if not stream.method.cache:
        return f"Cache occupancy per class: none, {title} keeps no cache"
    return f"{title} cache occupancy per class (Q = {stream.config.capacity})"


# ---------------------------------------------------------------------------- page text (HTML, Markdown)
def verdict_html(result: FrameResult | None) -> str:
    """The agree / DISAGREE banner for the current frame."""
    if result is None:
        return '<div id="mstta-verdict-box" class="none">No frame processed yet</div>'
    clip, tta = html.escape(result.clip_label), html.escape(result.tta_label)
    title = html.escape(method_title(result.method))
    if result.disagree:
        text = f'✗ DISAGREE: CLIP says <b class="name">{clip}</b>, {title} says <b class="name">{tta}</b>'
        return f'<div id="mstta-verdict-box" class="disagree" title="{_plain(text)}">{text}</div>'
    text = f'✓ Agree: CLIP and {title} both say <b class="name">{clip}</b>'
    return f'<div id="mstta-verdict-box" class="agree" title="{_plain(text)}">{text}</div>'


def _plain(markup: str) -> str:
    """The banner's text without its tags (the hover text when it is cut short), attribute-safe."""
    import re

    return re.sub(r"<[^>]+>", "", markup).replace('"', "&quot;")


RANDOM_WEIGHTS_HTML = (
    '<div id="mstta-random-weights" role="alert">⚠️ Random weights — predictions are '
    "meaningless <span>(<code>--pretrained none</code>: for trying the UI only)</span></div>"
)


def frames(n: int) -> str:
    """'1 frame', '12 frames'."""
    return f"{n} {plural(n, 'frame')}"


def speed(h: History) -> str:
    """The run's one speed figure, as the numbers line and the summary say it: the model's mean time
    per processed frame (the encoder pass plus every raced method's step), in ms."""
    return f"{h.tally.mean_ms:.1f} ms per frame" if h.processed else ""


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
    parts.append(f"{speed(h)} ({views} views)" if views > 1 else speed(h))
    if skipped:
        parts.append(f"{frames(skipped)} skipped to keep real time")
    return " · ".join(parts)


def run_summary(h: History, seconds: float, title: str, skipped: int = 0) -> str:
    """The end-of-run summary, the same for a video and the webcam: frames, the time it took, the
    speed (`speed`), agreement, switches, frames skipped to keep real time, and accuracy when
    frames were labelled."""
    t = h.tally
    text = (
        f"{frames(h.processed)} processed in {seconds:.1f} s ({speed(h)}); agreement "
        f"{h.agreement:.1f}%; switches CLIP {t.switches['clip']}, {title} {t.switches['tta']}"
    )
    if skipped:
        text += f"; {frames(skipped)} skipped to keep real time"
    if h.labelled:
        text += f"; accuracy CLIP {t.accuracy('clip'):.1f}%, {title} {t.accuracy('tta'):.1f}% ({h.labelled} labelled)"
    return text + "."


def progress_bar(done: int, expected: int | None, width: int = 24) -> str:
    """`  ▰▰▰▱▱▱ 42%` for the status line (nothing when the length is unknown)."""
    if not expected:
        return ""
    fraction = min(1.0, done / expected)
    filled = int(round(fraction * width))
    return f"  {'▰' * filled}{'▱' * (width - filled)} {100 * fraction:.0f}%"
