"""The drawing primitives of the UI's charts (`app.ui.plots`, `app.ui.race_plots`): round axis
ticks, lines over processed frames as SVG, horizontal bars as HTML, and the names and colours the
charts share. Pure functions over numbers, no Gradio.

    line_chart("mstta-gain", "Gain", [("MS-TTA − CLIP", color, [(1, 0.0), (2, 5.0)])], y_title="points")
    hbar_chart("mstta-cache", "Cache", [("cat", 2, color)], x_max=3, x_title="cache entries", integer_x=True)
"""

from __future__ import annotations

import html
import math
from typing import Sequence

from .. import palette
from ..progress import plural

CLIP_NAME = "CLIP zero-shot"
CLIP_COLOR = palette.CLIP  # one palette with the annotated frame (app.palette)
ADAPTED_COLOR = palette.method_color(0)
X_TITLE = "processed frames"
MARK_NAME, MARK_COLOR = "┊ scene cut detected", "#6b7280"  # the legend key of `line_chart`'s marks


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
    marks: Sequence[tuple[int, str, str]] = (),
) -> str:
    """Lines over processed frames. `series`: (name, colour, [(x, y), ...]); `y_range` None fits the
    data (from 0, whole-number ticks with `integer_y`). An empty series draws axes only. `marks`:
    (x, colour, what) vertical dashed lines at events, e.g. a detected scene cut (its tooltip `what`)."""
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
    for x, color, what in marks:
        if x0 <= x <= x1:
            parts.append(
                f'<line class="cut" data-x="{x}" x1="{sx(x):.1f}" x2="{sx(x):.1f}" y1="{TOP}" y2="{H - BOTTOM}" '
                f'stroke="{color}" stroke-width="1.5" stroke-dasharray="3 3"><title>{html.escape(what)}</title></line>'
            )
    legend = [(n, c) for n, c, _ in series] + ([(MARK_NAME, MARK_COLOR)] if marks else [])
    return _figure(chart_id, title, legend, "".join(parts))


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


def frames(n: int) -> str:
    """'1 frame', '12 frames'."""
    return f"{n} {plural(n, 'frame')}"
