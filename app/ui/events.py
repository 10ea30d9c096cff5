"""The app: `build_app` lays the page out (`layout`) and wires each control to its handler
(`handlers`, `video`), mapping the handlers' pages (dicts by output name) onto components. Inputs
travel by name (Gradio's `inputs_kwargs`): every handler gets one form, the settings by name.

Concurrency: video runs, webcam frames and API frames are "streams" (at most `streams` at once,
Gradio's queue holds the rest); Apply, Reset, Stop, the demo-clip button and the truth/method
controls run at once (no queue limit). Every model call, in any of them, takes one of the
`concurrency` shared model slots (`state.ModelSlots`), a video run frame by frame.
"""

import dataclasses
import json
import logging
from typing import Any, Callable, Iterator, Sequence

import gradio as gr

from mstta.engine.config import EngineConfig
from mstta.errors import UserError, one_line

from ..annotate import random_weights
from ..frames import MAX_PIXELS
from ..session import DEFAULT_BANK_SIZE, check_methods
from . import handlers, video
from .browser_js import CAMERA_JS, TOOLTIP_JS
from .context import WEBCAM_END_S, Context
from .gradio_patches import patch_app
from .layout import Components, build_layout
from .models import TINY, model_note, parse_value, views_note
from .page import OUTPUTS, message, title_md, warn
from .state import (
    CONTROLS,
    DEFAULT_CONCURRENCY,
    DEFAULT_MAX_SESSIONS,
    SESSION_TTL_S,
    ModelSlots,
    Sessions,
    UISession,
)

log = logging.getLogger(__name__)

UPDATE_INTERVAL_S = 0.15  # a run refreshes the frame, bars and plots at most every 0.15 s (>= 4 a second
# when frames come that often: 5 per second by default)
WEBCAM_EVERY_S = 0.2  # webcam: a frame to the server every 0.2 s
WEBCAM_TIME_LIMIT_S = 600  # webcam: one stream lasts at most this long
CACHE_CLEANUP_S = (300, 900)  # every 5 min, delete uploads and shown frames older than 15 min


@dataclasses.dataclass
class AppOptions:
    """`build_app`'s options, resolved: `config`, `method` and `autostart` are filled in at creation.

    `labels` fill the labels box; `video` (a file) and `truth` (its CSV) are preloaded, and with
    `autostart` (default: when both video and labels are given) each new page starts processing the
    video at once. `method`, `config`, `every`, `topk`, `views` (made where `views_on` says) and
    `max_frames` are the defaults of the controls and of every session, as in the headless demo;
    `realtime` the default of the Real time box. `concurrency` model calls run at once (all users
    together), `streams` video/webcam runs (default 4 x concurrency); `max_sessions` sessions keep an
    engine and each lives `session_ttl` s after its last event; frames above `max_pixels` are refused.
    A run refreshes the page at most every `update_interval` s (0: every frame). `offer_demo_clip`
    adds a button that loads assets/demo.mp4 with its labels and ground truth. A webcam run (page or
    API) without a Stop ends `webcam_end` s after its last frame, on the server's clock.
    """

    labels: Sequence[str] | None = None
    video: str | None = None
    truth: str | None = None
    template: str | None = None
    method: str = "ms-tta"
    race: Sequence[str] = ()
    config: EngineConfig | None = None
    every: int | None = None
    topk: int = 3
    views: int = 1
    views_on: str = "auto"
    max_frames: int | None = None
    autostart: bool | None = None
    realtime: bool = True
    concurrency: int = DEFAULT_CONCURRENCY
    streams: int | None = None
    max_sessions: int = DEFAULT_MAX_SESSIONS
    session_ttl: float = SESSION_TTL_S
    max_pixels: int = MAX_PIXELS
    update_interval: float = UPDATE_INTERVAL_S
    webcam_every: float = WEBCAM_EVERY_S
    webcam_time_limit: float = WEBCAM_TIME_LIMIT_S
    offer_demo_clip: bool = True
    webcam_end: float = WEBCAM_END_S
    own_scale: bool = True

    def __post_init__(self) -> None:
        self.config = self.config if self.config is not None else EngineConfig(bank_size=DEFAULT_BANK_SIZE)
        self.method = check_methods([self.method], "method")[0]
        self.autostart = bool(self.video and self.labels) if self.autostart is None else self.autostart


