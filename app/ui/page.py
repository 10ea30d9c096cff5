"""The page's content by output name: what every handler returns (a dict from `OUTPUTS` names to
values; a name left out keeps what the browser shows), drawn from one session's state.

    page = render(ui, "Ready.", clear_frame=True)     # status, verdict, charts, stats, plots...
    page = message(ui, warn("Bank size: ..."))        # only the status line changes
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from mstta.errors import UserError, one_line

from ..annotate import RANDOM_WEIGHTS_MARK, random_weights
from ..truth import Truth, read_truth
from . import plots
from .state import UISession

# Every output a handler may set, in the order of the components (gradio_client users get them so).
OUTPUTS = (
    "status",
    "verdict",
    "frame",
    "clip_topk",
    "tta_topk",
    "stats",
    "confidence",
    "agreement",
    "switches",
    "cache",
    "accuracy",
    "leaderboard",
    "gain",
    "per_class",
    "disagreements",
    "result",
    "downloads",
    "drop_truth",
    "truth",
    "title",
    "banner",
    "state",
)
EXPIRED = (
    "Session expired: the server keeps a bounded number of sessions and dropped this idle one. "
    "Press **Reset** to start again."
)


def shown(visible: bool) -> Any:
    """An update that shows or hides a component."""
    import gradio as gr

    return gr.update(visible=visible)


def offered(files: list[str] | None) -> Any:
    """The downloads box: the run's files, shown; or hidden while there are none (a run going on)."""
    import gradio as gr

    return gr.update(value=files or None, visible=bool(files))


def warn(text: str) -> str:
    return f"⚠️ {text}"


def record_options(ui: UISession) -> dict[str, Any]:
    """A UI run's `FrameRecord` options: frames counted into the session's history (a thumbnail of
    those where CLIP and the method disagree), pictures annotated as the page shows them and the MP4
    holds them (no fps on them: the page's one speed figure is the numbers line's, `plots.speed`)."""
    s = ui.stream

    def count(step) -> None:
        ui.history.update(
            step.result,
            step.truth_label,
            plots.thumbnail(step.frame.image) if step.result.disagree else None,
            step.frame.index,
        )

    return dict(
        counts=count,
        mark=RANDOM_WEIGHTS_MARK if s is not None and random_weights(s.clip) else None,
        bank_limit=s.config.bank_size if s is not None else None,
    )


def render(
    ui: UISession,
    status: str,
    *,
    image: np.ndarray | None = None,
    result=None,
    fps: float | None = None,
    plots_too: bool = True,
    clear_frame: bool = False,
    views: int = 1,
    skipped: int = 0,
) -> dict[str, Any]:
    """The page for the session's current state; `image` (already annotated) with `result` redraws the frame."""
    s, h = ui.stream, ui.history
    views = s.encoder.views if s is not None else views
    title = s.method.title if s is not None else "adapted"
    topk = s.topk if s is not None else 3
    page: dict[str, Any] = {
        "status": status,
        "verdict": plots.verdict_html(result),
        "clip_topk": plots.topk_chart(
            "mstta-clip-topk", result.clip_topk if result else [], plots.CLIP_COLOR, f"CLIP zero-shot: top-{topk}"
        ),
        "tta_topk": plots.topk_chart(
            "mstta-tta-topk", result.tta_topk if result else [], plots.ADAPTED_COLOR, f"{title}: top-{topk}"
        ),
        "stats": plots.stats_markdown(h, s, fps, views, skipped),
        "result": result.to_dict() if result is not None else None,
        "state": ui,
    }
    if s is not None:  # the model this session runs (Settings can switch it)
        page["title"] = title_md(s.clip, views)
        page["banner"] = plots.RANDOM_WEIGHTS_HTML if random_weights(s.clip) else ""
    if image is not None and result is not None:
        page["frame"] = image
    elif clear_frame:
        page["frame"] = None
    if plots_too:
        fill = result.cache_per_class if result is not None else [0] * len(s.labels if s else [])
        page |= {
            "confidence": plots.confidence_chart(h, title),
            "agreement": plots.agreement_chart(h, title),
            "switches": plots.switches_chart(h, title),
            "cache": plots.cache_chart(
                s.labels if s else [], fill, s.config.capacity if s else None, plots.cache_title(s)
            ),
            "accuracy": plots.accuracy_chart(
                h, title, ui.truth_state, [m.title for m in s.methods] if s is not None else None
            ),
            "leaderboard": plots.leaderboard_html(h, s),
            "gain": plots.gain_chart(h, title, [m.title for m in s.methods] if s is not None else None),
            "per_class": plots.per_class_chart(h, title),
            "disagreements": plots.disagreement_strip(h, title),
        }
    return page


