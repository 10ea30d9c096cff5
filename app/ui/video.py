"""A video run in the browser: the pipeline's one frame loop (`iter_steps`) over a paced source.

    for page in process_video(ctx, ui, form): ...    # form: video, truth, every, keep, realtime + settings

Real time (the default) plays the video at its own rate: the newest frame due is processed and
the ones the engine cannot keep up with are skipped and counted (`app.pacing.Pacer`); "as fast as
possible" processes every sampled frame at once. Every processed frame goes into the run's
downloads (annotated MP4 + JSONL); the page is refreshed at most every `ctx.update_interval` s
(frame, bars and plots together), and the last page is always sent.
"""

from __future__ import annotations

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
from .context import Context, fresh_or_kept
from .page import EXPIRED, check_truth, message, offered, record_options, render, upload_message, warn
from .state import UISession, apply_settings, int_control

log = logging.getLogger(__name__)

VIDEO_TYPES = (".mp4", ".m4v", ".mov", ".avi", ".mkv", ".webm", ".mpg", ".mpeg", ".wmv", ".flv", ".ogv")
UPLOAD_KEEP_MIN = 15  # uploads and shown frames are deleted after this many minutes


def open_video(path: str, max_pixels: int = MAX_PIXELS):
    """Open an uploaded (or preloaded) video file; folders and streams are the headless demo's."""
    from ..sources import classify_source, open_source

    kind, _ = classify_source(path)
    if kind != "file":
        raise UserError(
            f"--video {path}: the browser UI plays video files; use --headless for folders, streams and cameras"
        )
    try:
        return open_source(path, max_pixels=max_pixels)
    except UserError as exc:
        raise UserError(upload_message(exc, path)) from None


def _checked(ctx: Context, form: Mapping[str, Any]) -> tuple[str, Any, int, Truth | None, str | None]:
    """The run's inputs checked before anything changes: video path, settings, stride, truth."""
    video = form.get("video")
    if not video:
        raise UserError(
            "No video yet: upload one"
            + (" or use the demo clip" if ctx.demo_clip else "")
            + ", then press Process video."
        )
    if not Path(str(video)).exists():
        raise UserError(
            f"'{Path(str(video)).name}' is no longer on the server (uploads are kept "
            f"{UPLOAD_KEEP_MIN} minutes); upload it again."
        )
    settings = ctx.settings(form)
    if form.get("every") in (None, ""):  # an emptied box is an error, never taken as 0
        raise UserError("Every N-th frame: the box is empty; enter a whole number (0 = about 5 frames per second)")
    step = int_control(form.get("every"), "Every N-th frame")
    if step < 0:
        raise UserError(f"Every N-th frame: {step} is negative; use 0 for about 5 frames per second")
    truth, problem = check_truth(form.get("truth"), settings.labels)
    return str(video), settings, step, truth, problem


def process_video(
    ctx: Context, ui: UISession, form: Mapping[str, Any], autostart: bool = False
) -> Iterator[dict[str, Any]]:
    """Process a video file, streaming pages as frames are done.

    The run counts as going from the moment it is asked for (an auto-started one: from the page's
    load), so a Stop pressed while it still opens the video or builds the classifier stops it. A new
    run in the same session replaces the one going: that one ends after its current frame (touching
    neither the new run's history nor its files) with its own files and summary."""
    started = ui.created if autostart else time.monotonic()
    with ui.lock:
        if autostart:
            ui.autostarted = True
        ui.runs += 1
        ui.run_id += 1
        run_id = ui.run_id
    try:
        if ui.expired:
            yield message(ui, warn(EXPIRED))
            return
        video, settings, step, truth, problem = _checked(ctx, form)
        name = Path(video).name
        with open_video(video, ctx.max_pixels) as source:
            every = step or default_every(source.fps)
            with ctx.model_and(ui)():
                if ui.run_id != run_id:  # a newer run was asked for meanwhile: it replaces this one
                    yield message(ui, "Replaced by a newer run.")
                    return
                note = apply_settings(ui, settings, ctx.new_stream)
                prefix = (note + " ") if note else fresh_or_kept(ui, bool(form.get("keep")))
                ui.restart_history(f"video:{name}")
                ui.truth_state = "off" if problem else ("loaded" if truth is not None else "none")
                recording = ui.downloads.start(name, fps=source.fps / every, **record_options(ui))
            try:
                if problem:
                    prefix = warn("Accuracy off: " + problem) + " " + prefix
                yield from _run(
                    ctx,
                    ui,
                    source,
                    name,
                    every,
                    truth,
                    prefix,
                    form.get("realtime", True) is not False,
                    started=started,
                    run_id=run_id,
                    recording=recording,
                )
            finally:
                with ui.lock:
                    ui.downloads.finish(recording)
    finally:
        with ui.lock:
            ui.runs -= 1


