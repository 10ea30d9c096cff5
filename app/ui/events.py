"""The app: `build_app` lays the page out (`layout`) and wires each control to its handler
(`handlers`), mapping the handlers' pages (dicts by output name) onto components.

Concurrency: video runs, webcam frames and API frames are "streams" (at most `streams` at once,
Gradio's queue holds the rest); Apply, Reset, Stop, the demo-clip button and the truth/method
controls run at once (no queue limit). Every model call, in any of them, takes one of the
`concurrency` shared model slots (`state.ModelSlots`), a video run frame by frame.
"""
import inspect
import json
import logging
from typing import Any, Callable, Iterator, Sequence

import gradio as gr

from mstta.config import EngineConfig
from mstta.errors import UserError, one_line
from mstta.methods import get_method

from ..frames import MAX_PIXELS
from ..session import DEFAULT_BANK_SIZE
from . import handlers
from .handlers import OUTPUTS, Context
from .layout import Components, build_layout
from .state import ModelSlots, Sessions, UISession

log = logging.getLogger(__name__)

DEFAULT_CONCURRENCY = 2          # model calls running at once, all users together (one GPU)
DEFAULT_MAX_SESSIONS = 16        # live sessions with an engine; beyond, the oldest idle one is dropped
SESSION_TTL_S = 900              # a session's state is freed this long after its last event (or at page close)
UPDATE_INTERVAL_S = 0.25         # a video run refreshes the frame, verdict and bars at most 4 times a second
PLOT_INTERVAL_S = 1.0            # ... and the plots over time at most once a second (every frame is in them)
WEBCAM_EVERY_S = 0.2             # webcam: a frame to the server every 0.2 s
WEBCAM_TIME_LIMIT_S = 600        # webcam: one stream lasts at most this long
CACHE_CLEANUP_S = (300, 900)     # every 5 min, delete uploads and shown frames older than 15 min

# Runs in the page at load: the webcam component stays silent when the browser refuses the camera,
# so getUserMedia is wrapped to show why (and what to do) in the webcam tab.
CAMERA_JS = """
() => {
  const show = (text) => {
    const box = document.getElementById("mstta-camera-message");
    if (box) { box.textContent = text; box.style.display = "block"; }
  };
  const md = navigator.mediaDevices;
  if (!md || !md.getUserMedia) {
    show("This page cannot use a webcam: browsers allow cameras only on https:// or http://localhost / " +
         "127.0.0.1 pages. Open the UI through one of those, or use a video.");
    return;
  }
  const original = md.getUserMedia.bind(md);
  md.getUserMedia = (constraints) => original(constraints).then((stream) => {
    const box = document.getElementById("mstta-camera-message");
    if (box) box.style.display = "none";
    return stream;
  }, (err) => {
    const name = (err && err.name) || "Error";
    const why = {
      NotAllowedError: "the browser (or you) denied access to the camera. Allow the camera for this site " +
                       "(camera icon in the address bar) and reload the page.",
      NotFoundError: "no camera was found. Connect one and reload the page, or use a video.",
      NotReadableError: "the camera is in use by another program or could not be started.",
      OverconstrainedError: "the camera does not support the requested settings.",
    }[name] || ("the camera could not be opened (" + name + ").");
    show("Webcam unavailable: " + why);
    throw err;
  });
}
"""
# Disabled controls explain themselves on hover too (Gradio sliders take no title attribute).
TOOLTIP_JS = """
(reasons) => {
  for (const [name, why] of Object.entries(JSON.parse(reasons || "{}"))) {
    const el = document.getElementById("mstta-" + name);
    if (el) { if (why) el.setAttribute("title", why); else el.removeAttribute("title"); }
  }
  return reasons;
}
"""