def title_md(clip: Any, views: int) -> str:
    shown = f", {views} views per frame" if views > 1 else ""
    return (
        f"**MS-TTA live** · zero-shot CLIP vs test-time adaptation · model **{getattr(clip, 'name', '?')}** "
        f"({getattr(clip, 'pretrained', '?')}) on {getattr(clip, 'device', '?')}{shown}"
    )


def empty_page(ui: UISession | None = None, status: str = "") -> dict[str, Any]:
    """The page before anything ran (also what Reset shows)."""
    return render(ui or UISession(), status, clear_frame=True)


def message(ui: UISession, text: str, **extra: Any) -> dict[str, Any]:
    """Only the status line changes (plus `extra` outputs)."""
    return {"status": text, "state": ui} | extra


def upload_message(exc: BaseException, path: str | None = None) -> str:
    """A library error as the page shows it: one line, the upload's name instead of its temp path."""
    text = one_line(exc)
    if path is not None:
        name = f"'{Path(path).name}'"
        for flag in ("--video", "--truth"):
            text = text.replace(f"{flag} {path}", name)
        text = text.replace(str(path), name)
    return text.replace("; pass a video file, an image folder or a stream URL", "; upload a video file")


MAX_TRUTH_FIELD = 4096  # characters of one truth CSV field (a class name; the csv module's limit is 131,072)


def truth_classes(path: str) -> list[str]:
    """The class names a truth CSV uses (third column), for comparing with the labels box."""
    try:
        text = Path(path).read_bytes().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return []
    names: list[str] = []
    try:
        for row in csv.reader(io.StringIO(text)):
            if any(len(field) > MAX_TRUTH_FIELD for field in row):
                raise UserError(
                    f"Ground truth: '{Path(path).name}' has a field over {MAX_TRUTH_FIELD:,} "
                    "characters; a truth CSV holds start_frame,end_frame,label lines"
                )
            if len(row) == 3 and not row[0].strip().startswith("#") and row[2].strip().lower() != "label":
                name = " ".join(row[2].split())
                if name and name not in names:
                    names.append(name)
    except csv.Error as exc:
        raise UserError(
            f"Ground truth: '{Path(path).name}' is not a valid CSV ({one_line(exc)[:120]}); "
            "a truth CSV holds start_frame,end_frame,label lines"
        ) from None
    return names


def check_truth(truth_file: str | None, labels: Sequence[str]) -> tuple[Truth | None, str | None]:
    """The truth file read against `labels`, or (None, why) when it names classes the labels lack
    (the page then offers to drop it); other problems are UserErrors."""
    if not truth_file:
        return None, None
    known = {n.casefold() for n in labels}
    missing = [n for n in truth_classes(str(truth_file)) if n.casefold() not in known]
    if missing:
        listed = ", ".join(f"'{n}'" for n in missing[:8]) + (" …" if len(missing) > 8 else "")
        return None, (
            f"The ground-truth file names {len(missing)} "
            f"{'class' if len(missing) == 1 else 'classes'} missing from the labels: {listed}. "
            "Add them to the labels, or press **Drop the ground-truth file**."
        )
    try:
        return read_truth(truth_file, labels), None
    except UserError as exc:
        raise UserError("Ground truth: " + upload_message(exc, str(truth_file))) from None
    except (csv.Error, ValueError, OverflowError) as exc:  # the reader's own limits, as one line
        raise UserError(
            f"Ground truth: '{Path(str(truth_file)).name}' could not be read ({one_line(exc)[:120]})"
        ) from None