def build_app(clip: Any, **options: Any) -> gr.Blocks:
    """The UI as a `gr.Blocks` (not launched) around the shared `clip`; `options` by name as in
    `AppOptions` (e.g. `labels`, `video`, `method`, `concurrency`)."""
    o = AppOptions(**options)
    ctx = _context(clip, o)
    with gr.Blocks(
        title="MS-TTA live: CLIP vs test-time adaptation",
        analytics_enabled=False,
        delete_cache=CACHE_CLEANUP_S,
        fill_width=True,
    ) as demo:
        c = _layout(ctx, o)
        wiring = Wiring(c, ctx)
        streams = o.streams or 4 * o.concurrency
        wiring.video(demo, autostart=o.autostart, streams=streams)
        wiring.webcam(streams=streams, every=o.webcam_every, time_limit=o.webcam_time_limit)
        wiring.controls(demo)
    patch_app(demo, state_factory=UISession)  # every patch of Gradio's internals (checked for its version)
    demo.mstta_context = ctx  # the live sessions and slots (for tests and debugging)
    handlers.watch(ctx)  # the server's own clock: idle webcam runs end without the page's timer
    return demo


def _context(clip: Any, o: AppOptions) -> Context:
    """What every session shares: the model, the controls' defaults, the model slots, the sessions."""
    return Context(
        clip=clip,
        base=o.config,
        slots=ModelSlots(o.concurrency),
        sessions=Sessions(o.max_sessions),
        views=o.views,
        views_on=o.views_on,
        topk=o.topk,
        max_frames=o.max_frames,
        max_pixels=o.max_pixels,
        update_interval=o.update_interval,
        demo_clip=handlers.demo_clip(getattr(clip, "name", None)) if o.offer_demo_clip else None,
        webcam_end=o.webcam_end,
        own_scale=o.own_scale,
    )


def _layout(ctx: Context, o: AppOptions) -> Components:
    """Every component, placed with the preloaded files and the controls' defaults (in an open `gr.Blocks`)."""

    def state_deleted(ui: Any) -> None:  # Gradio's time to live ran out (or its own capacity)
        if isinstance(ui, UISession):
            ctx.sessions.forget(ui.session_hash, ui)

    return build_layout(
        title_md=title_md(ctx.clip, o.views),
        model=ctx.models.default,
        views=o.views,
        random_weights=random_weights(ctx.clip),
        labels=o.labels,
        video=o.video,
        truth=o.truth,
        template=o.template,
        method=o.method,
        race=list(o.race),
        base=o.config,
        every=o.every,
        realtime=o.realtime,
        hello=_hello(ctx, o.video, o.autostart),
        demo_clip=ctx.demo_clip is not None,
        session_ttl=o.session_ttl,
        on_state_deleted=state_deleted,
    )


def _hello(ctx: Context, video: str | None, autostart: bool) -> str:
    if autostart:
        return "Processing the preloaded video…"
    if video:
        return "A video is loaded: press **Process video**, or open the **Webcam** tab."
    return (
        "Upload a video"
        + (" (or use the demo clip)" if ctx.demo_clip else "")
        + " and press **Process video**, or open the **Webcam** tab."
    )


def _model_changed(value: Any) -> tuple[Any, Any]:
    """The model's and the views' notes for the model picked (nothing loads until Apply or a run)."""
    try:
        key = parse_value(value, TINY)
    except UserError:
        return gr.update(), gr.update()
    return gr.update(info=model_note(key)), gr.update(info=views_note(key[0]))


