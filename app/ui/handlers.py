"""What each control does: top-level functions over an explicit `Context` (what all sessions share)
and one session's `UISession`, returning the page's new content by output name.

    page = apply(ctx, ui, form, truth_file)          # {"status": ..., "cache": ..., ...}
    for page in process_video(ctx, ui, video, truth_file, every, keep, form): ...

A page is a dict from output names (`OUTPUTS`) to values; a name left out keeps what the browser
shows (`app.ui.events` maps names to components). Light actions (apply, reset, stop, drop_truth,
webcam_tick) touch only their own session, under its lock; every encoder call (text or image)
takes one of the shared model slots, and a video run takes it frame by frame (`iter_steps`), so
other sessions interleave. A `UserError` becomes a status line; the session is left as it was.
"""
from __future__ import annotations

import contextlib
import csv
import dataclasses
import html
import io
import logging
import time
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator, Sequence

import numpy as np

from mstta.config import EngineConfig
from mstta.errors import UserError, one_line
from mstta.methods import get_method

from ..annotate import annotate
from ..frames import MAX_PIXELS, decode_image, shrink
from ..labels import read_labels
from ..pipeline import expected_frames, iter_steps
from ..sampling import Sampler, default_every
from ..session import StreamSession
from ..truth import Truth, read_truth
from . import plots
from .state import ModelSlots, Sessions, Settings, UISession, apply_settings, int_control, read_settings

log = logging.getLogger(__name__)

# Every output a handler may set, in the order of the components (gradio_client users get them so).
OUTPUTS = ("status", "verdict", "frame", "clip_topk", "tta_topk", "stats", "confidence", "agreement", "switches",
           "cache", "accuracy", "result", "drop_truth", "truth", "state")
ASSETS_DIR = Path(__file__).resolve().parent.parent.parent / "assets"
VIDEO_TYPES = (".mp4", ".m4v", ".mov", ".avi", ".mkv", ".webm", ".mpg", ".mpeg", ".wmv", ".flv", ".ogv")
WEBCAM_END_S = 5.0               # the webcam run has ended when no frame came for this long (a slow
                                 # browser sends about one frame a second)
UPLOAD_KEEP_MIN = 15             # uploads and shown frames are deleted after this many minutes


@dataclasses.dataclass
class Context:
    """What every session shares: the model, the defaults of the controls, the slots, the registry."""

    clip: Any
    base: EngineConfig
    slots: ModelSlots
    sessions: Sessions
    views: int = 1
    topk: int = 3
    max_frames: int | None = None
    max_pixels: int = MAX_PIXELS
    update_interval: float = 0.25    # a video run refreshes the frame and bars at most this often (s)
    plot_interval: float = 1.0       # ... and the plots over time at most this often (0: every frame)
    demo_clip: tuple[str, str, str | None] | None = None   # (video, labels text, truth CSV)

    def new_stream(self, s: Settings) -> StreamSession:
        return StreamSession(self.clip, list(s.labels), template=s.template, method=s.method, config=s.config,
                             views=self.views, topk=self.topk)

    def model_and(self, ui: UISession) -> Callable[[], ContextManager[None]]:
        """A model slot, then the session's lock (always in this order: no deadlock)."""
        @contextlib.contextmanager
        def both() -> Iterator[None]:
            with self.slots(), ui.lock:
                yield
        return both


# ---------------------------------------------------------------------------- page content
def shown(visible: bool) -> Any:
    """An update that shows or hides a component."""
    import gradio as gr

    return gr.update(visible=visible)


def warn(message: str) -> str:
    return f"⚠️ {message}"


def render(ui: UISession, status: str, *, image: np.ndarray | None = None, result=None, fps: float | None = None,
           truth: str | None = None, plots_too: bool = True, clear_frame: bool = False) -> dict[str, Any]:
    """The page for the session's current state; `image` with `result` redraws the frame."""
    s, h = ui.stream, ui.history
    title = plots.method_title(s.method) if s is not None else "adapted"
    topk = s.topk if s is not None else 3
    page: dict[str, Any] = {
        "status": status,
        "verdict": plots.verdict_html(result),
        "clip_topk": plots.topk_chart("mstta-clip-topk", result.clip_topk if result else [], plots.CLIP_COLOR,
                                      f"CLIP zero-shot: top-{topk}"),
        "tta_topk": plots.topk_chart("mstta-tta-topk", result.tta_topk if result else [], plots.ADAPTED_COLOR,
                                     f"{title}: top-{topk}"),
        "stats": plots.stats_markdown(h, s, fps),
        "result": result.to_dict() if result is not None else None,
        "state": ui,
    }
    if image is not None and result is not None:
        page["frame"] = annotate(image, result, fps=fps, bank_limit=s.config.bank_size if s else None, truth=truth)
    elif clear_frame:
        page["frame"] = None
    if plots_too:
        fill = result.cache_per_class if result is not None else [0] * len(s.labels if s else [])
        page |= {
            "confidence": plots.confidence_chart(h, title),
            "agreement": plots.agreement_chart(h, title),
            "switches": plots.switches_chart(h, title),
            "cache": plots.cache_chart(s.labels if s else [], fill, s.config.capacity if s else None,
                                       plots.cache_title(s)),
            "accuracy": plots.accuracy_chart(h, title),
        }
    return page