def build_app(clip: Any, *, labels: Sequence[str] | None = None, video: str | None = None,
              truth: str | None = None, template: str | None = None, method: str = "ms-tta",
              config: EngineConfig | None = None, every: int | None = None, topk: int = 3, views: int = 1,
              max_frames: int | None = None, autostart: bool | None = None, concurrency: int = DEFAULT_CONCURRENCY,
              streams: int | None = None, max_sessions: int = DEFAULT_MAX_SESSIONS,
              session_ttl: float = SESSION_TTL_S, max_pixels: int = MAX_PIXELS,
              update_interval: float = UPDATE_INTERVAL_S, plot_interval: float = PLOT_INTERVAL_S,
              webcam_every: float = WEBCAM_EVERY_S, webcam_time_limit: float = WEBCAM_TIME_LIMIT_S,
              offer_demo_clip: bool = True) -> gr.Blocks:
    """The UI as a `gr.Blocks` (not launched) around the shared `clip`.

    `labels` fill the labels box; `video` (a file) and `truth` (its CSV) are preloaded, and with
    `autostart` (default: when both video and labels are given) each new page starts processing
    the video at once. `method`, `config`, `every`, `topk`, `views` and `max_frames` are the
    defaults of the controls and of every session, as in the headless demo. `concurrency` model
    calls run at once (all users together), `streams` video/webcam runs (default 4 x concurrency);
    `max_sessions` sessions keep an engine and each lives `session_ttl` s after its last event;
    frames above `max_pixels` are refused. A video run refreshes the page at most every
    `update_interval` s and its plots over time every `plot_interval` s (0: every frame).
    `offer_demo_clip` adds a button that loads assets/demo.mp4 with its labels and ground truth.
    """
    base = config if config is not None else EngineConfig(bank_size=DEFAULT_BANK_SIZE)
    method = get_method(method).name
    autostart = bool(video and labels) if autostart is None else autostart
    ctx = Context(clip=clip, base=base, slots=ModelSlots(concurrency), sessions=Sessions(max_sessions), views=views,
                  topk=topk, max_frames=max_frames, max_pixels=max_pixels, update_interval=update_interval,
                  plot_interval=plot_interval, demo_clip=handlers.demo_clip() if offer_demo_clip else None)
    random_weights = str(getattr(clip, "pretrained", "")).lower() == "none"
    title_md = ("# MS-TTA live: zero-shot CLIP vs test-time adaptation\n"
                "Each frame's CLIP features are classified twice, by zero-shot CLIP and by the adapted method. "
                f"Model **{getattr(clip, 'name', '?')}** ({getattr(clip, 'pretrained', '?')}) on "
                f"{getattr(clip, 'device', '?')}.")
    if autostart:
        hello = "Processing the preloaded video…"
    elif video:
        hello = "A video is loaded: press **Process video**, or open the **Webcam** tab."
    else:
        hello = ("Upload a video" + (" (or use the demo clip)" if ctx.demo_clip else "")
                 + " and press **Process video**, or open the **Webcam** tab.")

    def state_deleted(ui: Any) -> None:   # Gradio's time to live ran out (or its own capacity)
        if isinstance(ui, UISession):
            ctx.sessions.forget(ui.session_hash, ui)

    with gr.Blocks(title="MS-TTA live: CLIP vs test-time adaptation", analytics_enabled=False,
                   delete_cache=CACHE_CLEANUP_S) as demo:
        c = build_layout(title_md=title_md, random_weights=random_weights, labels=labels, video=video, truth=truth,
                         template=template, method=method, base=base, every=every, topk=topk, hello=hello,
                         demo_clip=ctx.demo_clip is not None, session_ttl=session_ttl,
                         on_state_deleted=state_deleted)
        _wire(demo, c, ctx, autostart=autostart, streams=streams or 4 * concurrency, webcam_every=webcam_every,
              webcam_time_limit=webcam_time_limit)
    for dep in demo.fns.values():   # the State's per-page-load factory is no API endpoint
        if getattr(dep, "fn", None) is UISession:
            dep.api_visibility = "private"
    demo.mstta_context = ctx        # the live sessions and slots (for tests and debugging)
    return demo