class _Run:
    """What one video run shows while it goes: its name, stride, pacing and the page's timing."""

    def __init__(
        self,
        ctx: Context,
        ui: UISession,
        name: str,
        every: int,
        expected: int | None,
        prefix: str,
        pacer: Pacer,
        started: float,
        run_id: int,
        recording,
    ):
        self.ctx, self.ui, self.every, self.expected, self.prefix, self.pacer = ctx, ui, every, expected, prefix, pacer
        self.name, self.shown = name, html.escape(name)
        self.last_page = 0.0
        self.pages = 0
        self.started, self.start = started, time.perf_counter()
        self.run_id, self.recording = run_id, recording

    @property
    def stopped(self) -> bool:
        """Stop was pressed since the run was asked for."""
        return self.ui.stop_at > self.started

    @property
    def replaced(self) -> bool:
        """A newer run of the session took over (this one must touch nothing shared)."""
        return self.ui.run_id != self.run_id

    def mode(self) -> str:
        nth = "every frame" if self.every == 1 else f"1 frame in {self.every}"
        return f"{nth}, {'real time' if self.pacer.realtime else 'as fast as possible'}"

    def status(self, processed: int) -> str:
        of = f" of ~{self.expected}" if self.expected else ""
        return (
            f"{self.prefix}Processing **{self.shown}**: frame {processed}{of} ({self.mode()})"
            f"{plots.progress_bar(processed, self.expected)}"
        )

    def page(self, st: Step, status: str, image) -> dict[str, Any]:
        page = render(
            self.ui, status, image=image, result=st.result, fps=st.fps, views=self.ctx.views, skipped=self.pacer.skipped
        )
        self.pages += 1
        if self.pages == 1:
            page["downloads"] = offered(None)  # the last run's files are gone: this run's come at its end
        return page | {"result": st.result.to_dict() | {"frame": st.frame.index}}

    def due(self) -> bool:
        now = time.perf_counter()
        if now - self.last_page < self.ctx.update_interval:
            return False
        self.last_page = now
        return True


def _run(
    ctx: Context,
    ui: UISession,
    source,
    name: str,
    every: int,
    truth: Truth | None,
    prefix: str,
    realtime: bool,
    *,
    started: float,
    run_id: int,
    recording,
) -> Iterator[dict[str, Any]]:
    """The run: paced frames through `iter_steps`, recorded, pages at most every `update_interval` s."""
    session = ui.stream
    pacer = Pacer(realtime, stopped=lambda: run.stopped or run.replaced)
    run = _Run(
        ctx, ui, name, every, expected_frames(source, every, ctx.max_frames), prefix, pacer, started, run_id, recording
    )
    last: tuple[Step, Any] | None = None
    if run.stopped:  # Stop came before the first frame (e.g. while the classifier was built)
        yield _final_page(run, None)
        return
    try:
        for st in iter_steps(
            pacer(Sampler(every)(source)), session, truth=truth, max_frames=ctx.max_frames, model_slot=ctx.model_and(ui)
        ):
            page = None
            with ui.lock:  # never held across a yield: the next frame may run on another thread
                if ui.stream is not session or run.replaced:  # closed, dropped, or a newer run took over
                    break
                image = recording.write(st)  # the one per-frame record: history, JSONL, MP4, picture
                last = (st, image)
                if run.due():
                    page, last = run.page(st, run.status(st.processed), image), None
            if page is not None:
                yield page
            if run.stopped:
                break
    except OSError as exc:  # a decoder failing mid-file
        failure = f"{name}: reading the video failed after {recording.rows} frames ({one_line(exc)[:200]})"
        log.warning("%s", failure)
        yield render(ui, warn(failure), result=ui.history.last, views=ctx.views)
        return
    if run.replaced or ui.stream is not session:
        yield _cut_short_page(run, recording)
        return
    yield _final_page(run, last)


def _cut_short_page(run: _Run, recording) -> dict[str, Any]:
    """The last page of a run cut short by a newer run, a new engine (model or views) or the session's end."""
    ui = run.ui
    with ui.lock:
        files = ui.downloads.finish(recording)
    log.info("%s: replaced after %d frames", run.name, recording.rows)
    done = f"after {plots.frames(recording.rows)} of **{run.shown}**"
    if run.replaced:
        status = f"Replaced by a newer run {done}."
    elif ui.stream is None:
        status = f"Ended {done}: the session was closed."
    else:  # Settings changed the model or the views: a new engine
        status = f"Stopped {done}: the new model or views started the adaptation afresh; press Process to go on."
    return {"status": status, "downloads": offered(files), "state": ui}


def _final_page(run: _Run, last) -> dict[str, Any]:
    """The run's last page: its summary, the last frame, and the downloads."""
    ui, h = run.ui, run.ui.history
    stopped = run.stopped
    seconds = time.perf_counter() - run.start
    log.info("%s: %d frames processed in %.1f s%s", run.name, h.processed, seconds, " (stopped)" if stopped else "")
    with ui.lock:
        files = ui.downloads.finish(run.recording)
        if h.processed == 0:
            text = "Stopped before the first frame." if stopped else warn(f"{run.name}: no frame could be processed.")
            return render(ui, text, clear_frame=True, views=run.ctx.views)
        summary = plots.run_summary(h, seconds, ui.stream.method.title, run.pacer.skipped)
        if stopped:
            status = (
                f"Stopped after {plots.frames(h.processed)} of **{run.shown}**: {summary} The adaptation state is "
                "kept (**Reset** clears it)."
            )
        else:
            status = f"{run.prefix}Done: **{run.shown}**, {summary} Processed {run.mode()}."
        if last is not None:
            page = run.page(last[0], status, last[1])
        else:  # the last frame is on the page already: keep its picture, refresh the rest
            page = render(ui, status, result=h.last, views=run.ctx.views, skipped=run.pacer.skipped)
    return page | {"downloads": offered(files)}