def empty_page(ui: UISession | None = None, status: str = "") -> dict[str, Any]:
    """The page before anything ran (also what Reset shows)."""
    return render(ui or UISession(), status, clear_frame=True)


def message(ui: UISession, text: str, **extra: Any) -> dict[str, Any]:
    """Only the status line changes (plus `extra` outputs)."""
    return {"status": text, "state": ui} | extra


EXPIRED = ("Session expired: the server keeps a bounded number of sessions and dropped this idle one. "
           "Press **Reset** to start again.")


def upload_message(exc: BaseException, path: str | None = None) -> str:
    """A library error as the page shows it: one line, the upload's name instead of its temp path."""
    text = one_line(exc)
    if path is not None:
        shown = f"'{Path(path).name}'"
        for flag in ("--video", "--truth"):
            text = text.replace(f"{flag} {path}", shown)
        text = text.replace(str(path), shown)
    return text.replace("; pass a video file, an image folder or a stream URL", "; upload a video file")


def truth_classes(path: str) -> list[str]:
    """The class names a truth CSV uses (third column), for comparing with the labels box."""
    try:
        text = Path(path).read_bytes().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return []
    names = []
    for row in csv.reader(io.StringIO(text)):
        if len(row) == 3 and not row[0].strip().startswith("#") and row[2].strip().lower() != "label":
            name = " ".join(row[2].split())
            if name and name not in names:
                names.append(name)
    return names


def check_truth(truth_file: str | None, labels: Sequence[str]) -> tuple[Truth | None, str | None]:
    """The truth file read against `labels`, or (None, why) when it names classes the labels lack
    (the page then offers to drop it); other problems are UserErrors."""
    if not truth_file:
        return None, None
    known = {n.casefold() for n in labels}
    missing = [n for n in truth_classes(str(truth_file)) if n.casefold() not in known]
    if missing:
        shown = ", ".join(f"'{n}'" for n in missing[:8]) + (" …" if len(missing) > 8 else "")
        return None, (f"The ground-truth file names {len(missing)} "
                      f"{'class' if len(missing) == 1 else 'classes'} missing from the labels: {shown}. "
                      "Add them to the labels, or press **Drop the ground-truth file**.")
    try:
        return read_truth(truth_file, labels), None
    except UserError as exc:
        raise UserError("Ground truth: " + upload_message(exc, str(truth_file))) from None


def fresh_or_kept(ui: UISession, keep: bool) -> str:
    """A new video or source: empty cache and bank unless `keep`; says which happened."""
    s = ui.stream
    if s is None or ui.source is None:
        return ""
    if keep:
        return (f"Kept adapting across sources: the cache ({ui.history.last.cache_size if ui.history.last else 0} "
                "entries) and bank carry over. ")
    s.reset()
    return "Fresh stream: empty cache and bank. "


# ---------------------------------------------------------------------------- handlers
def apply(ctx: Context, ui: UISession, form: Sequence[Any], truth_file: str | None) -> dict[str, Any]:
    """Apply the labels and settings now (builds the classifier; restarts the engine if changed)."""
    if ui.expired:
        return message(ui, warn(EXPIRED))
    settings = read_settings(*form, ctx.base)
    _, truth_problem = check_truth(truth_file, settings.labels)
    with ctx.model_and(ui)():
        existed = ui.stream is not None
        note = apply_settings(ui, settings, ctx.new_stream)
    extra = {"drop_truth": shown(truth_problem is not None)}
    if truth_problem:
        return render(ui, warn(truth_problem), clear_frame=True) | extra
    if existed and note is None:
        return message(ui, "Labels and settings unchanged.", **extra)
    text = note or f"Ready: {len(settings.labels)} classes, {plots.method_title(settings.method)}."
    return render(ui, text, clear_frame=True) | extra


def reset(ctx: Context, ui: UISession) -> dict[str, Any]:
    """Forget the adaptation: empty cache and bank, plots start over; the classifier stays."""
    with ui.lock:
        ui.expired = False
        if ui.stream is not None:
            ui.stream.reset()
        ui.restart_history(ui.source)
    return render(ui, "Adaptation state cleared: empty cache and bank.", clear_frame=True)


