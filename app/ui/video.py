"""A video run in the browser: the pipeline's one frame loop (`iter_steps`) over a paced source.

    for page in process_video(ctx, ui, form): ...    # form: video, truth, every, keep, realtime + settings

Real time (the default) plays the video at its own rate: the newest frame due is processed and
the ones the engine cannot keep up with are skipped and counted (`app.pacing.Pacer`); "as fast as
possible" processes every sampled frame at once. Every processed frame goes into the run's
downloads (annotated MP4 + JSONL); the page is refreshed at most every `ctx.update_interval` s
(frame, bars and plots together), and the last page is always sent.
"""
from __future__ import annotations

import contextlib
import html
import logging
import time
from pathlib import Path
from typing import Any, Iterator, Mapping

from mstta.errors import UserError, one_line

from ..frames import MAX_PIXELS
from ..pacing import Pacer
from ..pipeline import Step, expected_frames, iter_steps
from ..sampling import Sampler, default_every
from ..truth import Truth
from . import plots
from .handlers import Context, fresh_or_kept
from .page import EXPIRED, check_truth, message, offered, picture, render, upload_message, warn
from .state import UISession, apply_settings, int_control

log = logging.getLogger(__name__)

VIDEO_TYPES = (".mp4", ".m4v", ".mov", ".avi", ".mkv", ".webm", ".mpg", ".mpeg", ".wmv", ".flv", ".ogv")
UPLOAD_KEEP_MIN = 15             # uploads and shown frames are deleted after this many minutes


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


def _checked(ctx: Context, form: Mapping[str, Any]) -> tuple[str, Any, int, Truth | None, str | None]:
    """The run's inputs checked before anything changes: video path, settings, stride, truth."""
    video = form.get("video")
    if not video:
        raise UserError("No video yet: upload one" + (" or use the demo clip" if ctx.demo_clip else "")
                        + ", then press Process video.")
    if not Path(str(video)).exists():
        raise UserError(f"'{Path(str(video)).name}' is no longer on the server (uploads are kept "
                        f"{UPLOAD_KEEP_MIN} minutes); upload it again.")
    settings = ctx.settings(form)
    every = form.get("every")
    step = int_control(every, "Every N-th frame") if every not in (None, "") else 0
    if step < 0:
        raise UserError(f"Every N-th frame: {step} is negative; use 0 for about 5 frames per second")
    truth, problem = check_truth(form.get("truth"), settings.labels)
    return str(video), settings, step, truth, problem