def _wire(demo: gr.Blocks, c: Components, ctx: Context, *, autostart: bool, streams: int, webcam_every: float,
          webcam_time_limit: float) -> None:
    """Connect every control to its handler."""
    out = [getattr(c, name) for name in OUTPUTS]
    by_name = dict(zip(OUTPUTS, out)) | {"timer": c.webcam_timer}

    def session_of(ui: Any, request: gr.Request | None) -> UISession:
        ui = ui if isinstance(ui, UISession) else UISession()
        key = getattr(request, "session_hash", None) or f"anonymous-{id(ui)}"
        ui.session_hash = key
        ctx.sessions.touch(ui, key)
        return ui

    def page(result: dict[str, Any] | None) -> dict[Any, Any]:
        return {by_name[name]: value for name, value in (result or {}).items()}

    def refused(ui: UISession, exc: Exception, toast: bool = True) -> dict[Any, Any]:
        text = one_line(exc)
        log.info("refused (session %s): %s", ui.session_hash, text)   # one server line, no traceback
        if toast:
            gr.Warning(text)
        return page(handlers.message(ui, handlers.warn(text)))

    def crashed(fn: Callable, ui: UISession | None, exc: Exception) -> dict[Any, Any]:
        log.exception("UI handler %s failed", fn.__name__)
        text = handlers.warn(f"Internal error ({type(exc).__name__}: {one_line(exc)[:200]}); details are in "
                             "the server log.")
        return {c.status: text}

    def with_request(run: Callable, fn: Callable) -> Callable:
        """`run(*inputs, state, request)` with the signature Gradio reads: fn's inputs (after `ui`),
        the state, then the request (Gradio passes a `gr.Request`-annotated parameter)."""
        names = list(inspect.signature(fn).parameters)[1:] + ["state"]
        params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in names]
        params.append(inspect.Parameter("request", inspect.Parameter.POSITIONAL_ONLY, annotation=gr.Request))
        run.__signature__ = inspect.Signature(params)
        run.__annotations__ = {"request": gr.Request}   # what Gradio's special_args reads
        run.__name__ = fn.__name__
        return run

    def guarded(fn: Callable, once: bool = False) -> Callable:
        """fn(ui, *inputs) -> page, with the session looked up and errors shown as one line (`once`:
        a stream's repeated error toasts once, then stays in the status line)."""
        def run(*args: Any) -> dict[Any, Any]:
            *args, request = args
            ui = session_of(args[-1], request)
            try:
                return page(fn(ui, *args[:-1]))
            except UserError as exc:
                repeated, ui.last_error = ui.last_error == one_line(exc), one_line(exc) if once else None
                return refused(ui, exc, toast=not (once and repeated))
            except Exception as exc:  # noqa: BLE001 - logged with its traceback, shown as one line
                return crashed(fn, ui, exc)
        return with_request(run, fn)

    def guarded_stream(fn: Callable) -> Callable:
        def run(*args: Any) -> Iterator[dict[Any, Any]]:
            *args, request = args
            ui = session_of(args[-1], request)
            try:
                for result in fn(ui, *args[:-1]):
                    yield page(result)
            except UserError as exc:
                yield refused(ui, exc)
            except Exception as exc:  # noqa: BLE001 - logged with its traceback, shown as one line
                yield crashed(fn, ui, exc)
        return with_request(run, fn)

    # ------------------------------------------------------------------ handlers over (ui, inputs...)
    def on_apply(ui, labels, template, method, k, alpha, lam, cap, bank, truth):
        return handlers.apply(ctx, ui, (labels, template, method, k, alpha, lam, cap, bank), truth)

    def on_reset(ui):
        return handlers.reset(ctx, ui)

    def on_stop(ui):
        return handlers.stop(ui)

    def on_drop_truth(ui):
        return handlers.drop_truth(ui)

    def on_video(ui, video, truth, every, keep, labels, template, method, k, alpha, lam, cap, bank):
        return handlers.process_video(ctx, ui, video, truth, every, keep,
                                      (labels, template, method, k, alpha, lam, cap, bank))

    def on_frame(ui, image, keep, labels, template, method, k, alpha, lam, cap, bank):
        return handlers.process_frame(ctx, ui, image, keep, (labels, template, method, k, alpha, lam, cap, bank))

    def on_webcam(ui, image, keep, labels, template, method, k, alpha, lam, cap, bank):
        result = on_frame(ui, image, keep, labels, template, method, k, alpha, lam, cap, bank)
        if ui.webcam_frames == 1:   # a webcam run starts: watch for its end (no frame for a while)
            result = result | {"timer": gr.Timer(active=True)}
        return result

    def on_tick(ui):
        result = handlers.webcam_tick(ui)
        return result | {"timer": gr.Timer(active=False)} if result is not None else {"timer": gr.skip()}

    settings = c.settings
    light = dict(concurrency_limit=None, show_progress="minimal", show_progress_on=[c.status])
    stream = dict(concurrency_limit=streams, concurrency_id="mstta-streams", show_progress="hidden")
    video_inputs = [c.video, c.truth, c.every, c.keep, *settings, c.state]
    c.run.click(guarded_stream(on_video), video_inputs, out, api_name="process_video", **stream)
    if autostart:
        demo.load(guarded_stream(on_video), video_inputs, out, api_name=False, **stream)
    # Stop is a flag the video loop reads after each frame, not an event cancel: the run then ends
    # with a last, complete page instead of being cut off between two updates.
    c.stop.click(guarded(on_stop), [c.state], out, api_name="stop", queue=False)
    c.apply.click(guarded(on_apply), [*settings, c.truth, c.state], out, api_name="apply_settings", **light)
    c.reset.click(guarded(on_reset), [c.state], out, api_name="reset", **light)
    c.drop_truth.click(guarded(on_drop_truth), [c.state], out, api_name=False, **light)

    timer_out = [*out, c.webcam_timer]
    c.webcam.stream(guarded(on_webcam, once=True), [c.webcam, c.keep, *settings, c.state], timer_out,
                    api_name="webcam", stream_every=webcam_every, time_limit=webcam_time_limit, **stream)
    c.webcam_timer.tick(guarded(on_tick), [c.state], timer_out, api_name=False, concurrency_limit=None,
                        show_progress="hidden")
    c.api_button.click(guarded(on_frame, once=True), [c.api_frame, c.keep, *settings, c.state], out,
                       api_name="process_frame", **stream)

    controls = ("k", "alpha", "lam", "capacity", "bank")

    def method_changed(method: str):
        summary, unused = handlers.method_info(method)
        updates = [gr.update(interactive=not unused[n], info=unused[n] or None) for n in controls]
        return gr.update(info=summary), *updates, json.dumps(unused)

    reasons = gr.Textbox(json.dumps(handlers.method_info(c.method.value)[1]), visible=False)
    c.method.change(method_changed, [c.method], [c.method, *(getattr(c, n) for n in controls), reasons],
                    api_name=False, queue=False).then(None, [reasons], None, js=TOOLTIP_JS)
    demo.load(None, [reasons], None, js=TOOLTIP_JS)
    c.video.upload(lambda: None, None, c.truth, api_name=False, queue=False)   # a truth file belongs to one video
    if ctx.demo_clip is not None:
        c.demo_clip.click(lambda: ctx.demo_clip, None, [c.video, c.labels, c.truth], api_name=False, queue=False)

    def on_unload(request: gr.Request) -> None:
        ctx.sessions.forget(getattr(request, "session_hash", None))

    demo.load(None, None, None, js=CAMERA_JS)
    demo.unload(on_unload)