class Wiring:
    """Connects the controls to their handlers: every handler gets `(ui, form)` (the session and its
    named inputs) and returns a page by output name; errors become one status line."""

    def __init__(self, c: Components, ctx: Context):
        self.c, self.ctx = c, ctx
        self.out = [getattr(c, name) for name in OUTPUTS]
        self.by_name = dict(zip(OUTPUTS, self.out)) | {"timer": c.webcam_timer}

    def session_of(self, ui: Any, request: gr.Request | None) -> UISession:
        ui = ui if isinstance(ui, UISession) else UISession()
        key = getattr(request, "session_hash", None) or f"anonymous-{id(ui)}"
        ui.session_hash = key
        self.ctx.sessions.touch(ui, key)
        return ui

    def page(self, result: dict[str, Any] | None) -> dict[Any, Any]:
        return {self.by_name[name]: value for name, value in (result or {}).items()}

    def refused(self, ui: UISession, exc: Exception) -> dict[Any, Any]:
        text = one_line(exc)
        log.info("refused (session %s): %s", ui.session_hash, text)  # one server line, no traceback
        return self.page(message(ui, warn(text)))  # in the status line only: a toast would repeat it

    def crashed(self, fn: Callable, exc: Exception) -> dict[Any, Any]:
        log.exception("UI handler %s failed", fn.__name__)
        return {
            self.c.status: warn(
                f"Internal error ({type(exc).__name__}: {one_line(exc)[:200]}); details are in the server log."
            )
        }

    def guarded(self, fn: Callable) -> Callable:
        """fn(ui, form) -> page, with the session looked up and errors shown as one status line."""

        def run(request: gr.Request, **form: Any) -> dict[Any, Any]:
            ui = self.session_of(form.pop("state", None), request)
            try:
                with ui.handling():
                    return self.page(fn(ui, form))
            except UserError as exc:
                return self.refused(ui, exc)
            except Exception as exc:  # logged with its traceback, shown as one line
                return self.crashed(fn, exc)

        run.__name__ = fn.__name__
        return run

    def guarded_stream(self, fn: Callable) -> Callable:
        def run(request: gr.Request, **form: Any) -> Iterator[dict[Any, Any]]:
            ui = self.session_of(form.pop("state", None), request)
            try:
                with ui.handling():
                    for result in fn(ui, form):
                        yield self.page(result)
            except UserError as exc:
                yield self.refused(ui, exc)
            except Exception as exc:  # logged with its traceback, shown as one line
                yield self.crashed(fn, exc)

        run.__name__ = fn.__name__
        return run

    def video(self, demo: gr.Blocks, *, autostart: bool, streams: int) -> None:
        """Process video (and the preloaded one at page load), Stop, a new upload, the demo clip."""
        c, ctx = self.c, self.ctx

        def process_video(ui, form):
            return video.process_video(ctx, ui, form)

        def process_preloaded(ui, form):
            return video.process_video(ctx, ui, form, autostart=True)

        form = c.form(video=c.video, truth=c.truth, every=c.every, keep=c.keep, realtime=c.realtime)
        run = self.guarded_stream(process_video)
        stream = dict(concurrency_limit=streams, concurrency_id="mstta-streams", show_progress="hidden")
        # "multiple": Process pressed while a run goes reaches the server, and the new run replaces the
        # one going (`video.process_video`); Gradio's default ("once") drops that press in the page
        c.run.click(
            run, None, self.out, inputs_kwargs=form, api_name="process_video", trigger_mode="multiple", **stream
        )
        if autostart:
            demo.load(
                self.guarded_stream(process_preloaded), None, self.out, inputs_kwargs=form, api_name=False, **stream
            )
        # Stop is a flag the video loop reads after each frame, not an event cancel: the run then ends
        # with a last, complete page (summary, downloads) instead of being cut off between two updates.
        c.stop.click(
            self.guarded(lambda ui, form: handlers.stop(ui, autostart)),
            None,
            self.out,
            inputs_kwargs={"state": c.state},
            api_name="stop",
            queue=False,
        )
        c.video.upload(
            self.guarded(lambda ui, form: handlers.video_changed(ui, form["video"], form["truth"], ctx.max_pixels)),
            None,
            self.out,
            inputs_kwargs={"video": c.video, "truth": c.truth, "state": c.state},
            api_name=False,
            queue=False,
        )
        if ctx.demo_clip is not None:
            c.demo_clip.click(lambda: ctx.demo_clip, None, [c.video, c.labels, c.truth], api_name=False, queue=False)

    def webcam(self, *, streams: int, every: float, time_limit: float) -> None:
        """Webcam frames, its Stop (summary and downloads at once), the timer for runs without a Stop,
        and the per-frame API (`process_frame`)."""
        c, ctx = self.c, self.ctx
        timer_out = [*self.out, c.webcam_timer]
        stream = dict(concurrency_limit=streams, concurrency_id="mstta-streams", show_progress="hidden")

        def webcam(ui, form):
            result = handlers.process_frame(ctx, ui, form)
            if ui.webcam_frames == 1 and ui.source == "webcam":  # a run starts: watch for its end
                result = result | {"timer": gr.Timer(active=True)}
            return result

        def ended(how: Callable) -> Callable:
            def run(ui, form):
                result = how(ctx, ui)
                return result | {"timer": gr.Timer(active=False)} if result is not None else {"timer": gr.skip()}

            run.__name__ = how.__name__
            return run

        c.webcam.stream(
            self.guarded(webcam),
            None,
            timer_out,
            inputs_kwargs=c.form(image=c.webcam, keep=c.keep),
            api_name="webcam",
            stream_every=every,
            time_limit=time_limit,
            **stream,
        )
        c.webcam_stop.click(
            self.guarded(ended(handlers.webcam_stop)),
            None,
            timer_out,
            inputs_kwargs={"state": c.state},
            api_name=False,
            concurrency_limit=None,
            show_progress="hidden",
        )
        c.webcam_timer.tick(
            self.guarded(ended(handlers.webcam_tick)),
            None,
            timer_out,
            inputs_kwargs={"state": c.state},
            api_name=False,
            concurrency_limit=None,
            show_progress="hidden",
        )
        c.api_button.click(
            self.guarded(lambda ui, form: handlers.process_frame(ctx, ui, form)),
            None,
            self.out,
            inputs_kwargs=c.form(image=c.api_frame, keep=c.keep),
            api_name="process_frame",
            **stream,
        )

    def controls(self, demo: gr.Blocks) -> None:
        """Apply, Reset, dropping the truth file, the method's notes on the controls, page close."""
        c, ctx = self.c, self.ctx
        light = dict(concurrency_limit=None, show_progress="minimal", show_progress_on=[c.status])
        c.apply.click(
            self.guarded(lambda ui, form: handlers.apply(ctx, ui, form)),
            None,
            self.out,
            inputs_kwargs=c.form(truth=c.truth),
            api_name="apply_settings",
            **light,
        )
        c.reset.click(
            self.guarded(lambda ui, form: handlers.reset(ctx, ui)),
            None,
            self.out,
            inputs_kwargs={"state": c.state},
            api_name="reset",
            **light,
        )
        c.drop_truth.click(
            self.guarded(lambda ui, form: handlers.drop_truth(ui)),
            None,
            self.out,
            inputs_kwargs={"state": c.state},
            api_name=False,
            **light,
        )
        numbers = [getattr(c, name) for name in CONTROLS]
        reasons = gr.Textbox(_reasons(c.method.value), visible=False)
        c.method.change(_method_changed, [c.method], [c.method, *numbers, reasons], api_name=False, queue=False).then(
            None, [reasons], None, js=TOOLTIP_JS
        )
        demo.load(None, [reasons], None, js=TOOLTIP_JS)
        c.model.change(_model_changed, [c.model], [c.model, c.views], api_name=False, queue=False)

        def on_unload(request: gr.Request) -> None:
            ctx.sessions.forget(getattr(request, "session_hash", None))

        demo.load(None, None, None, js=CAMERA_JS)
        demo.unload(on_unload)


def _reasons(method: str) -> str:
    """Why each unused control is off ("" when used), for the hover text (TOOLTIP_JS)."""
    _, notes = handlers.method_info(method)
    return json.dumps({name: "" if used else note for name, (note, used) in notes.items()})


def _method_changed(method: str):
    """Every numeric control's note and state for the chosen method (each one set: none goes stale)."""
    summary, notes = handlers.method_info(method)
    updates = [gr.update(interactive=used, info=note) for note, used in (notes[name] for name in CONTROLS)]
    return gr.update(info=summary), *updates, _reasons(method)
