"""The race on the page: how the adapted methods fare against zero-shot CLIP, as markup drawn
from a stream's `History` (`app.ui.state`); no Gradio here, `app.ui.plots` re-exports them.

    leaderboard_html(history, stream)        # CLIP and every raced method: accuracy, agreement, fixed · broke, ms
    accuracy_chart(history, "MS-TTA", "loaded", titles)   # running accuracy of CLIP and every raced method
    gain_chart(history, "MS-TTA"), per_class_chart(history, "MS-TTA")
    disagreement_strip(history, "MS-TTA")    # the newest frames where CLIP and the first method differ
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Sequence

from .. import palette
from .charts import ADAPTED_COLOR, CLIP_COLOR, CLIP_NAME, frames, hbar_chart, line_chart, nice_ticks

if TYPE_CHECKING:
    from ..session import StreamSession
    from .state import History


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


def gain_chart(history: History, title: str, titles: Sequence[str] | None = None) -> str:
    """The gain in sight: each raced method's running accuracy minus CLIP's, in points, around a zero
    line (`titles`: theirs in race order; default the first one's, `title`), with a dashed mark at each
    scene cut a method's forgetting detected (issue 29)."""
    pts = [(p.x, p.gain) for p in history.points if p.gain is not None]
    t = history.tally
    racer = t.racers.get(history.last.method) if history.last is not None and history.last.methods else None
    counts = f" · fixed {racer.fixed} · broke {racer.broke}" if racer is not None and t.labelled else ""
    heading = f"Gain of {title} over CLIP (points){counts}" if pts else f"Gain of {title} over CLIP: needs ground truth"
    series = [(f"{title} − CLIP", palette.method_color(0), pts)]
    for i, name in enumerate(list(titles or [])[1:], 1):
        more = [(p.x, p.accuracy_methods[i] - p.accuracy_clip) for p in history.points if _labelled(p, i)]
        series.append((f"{name} − CLIP", palette.method_color(i), more))
    if len(series) > 1 and pts:
        heading = f"Gain over CLIP (points); {title}{counts}"
    everything = [y for _, _, line in series for _, y in line]
    top = max([abs(y) for y in everything] + [1.0])
    ticks = nice_ticks(0, top, 3)
    bound = ticks[-1] if ticks[-1] >= top else ticks[-1] + (ticks[1] - ticks[0] if len(ticks) > 1 else 1)
    return line_chart(
        "mstta-gain", heading, series, y_title="points", y_range=(-bound, bound), marks=cut_marks(history)
    )


def _labelled(p, i: int) -> bool:
    return p.accuracy_clip is not None and i < len(p.accuracy_methods) and p.accuracy_methods[i] is not None


def cut_marks(history: History) -> list[tuple[int, str, str]]:
    """(x, colour, what) for every scene cut a raced method detected among the plotted frames."""
    from ..session import method_title

    raced = [m.method for m in history.last.methods] if history.last is not None else []
    marks = []
    for i, name in enumerate(raced):
        racer = history.tally.racers.get(name)
        for x, frame in racer.cuts if racer is not None else ():
            at = f"source frame {frame}" if frame is not None else f"processed frame {x}"
            marks.append((x, palette.method_color(i), f"{method_title(name)}: scene cut detected at {at}"))
    return marks


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
