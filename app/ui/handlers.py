"""What each control does: top-level functions over an explicit `Context` (what all sessions share)
and one session's `UISession`, returning the page's new content by output name (`app.ui.page`).

    page = apply(ctx, ui, form)                      # form: the settings by name (`state.FORM`) + truth
    page = process_frame(ctx, ui, form)              # one webcam frame; video runs are in `app.ui.video`

Light actions (apply, reset, stop, drop_truth, webcam_stop, webcam_tick) touch only their own
session, under its lock; every encoder call (text or image) takes one of the shared model slots.
A `UserError` becomes a status line; the session is left as it was.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from mstta.errors import UserError
from mstta.features.models import ASSETS_DIR

from ..forgetting import parse_racer
from ..frames import MAX_PIXELS, decode_image, shrink
from ..labels import read_labels
from ..pipeline import step_once
from ..record import FrameRecord
from ..sources import Frame
from . import plots
from .context import Context, fresh_or_kept
from .memory import release_memory
from .models import crop_warning
from .page import EXPIRED, check_truth, message, offered, record_options, render, shown, warn
from .state import CONTROLS, UISession, apply_settings

log = logging.getLogger(__name__)

WEBCAM_LATE_S = 2.0  # frames still in flight this long after Stop are dropped (not a new run)


def apply(ctx: Context, ui: UISession, form: Mapping[str, Any]) -> dict[str, Any]:
    """Apply the labels and settings now: the classifier is rebuilt if they changed, and the
    adaptation always starts afresh (empty cache and bank, plots start over), as docs/ui.md says."""
    if ui.expired:
        return message(ui, warn(EXPIRED))
    settings = ctx.settings(form)
    _, truth_problem = check_truth(form.get("truth"), settings.labels)
    with ctx.model_and(ui)():
        note = apply_settings(ui, settings, ctx.new_stream, restart=True)
        ui.truth_state = "off" if truth_problem else ("loaded" if form.get("truth") else "none")
    extra = {"drop_truth": shown(truth_problem is not None)}
    if truth_problem:
        return render(ui, warn(truth_problem), clear_frame=True, views=ctx.views) | extra
    text = note or f"Ready: {len(settings.labels)} classes, {ui.stream.method.title}."
    text = " ".join(filter(None, (text, crop_warning(ui.stream.clip.name, ui.stream.encoder.views))))
    return render(ui, text, clear_frame=True, views=ctx.views) | extra


def reset(ctx: Context, ui: UISession) -> dict[str, Any]:
    """Forget the adaptation: empty cache and bank, plots start over; the classifier stays."""
    with ui.lock:
        ui.expired = False
        if ui.stream is not None:
            ui.stream.reset()
        ui.restart_history(ui.source)
    return render(ui, "Adaptation state cleared: empty cache and bank.", clear_frame=True, views=ctx.views)


def stop(ui: UISession, autostart: bool = False) -> dict[str, Any]:
    """Ask the running video to end after its current frame; the run itself then reports. With
    `autostart` (the page processes a preloaded video at load) a Stop before that run has begun
    stops it too (it counts from the page's load)."""
    if not ui.runs and not (autostart and not ui.autostarted):
        return message(ui, "Nothing to stop: no video is being processed.")
    ui.stop_at = time.monotonic()
    return {"state": ui}  # a message here could land after the run's last page and hide it


def drop_truth(ui: UISession) -> dict[str, Any]:
    """Forget the ground-truth file (its classes do not match the labels)."""
    return message(
        ui,
        "Ground-truth file dropped: runs show no accuracy until you load one that matches the labels.",
        truth=None,
        drop_truth=shown(False),
    )


def video_changed(ui: UISession, video: str | None, truth: str | None, max_pixels: int = MAX_PIXELS) -> dict[str, Any]:
    """A new video was uploaded: it is opened at once (a file no decoder reads is reported now, not
    at Process); a ground-truth file belongs to one video, so it is dropped, saying so."""
    if video:
        from .video import open_video

        open_video(str(video), max_pixels).close()  # a one-line UserError naming the upload
    if not truth:
        return (
            message(ui, f"Video '{Path(str(video)).name}' loaded: press **Process video**.") if video else {"state": ui}
        )
    return message(
        ui,
        f"New video: the ground-truth file '{Path(str(truth)).name}' belonged to the previous one "
        "and was dropped; add this video's CSV to see accuracy.",
        truth=None,
        drop_truth=shown(False),
    )


def method_info(method: str) -> tuple[str, dict[str, tuple[str, bool]]]:
    """The method's one-line description, and per numeric control its note and whether it is used:
    the control's range when used, why not otherwise (a note is always set, so none goes stale)."""
    m = parse_racer(method, "Method").method
    notes = {}
    for name, (_, whole, low, high) in CONTROLS.items():
        needs_cache = name in ("lam", "capacity")
        used = m.keeps_cache if needs_cache else m.mean_shift
        why = f"Unused: {m.title} keeps no cache" if needs_cache else f"Unused: {m.title} has no mean shift"
        notes[name] = (f"{'whole number, ' if whole else ''}{low:,g} to {high:,g}" if used else why, used)
    cost = f" [per frame: {m.cost}]" if m.cost else ""
    return m.summary + "".join(f" [{mark}]" for mark in m.marks) + cost, notes


def read_frame(data: str | bytes | None, max_pixels: int) -> np.ndarray:
    """A webcam/API frame (a file path or the image's bytes): refused from its header above the pixel
    limit, then scaled down early (`frames.shrink`)."""
    if not data:
        raise UserError("no image received")
    return shrink(decode_image(data if isinstance(data, bytes) else str(data), max_pixels, what="frame"))


def _webcam_start(ctx: Context, ui: UISession, keep: bool, note: str | None) -> str:
    """The first frame of a webcam run (under the session's lock): fresh stream, history, recording."""
    prefix = (note + " ") if note else fresh_or_kept(ui, keep)
    ui.restart_history("webcam")
    ui.webcam.ended = None  # a page of the run before, never shown for this one
    ui.truth_state = "webcam"
    ui.webcam.started = time.monotonic()
    ui.webcam.recording = ui.downloads.start("webcam", fps=5.0, **record_options(ui))
    return prefix


def process_frame(ctx: Context, ui: UISession, form: Mapping[str, Any]) -> dict[str, Any]:
    """One webcam (or API) frame: adapt, predict, draw, record."""
    if ui.expired:
        return message(ui, warn(EXPIRED))
    if not form.get("image") or (ui.source == "webcam-done" and time.monotonic() - ui.webcam.stopped < WEBCAM_LATE_S):
        return {"state": ui}  # nothing sent, or a frame still in flight after Stop
    image = read_frame(form["image"], ctx.max_pixels)
    settings = ctx.settings(form)
    with ctx.model_and(ui)():
        note = apply_settings(ui, settings, ctx.new_stream)
        if ui.source != "webcam":
            prefix = _webcam_start(ctx, ui, bool(form.get("keep")), note)
        else:
            prefix = (note + " ") if note else ""
        frame = Frame(ui.webcam.frames, time.monotonic() - ui.webcam.started, image, "webcam")
        step = step_once(frame, ui.stream, meter=ui.meter, processed=ui.webcam.frames + 1)  # the one frame step
        record = (
            ui.webcam.recording.record
            if ui.webcam.recording is not None
            else FrameRecord(picture=True, **record_options(ui))
        )
        shown_image = record.write(step)  # the one per-frame record: history, JSONL, MP4, picture
        ui.webcam.frames += 1
        ui.webcam.last = time.monotonic()
        result, index = step.result, ui.webcam.frames
        page = render(
            ui,
            f"{prefix}Webcam: frame {index} processed.",
            image=shown_image,
            result=result,
            fps=step.fps,
            views=ctx.views,
        )
    if index == 1:
        page["downloads"] = offered(None)  # the last run's files are gone: this run's come at its end
    return page | {"result": result.to_dict() | {"frame": index - 1}}


def _webcam_end(ctx: Context, ui: UISession, how: str) -> dict[str, Any]:
    """The webcam run's summary and downloads (under the session's lock)."""
    text = plots.run_summary(
        ui.history, max(ui.webcam.last - ui.webcam.started, 1e-3), ui.stream.method.title, views=ui.stream.encoder.views
    )
    ui.source = "webcam-done"  # reported once; the next frame (after WEBCAM_LATE_S) starts a new run
    files = ui.downloads.finish(ui.webcam.recording) if ui.webcam.recording is not None else []
    ui.webcam.recording = None
    release_memory()  # the run's frames and buffers go back to the system
    return render(ui, f"{how}: {text}", result=ui.history.last, views=ctx.views) | {"downloads": offered(files)}


def webcam_stop(ctx: Context, ui: UISession) -> dict[str, Any] | None:
    """The webcam's Stop was pressed: the run's summary and downloads at once."""
    with ui.lock:
        ui.webcam.stopped = time.monotonic()
        if ui.source != "webcam" or not ui.webcam.frames or ui.stream is None:
            page, ui.webcam.ended = ui.webcam.ended, None  # the server ended it first: its page now
            return page
        return _webcam_end(ctx, ui, "Webcam stopped")


def webcam_tick(ctx: Context, ui: UISession) -> dict[str, Any] | None:
    """The page's timer: the summary of a run the server ended (`end_idle_webcam`) once frames
    stopped coming (an API client, a closed camera); None while it runs."""
    with ui.lock:
        end_idle_webcam(ctx, ui)
        page, ui.webcam.ended = ui.webcam.ended, None
        return page


def end_idle_webcam(ctx: Context, ui: UISession, now: float | None = None) -> bool:
    """End `ui`'s webcam run on the server's clock when no frame came for `ctx.webcam_end` s: its
    recording is finished (downloads), its page kept for the page's timer. True when it ended now."""
    with ui.lock:
        if ui.source != "webcam" or not ui.webcam.frames or ui.stream is None:
            return False
        if (time.monotonic() if now is None else now) - ui.webcam.last < ctx.webcam_end:
            return False
        ui.webcam.ended = _webcam_end(ctx, ui, "Webcam ended (no frame for a while)")
        return True


def sweep(ctx: Context) -> int:
    """One pass of the server's own clock over the live sessions (`watch` runs it every second):
    idle webcam runs end. The number ended."""
    ended = 0
    for ui in ctx.sessions.live():
        if ui.source == "webcam" and ui.lock.acquire(blocking=False):  # a session mid-frame is not idle
            try:
                ended += end_idle_webcam(ctx, ui)
            except Exception:  # one session's failure must not stop the clock
                log.exception("ending an idle webcam run failed")
            finally:
                ui.lock.release()
    return ended


def watch(ctx: Context, every: float = 1.0) -> threading.Thread:
    """A daemon thread running `sweep(ctx)` every `every` s while `ctx` lives (held weakly)."""
    ref = weakref.ref(ctx)

    def loop() -> None:
        while True:
            time.sleep(every)
            alive = ref()
            if alive is None:
                return
            sweep(alive)
            del alive

    thread = threading.Thread(target=loop, name="mstta-ui-clock", daemon=True)
    thread.start()
    return thread


def use_demo_clip(ctx: Context, ui: UISession, model_value: Any) -> tuple[str | None, str | None, str | None, str]:
    """ "Use the demo clip": the clip of the model the session chose (its Model box, else the model it
    runs) as (video, labels text, truth CSV, status line saying what was loaded)."""
    from .models import parse_value

    try:
        model = parse_value(model_value, ctx.models.default)[0]
    except UserError:
        model = ui.stream.clip.name if ui.stream is not None else ctx.models.default[0]
    clip = demo_clip(model)
    if clip is None:
        return None, None, None, warn(f"No demo clip for {model} on this server (assets/ lacks it).")
    video, labels, truth = clip
    with_truth = " and its ground truth" if truth else ""
    status = (
        f"Demo clip for {model} loaded: **{Path(video).name}**, its {len(labels.splitlines())} labels{with_truth}. "
        "Press **Process video**."
    )
    return video, labels, truth, status


def demo_clip(model: str | None = None) -> tuple[str, str, str | None] | None:
    """The bundled clip made for `model` as (video, labels text, truth CSV): the digits clip for the
    bundled digits model, the photographs clip for CLIP models (`app.bundled`); None when assets/
    lacks it."""
    from ..bundled import CLIP_DEMO, DIGITS_DEMO

    demo = DIGITS_DEMO if model == DIGITS_DEMO.model else CLIP_DEMO
    video, labels, truth = (ASSETS_DIR / name for name in (demo.video, demo.labels, demo.truth))
    if not (video.is_file() and labels.is_file()):
        log.warning(
            "not offering the demo clip: %s or %s is missing (make it with: %s)", video.name, labels.name, demo.make
        )
        return None
    try:
        names = read_labels(labels)
    except UserError as exc:
        log.warning("not offering the demo clip: %s", exc)
        return None
    return str(video), "\n".join(names), str(truth) if truth.is_file() else None