def process_video(ctx: Context, ui: UISession, form: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Process a video file, streaming pages as frames are done."""
    if ui.expired:
        yield message(ui, warn(EXPIRED))
        return
    video, settings, step, truth, problem = _checked(ctx, form)
    name = Path(video).name
    source = open_video(video, ctx.max_pixels)
    with contextlib.ExitStack() as stack:
        stack.enter_context(source)
        every = step or default_every(source.fps)
        with ctx.model_and(ui)():
            note = apply_settings(ui, settings, ctx.new_stream)
            prefix = (note + " ") if note else fresh_or_kept(ui, bool(form.get("keep")))
            ui.restart_history(f"video:{name}")
            ui.truth_state = "off" if problem else ("loaded" if truth is not None else "none")
            ui.downloads.start(name, fps=source.fps / every)
            ui.runs += 1
        stack.callback(_ended, ui)
        if problem:
            prefix = warn("Accuracy off: " + problem) + " " + prefix
        yield from _run(ctx, ui, source, name, every, truth, prefix, form.get("realtime", True) is not False)


def _ended(ui: UISession) -> None:
    with ui.lock:
        ui.runs -= 1
        ui.downloads.finish()


class _Run:
    """What one video run shows while it goes: its name, stride, pacing and the page's timing."""

    def __init__(self, ctx: Context, ui: UISession, name: str, every: int, expected: int | None, prefix: str,
                 pacer: Pacer):
        self.ctx, self.ui, self.every, self.expected, self.prefix, self.pacer = ctx, ui, every, expected, prefix, pacer
        self.name, self.shown = name, html.escape(name)
        self.last_page = 0.0
        self.pages = 0
        self.started, self.start = time.monotonic(), time.perf_counter()

    def mode(self) -> str:
        nth = "every frame" if self.every == 1 else f"1 frame in {self.every}"
        return f"{nth}, {'real time' if self.pacer.realtime else 'as fast as possible'}"

    def status(self, processed: int) -> str:
        of = f" of ~{self.expected}" if self.expected else ""
        return (f"{self.prefix}Processing **{self.shown}**: frame {processed}{of} ({self.mode()})"
                f"{plots.progress_bar(processed, self.expected)}")

    def page(self, st: Step, status: str, image) -> dict[str, Any]:
        page = render(self.ui, status, image=image, result=st.result, fps=st.fps, views=self.ctx.views,
                      skipped=self.pacer.skipped)
        self.pages += 1
        if self.pages == 1:
            page["downloads"] = offered(None)   # the last run's files are gone: this run's come at its end
        return page | {"result": st.result.to_dict() | {"frame": st.frame.index}}

    def due(self) -> bool:
        now = time.perf_counter()
        if now - self.last_page < self.ctx.update_interval:
            return False
        self.last_page = now
        return True


def _run(ctx: Context, ui: UISession, source, name: str, every: int, truth: Truth | None, prefix: str,
         realtime: bool) -> Iterator[dict[str, Any]]:
    """The run: paced frames through `iter_steps`, recorded, pages at most every `update_interval` s."""
    session = ui.stream
    pacer = Pacer(realtime, stopped=lambda: ui.stop_at > run.started)
    run = _Run(ctx, ui, name, every, expected_frames(source, every, ctx.max_frames), prefix, pacer)
    last: tuple[Step, Any] | None = None
    try:
        for st in iter_steps(pacer(Sampler(every)(source)), session, truth=truth, max_frames=ctx.max_frames,
                             model_slot=ctx.model_and(ui)):
            page = None
            with ui.lock:   # never held across a yield: the next frame may run on another thread
                if ui.stream is not session:   # the page closed or the session was dropped mid-run
                    return
                ui.history.update(st.result, st.truth_label,
                                  plots.thumbnail(st.frame.image) if st.result.disagree else None)
                image = picture(ui, st.frame.image, st.result, st.fps, st.truth_label)
                if ui.downloads.current is not None:
                    ui.downloads.current.write(st.frame, st.result, st.truth_label, image)
                last = (st, image)
                if run.due():
                    page, last = run.page(st, run.status(st.processed), image), None
            if page is not None:
                yield page
            if ui.stop_at > run.started:
                break
    except OSError as exc:   # a decoder failing mid-file
        failure = f"{name}: reading the video failed after {ui.history.processed} frames ({one_line(exc)[:200]})"
        log.warning("%s", failure)
        yield render(ui, warn(failure), result=ui.history.last, views=ctx.views)
        return
    yield _final_page(run, last)


def _final_page(run: _Run, last) -> dict[str, Any]:
    """The run's last page: its summary, the last frame, and the downloads."""
    ui, h = run.ui, run.ui.history
    stopped = ui.stop_at > run.started
    seconds = time.perf_counter() - run.start
    log.info("%s: %d frames processed in %.1f s%s", run.name, h.processed, seconds, " (stopped)" if stopped else "")
    with ui.lock:
        files = ui.downloads.finish()
        if h.processed == 0:
            text = "Stopped before the first frame." if stopped else warn(f"{run.name}: no frame could be processed.")
            return render(ui, text, clear_frame=True, views=run.ctx.views)
        summary = plots.run_summary(h, seconds, ui.stream.method.title, run.pacer.skipped)
        if stopped:
            status = (f"Stopped after {h.processed} frames of **{run.shown}**: {summary} The adaptation state is "
                      "kept (**Reset** clears it).")
        else:
            status = f"{run.prefix}Done: **{run.shown}**, {summary} Processed {run.mode()}."
        if last is not None:
            page = run.page(last[0], status, last[1])
        else:   # the last frame is on the page already: keep its picture, refresh the rest
            page = render(ui, status, result=h.last, views=run.ctx.views, skipped=run.pacer.skipped)
    return page | {"downloads": offered(files)}