def stop(ui: UISession) -> dict[str, Any]:
    """Ask the running video to end after its current frame; the run itself then reports."""
    if not ui.runs:
        return message(ui, "Nothing to stop: no video is being processed.")
    ui.stop_at = time.monotonic()
    return {"state": ui}   # a message here could land after the run's last page and hide it


def drop_truth(ui: UISession) -> dict[str, Any]:
    """Forget the ground-truth file (its classes do not match the labels)."""
    return message(ui, "Ground-truth file dropped: runs show no accuracy until you load one that matches the labels.",
                   truth=None, drop_truth=shown(False))


def method_info(method: str) -> tuple[str, dict[str, str]]:
    """The method's one-line description, and the controls that do nothing for it -> why (shown
    under them and on hover; "" = in use)."""
    m = get_method(method)
    no_ms = "" if m.mean_shift else f"Unused: {m.title} has no mean shift"
    no_cache = "" if m.cache else f"Unused: {m.title} keeps no cache"
    return m.summary, {"k": no_ms, "alpha": no_ms, "bank": no_ms, "lam": no_cache, "capacity": no_cache}


def process_video(ctx: Context, ui: UISession, video: str | None, truth_file: str | None, every: Any,
                  keep: bool, form: Sequence[Any]) -> Iterator[dict[str, Any]]:
    """Process a video file, streaming pages as frames are done (one frame loop: `iter_steps`)."""
    if ui.expired:
        yield message(ui, warn(EXPIRED))
        return
    if not video:
        raise UserError("No video yet: upload one" + (" or use the demo clip" if ctx.demo_clip else "")
                        + ", then press Process video.")
    name = Path(str(video)).name
    if not Path(str(video)).exists():
        raise UserError(f"'{name}' is no longer on the server (uploads are kept {UPLOAD_KEEP_MIN} minutes); "
                        "upload it again.")
    settings = read_settings(*form, ctx.base)
    step = int_control(every, "Every N-th frame") if every not in (None, "") else 0
    if step < 0:
        raise UserError(f"Every N-th frame: {step} is negative; use 0 for about 5 frames per second")
    truth, truth_problem = check_truth(truth_file, settings.labels)
    source = open_video(str(video), ctx.max_pixels)
    with contextlib.ExitStack() as stack:
        stack.enter_context(source)
        with ctx.model_and(ui)():
            note = apply_settings(ui, settings, ctx.new_stream)
            prefix = (note + " ") if note else fresh_or_kept(ui, keep)
            ui.restart_history(f"video:{name}")
            ui.runs += 1
        stack.callback(_ended, ui)
        if truth_problem:
            prefix = warn("Accuracy off: " + truth_problem) + " " + prefix
        yield from _run(ctx, ui, source, name, step or default_every(source.fps), truth, prefix)


def _ended(ui: UISession) -> None:
    with ui.lock:
        ui.runs -= 1


def _run(ctx: Context, ui: UISession, source, name: str, every: int, truth: Truth | None,
         prefix: str) -> Iterator[dict[str, Any]]:
    """The video run: `iter_steps` does the frames; pages go out at most every `update_interval` s."""
    session, title = ui.stream, plots.method_title(ui.stream.method)
    expected = expected_frames(source, every, ctx.max_frames)
    started, start = time.monotonic(), time.perf_counter()
    last_page = last_plots = 0.0
    pending = None
    stopped = False
    shown = html.escape(name)
    try:
        for st in iter_steps(Sampler(every)(source), session, truth=truth, max_frames=ctx.max_frames,
                             model_slot=ctx.model_and(ui)):
            with ui.lock:
                if ui.stream is not session:   # the page closed or the session was dropped mid-run
                    return
                ui.history.update(st.result, st.truth_label)
            of = f" of ~{expected}" if expected else ""
            status = (f"{prefix}Processing **{shown}**: frame {st.processed}{of} (every {every})"
                      f"{plots.progress_bar(st.processed, expected)}")
            now = time.perf_counter()
            if ctx.update_interval <= 0 or now - last_page >= ctx.update_interval:
                plots_too = ctx.plot_interval <= 0 or now - last_plots >= ctx.plot_interval
                last_page, last_plots = now, (now if plots_too else last_plots)
                pending = None
                with ui.lock:
                    page = render(ui, status, image=st.frame.image, result=st.result, fps=st.fps,
                                  truth=st.truth_label, plots_too=plots_too)
                yield page | {"result": st.result.to_dict() | {"frame": st.frame.index}}
            else:
                pending = st
            if ui.stop_at > started:
                stopped = True
                break
    except OSError as exc:   # a decoder failing mid-file
        failure = f"{name}: reading the video failed after {ui.history.processed} frames ({one_line(exc)[:200]})"
        log.warning("%s", failure)
        yield render(ui, warn(failure), result=ui.history.last)
        return
    seconds = time.perf_counter() - start
    h = ui.history
    log.info("%s: %d frames processed in %.1f s%s", name, h.processed, seconds, " (stopped)" if stopped else "")
    if h.processed == 0:
        text = "Stopped before the first frame." if stopped else warn(f"{name}: no frame could be processed.")
        yield render(ui, text, clear_frame=True)
        return
    summary = plots.run_summary(h, seconds, title)
    if stopped:
        status = (f"Stopped after {h.processed} frames of **{shown}**: {summary} The adaptation state is kept "
                  "(**Reset** clears it).")
    else:
        status = f"{prefix}Done: **{shown}**, {summary} (every {every})"
    with ui.lock:
        if pending is not None:
            page = render(ui, status, image=pending.frame.image, result=pending.result, fps=pending.fps,
                          truth=pending.truth_label)
        else:   # the last frame is on the page already: keep its picture, refresh the rest
            page = render(ui, status, result=h.last)
    yield page


def open_video(path: str, max_pixels: int = MAX_PIXELS):
    """Open an uploaded (or preloaded) video file; folders and streams are the headless demo's."""
    from ..sources import classify_source, open_source

    kind, _ = classify_source(path)
    if kind != "file":
        raise UserError(f"--video {path}: the browser UI plays video files; use --headless for folders, "
                        "streams and cameras")
    try:
        return open_source(path, max_pixels=max_pixels)
    except UserError as exc:
        raise UserError(upload_message(exc, path)) from None


def read_frame(data: str | bytes | None, max_pixels: int) -> np.ndarray:
    """A webcam/API frame (a file path or the image's bytes): refused from its header above the pixel
    limit, then scaled down early (`frames.shrink`)."""
    if not data:
        raise UserError("no image received")
    return shrink(decode_image(data if isinstance(data, bytes) else str(data), max_pixels, what="frame"))


def process_frame(ctx: Context, ui: UISession, image_path: str | bytes | None, keep: bool,
                  form: Sequence[Any]) -> dict[str, Any]:
    """One webcam (or API) frame: adapt, predict, draw."""
    if ui.expired:
        return message(ui, warn(EXPIRED))
    if not image_path:
        return {"state": ui}
    image = read_frame(image_path, ctx.max_pixels)
    settings = read_settings(*form, ctx.base)
    with ctx.model_and(ui)():
        note = apply_settings(ui, settings, ctx.new_stream)
        prefix = ""
        if ui.source != "webcam":
            prefix = (note + " ") if note else fresh_or_kept(ui, keep)
            ui.restart_history("webcam")
            ui.webcam_started = time.monotonic()
        elif note:
            prefix = note + " "
        result = ui.stream.process(image)
        ui.history.update(result)
        ui.webcam_frames += 1
        ui.webcam_last = time.monotonic()
        fps = ui.meter.tick()
        index = ui.webcam_frames
    ui.last_error = None
    now = time.monotonic()
    plots_too = bool(prefix) or ctx.plot_interval <= 0 or now - ui.last_plots >= ctx.plot_interval
    if plots_too:
        ui.last_plots = now
    with ui.lock:
        page = render(ui, f"{prefix}Webcam: frame {index} processed.", image=image, result=result, fps=fps,
                      plots_too=plots_too)
    return page | {"result": result.to_dict() | {"frame": index - 1}}


def webcam_tick(ui: UISession) -> dict[str, Any] | None:
    """The webcam run's end-of-run summary, once frames stopped coming for `WEBCAM_END_S`."""
    with ui.lock:
        if ui.source != "webcam" or not ui.webcam_frames or ui.stream is None:
            return None
        if time.monotonic() - ui.webcam_last < WEBCAM_END_S:
            return None
        title = plots.method_title(ui.stream.method)
        text = plots.run_summary(ui.history, max(ui.webcam_last - ui.webcam_started, 1e-3), title)
        ui.source = "webcam-done"   # reported once; the next frame starts a new run
        return render(ui, f"Webcam stopped: {text}", result=ui.history.last)


def demo_clip() -> tuple[str, str, str | None] | None:
    """The bundled demo clip as (video, labels text, truth CSV), or None when assets/ lacks it."""
    video, labels, truth = ASSETS_DIR / "demo.mp4", ASSETS_DIR / "labels.txt", ASSETS_DIR / "truth.csv"
    if not (video.is_file() and labels.is_file()):
        return None
    try:
        names = read_labels(labels)
    except UserError as exc:
        log.warning("not offering the demo clip: %s", exc)
        return None
    return str(video), "\n".join(names), str(truth) if truth.is_file() else None
