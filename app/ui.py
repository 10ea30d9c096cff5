"""The browser UI of `mstta-demo`: zero-shot CLIP and the adapted method side by side, live.

    demo = build_app(clip, labels=["cat", "dog"], video="clip.mp4")   # a gr.Blocks; nothing runs yet
    demo.queue(max_size=16, default_concurrency_limit=2).launch(server_name="127.0.0.1")

`mstta-demo` without --headless calls `add_ui_arguments(parser)` while it builds its parser and
`run_ui(args)` to run: the model loads once, the app binds 127.0.0.1:7860 by default, the URL is
printed on one line and the server runs until Ctrl-C.

This module is layout and event wiring; the work is the library's (`StreamSession`, `annotate`,
`open_source`, `Sampler`, `parse_labels`, `read_truth`). Every browser session has its own
`UISession` in a `gr.State` (created by a callable, so each page load starts fresh; freed when
the page closes or after `SESSION_TTL_S` idle), holding its `StreamSession` (text classifier +
engine), the plot `History` and a lock. The CLIP model is loaded once and shared read-only.
Handlers map (video or webcam frame, settings, state) -> (status, verdict, annotated frame, bar
charts, plots, stats, raw result, state). A `UserError` (bad labels or settings, an unreadable
video) becomes a visible message and leaves the session untouched; no traceback reaches the page.
Gradio is imported only when the UI is built, so the headless demo and `--help` stay fast.
"""
import argparse
import dataclasses
import functools
import html
import logging
import math
import signal
import socket
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from mstta.config import EngineConfig
from mstta.errors import UserError, one_line
from mstta.methods import get_method, list_methods

from . import ui_plots as plots
from .annotate import annotate
from .labels import parse_labels, read_labels
from .sampling import Sampler, default_every
from .session import DEFAULT_BANK_SIZE, FrameResult, StreamSession, method_title
from .summary import FpsMeter
from .truth import Truth, read_truth

log = logging.getLogger(__name__)

PROG = "mstta-demo"
ASSETS_DIR = Path(__file__).resolve().parent.parent / "assets"   # the demo's own files (served)
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7860
DEFAULT_CONCURRENCY = 2          # model calls running at once, all users together (one GPU)
DEFAULT_QUEUE_SIZE = 16          # events waiting beyond that; more get "queue full"
DEFAULT_MAX_UPLOAD_MB = 200
SESSION_TTL_S = 3600             # a browser session's engine is freed after this long unused
UPDATE_INTERVAL_S = 0.25         # the current frame, its verdict and bars: at most 4 page updates a second
PLOT_INTERVAL_S = 1.0            # the plots over time: redrawn at most once a second (every frame is in them);
                                 # a browser that redraws slower than results come falls behind, and Stop lags
WEBCAM_EVERY_S = 0.2             # webcam: a frame to the server every 0.2 s
WEBCAM_TIME_LIMIT_S = 600        # webcam: one stream holds a worker at most this long
CACHE_CLEANUP_S = (300, 900)     # every 5 min, delete uploads and shown frames older than 15 min (each page
                                 # update writes its frame as a file: a long webcam stream must not fill the disk)
MAX_BANK_SIZE = 65536            # a bank is [bank_size, d] floats per session: bounded so no one fills the memory
MAX_CLASSES = 1000               # classes in the labels box (ImageNet fits)
VIDEO_TYPES = (".mp4", ".m4v", ".mov", ".avi", ".mkv", ".webm", ".mpg", ".mpeg", ".wmv", ".flv", ".ogv")

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

# The order of every handler's outputs (gradio_client users get all but the state, in this order).
OUTPUT_NAMES = ("status", "verdict", "frame", "clip_topk", "tta_topk", "legend", "confidence", "agreement",
                "switches", "cache", "accuracy", "stats", "result", "state")
NO_LEGEND = dict(colors_in_legend=[], color_title="")   # plots are too short for Vega's legend: ours is HTML


# ---------------------------------------------------------------------------- per-session state
class UISession:
    """One browser session: its StreamSession (made once labels are known), plot history, lock.

    Gradio deep-copies a State's initial value; a copy of a UISession is a fresh, empty one (the
    CLIP model inside a StreamSession is shared, never copied).
    """

    def __init__(self) -> None:
        self.stream: StreamSession | None = None
        self.history = plots.History()
        self.lock = threading.RLock()
        self.meter = FpsMeter()
        self.webcam_frames = 0
        self.source: str | None = None       # what the history shows: "video" or "webcam"
        self.session_hash: str | None = None
        self.last_error: str | None = None    # the webcam's last error, shown once as a toast
        self.last_plots = 0.0                  # when the webcam last redrew the plots over time
        self.runs = 0                          # videos being processed now (normally 0 or 1)
        self.stop_at = 0.0                     # when Stop was last pressed (monotonic clock)

    def __deepcopy__(self, memo: dict) -> "UISession":
        return UISession()

    def restart_history(self, source: str | None = None) -> None:
        """Plots start over (new video, new settings, Reset); the engine is not touched."""
        self.history.clear()
        self.meter = FpsMeter()
        self.webcam_frames = 0
        self.source = source

    def close(self) -> None:
        """Free the engine and classifier (the page closed or the session expired)."""
        with self.lock:
            self.stream = None
            self.history.clear()


def new_session() -> UISession:
    """A browser session's initial state (gr.State calls this on every page load)."""
    return UISession()


@dataclasses.dataclass(frozen=True)
class Settings:
    """What the controls ask for, validated."""

    labels: tuple[str, ...]
    template: str | None
    method: str
    config: EngineConfig


def _int_control(value: Any, name: str) -> int:
    if value is None or value == "":
        raise UserError(f"{name}: enter a whole number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{name}: {value!r} is not a number") from None
    if not math.isfinite(number) or number != int(number):
        raise UserError(f"{name}: {value!r} is not a whole number")
    return int(number)


def _float_control(value: Any, name: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{name}: {value!r} is not a number") from None
    if not math.isfinite(number):
        raise UserError(f"{name}: {value!r} is not a finite number")
    return number


def read_settings(labels_text: str | None, template: str | None, method: str, k: Any, alpha: Any, lam: Any,
                  capacity: Any, bank_size: Any, base: EngineConfig) -> Settings:
    """Validate the controls into Settings (one-line UserError naming the control otherwise)."""
    from mstta.templates import check_templates

    labels = parse_labels(labels_text or "", where="Labels")
    if len(labels) > MAX_CLASSES:
        raise UserError(f"Labels: {len(labels)} class names; the UI takes at most {MAX_CLASSES}")
    template = (template or "").strip() or None
    if template is not None:
        check_templates([template], "Template")
    method = get_method(str(method)).name
    config = dataclasses.replace(
        base, k=_int_control(k, "k"), alpha=_float_control(alpha, "alpha"), lam=_float_control(lam, "lambda"),
        capacity=_int_control(capacity, "Q (cache size per class)"), bank_size=_int_control(bank_size, "bank size"))
    if config.bank_size > MAX_BANK_SIZE:
        raise UserError(f"bank size {config.bank_size}: at most {MAX_BANK_SIZE} in the UI")
    return Settings(tuple(labels), template, method, config)


def apply_settings(ui: UISession, settings: Settings, new_stream) -> str | None:
    """Bring the session in line with `settings`; returns a note when the engine restarted.

    The new classifier is built before anything is replaced, so a failure leaves the session as
    it was. `new_stream(settings)` makes the first StreamSession of a session.
    """
    if ui.stream is None:
        ui.stream = new_stream(settings)
        ui.restart_history(ui.source)
        return None
    stream, changed = ui.stream, []
    if list(settings.labels) != stream.labels or settings.template != stream.template:
        stream.set_labels(settings.labels, settings.template)
        changed.append(f"{len(settings.labels)} classes")
    if settings.method != stream.method or settings.config != stream.config:
        stream.configure(settings.method, settings.config)
        changed.append(f"{method_title(settings.method)} settings")
    if not changed:
        return None
    ui.restart_history(ui.source)
    return "New " + " and ".join(changed) + ": the adaptation started afresh."


# ---------------------------------------------------------------------------- rendering
def _demo_clip() -> tuple[str, str, str | None] | None:
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


def _render(gr, ui: UISession, image: np.ndarray | None, result: FrameResult | None, frame: int | None,
            status: str, fps: float | None = None, plots_too: bool = True) -> tuple:
    """Every output, in OUTPUT_NAMES order, for the current frame (or the empty page).

    `image` None with a result keeps the picture on the page; `plots_too` False leaves the plots
    over time as they are (they are the expensive part for the browser).
    """
    h, s = ui.history, ui.stream
    title = method_title(s.method) if s is not None else "adapted"
    topk = s.topk if s is not None else 3
    if result is not None:
        picture = (annotate(image, result, fps=fps, bank_limit=s.config.bank_size if s else None)
                   if image is not None else gr.skip())
        clip_items, tta_items, fill = result.clip_topk, result.tta_topk, result.cache_per_class
        raw = result.to_dict() | {"frame": frame}
    else:
        picture, raw, clip_items, tta_items = None, None, [], []
        fill = [0] * len(s.labels) if s is not None else []
    capacity = s.config.capacity if s is not None else None
    if plots_too:
        switches = plots.switches_frame(h)
        x_lim = plots.frame_range(h)
        over_time = (
            plots.legend_html(s.method if s is not None else None),
            gr.LinePlot(value=plots.confidence_frame(h), x_lim=x_lim,
                        label=f"Confidence of the top class (adapted = {title})"),
            gr.LinePlot(value=plots.agreement_frame(h), x_lim=x_lim,
                        label=f"Running agreement rate, CLIP vs {title} (%)"),
            gr.LinePlot(value=switches, x_lim=x_lim, y_lim=[0, plots.finite_max(switches["switches"]) + 1],
                        label=f"Prediction switches: top-1 changes so far (adapted = {title})"),
            gr.BarPlot(value=plots.cache_frame(s.labels if s is not None else [], fill), y_lim=[0, capacity or 1],
                       sort=list(s.labels) if s is not None else None, label=plots.cache_label(s)),   # labels' order
            # always on the page (empty without truth): hiding a plot while it redraws breaks it in the browser
            gr.LinePlot(value=plots.accuracy_frame(h), x_lim=x_lim,
                        label=f"Running accuracy on labelled frames, CLIP vs {title} (%)" if h.labelled
                        else "Running accuracy (%): give a ground-truth CSV with the video to see it"),
        )
    else:
        over_time = (gr.skip(),) * 6
    return (
        status,
        plots.verdict_html(result),
        picture,
        gr.BarPlot(value=plots.topk_frame(clip_items, plots.CLIP_NAME), label=f"CLIP zero-shot: top-{topk}"),
        gr.BarPlot(value=plots.topk_frame(tta_items, plots.ADAPTED_NAME), label=f"{title}: top-{topk}"),
        *over_time,
        plots.stats_markdown(ui.history, ui.stream, fps),
        raw,
        ui,
    )


def _warn(message: str) -> str:
    return f"⚠️ {message}"


def _ui_message(exc: BaseException, path: str | None = None) -> str:
    """A library error as the page shows it: one line, the upload's name instead of its temp path."""
    text = one_line(exc)
    if path is not None:
        shown = f"'{Path(path).name}'"
        for flag in ("--video", "--truth"):
            text = text.replace(f"{flag} {path}", shown)
        text = text.replace(str(path), shown)
    return text.replace("; pass a video file, an image folder or a stream URL", "; upload a video file")


# ---------------------------------------------------------------------------- the app
def build_app(clip: Any, *, labels: Sequence[str] | None = None, video: str | None = None,
              truth: str | None = None, template: str | None = None, method: str = "ms-tta",
              config: EngineConfig | None = None, every: int | None = None, topk: int = 3, views: int = 1,
              max_frames: int | None = None, autostart: bool | None = None, concurrency: int = DEFAULT_CONCURRENCY,
              update_interval: float = UPDATE_INTERVAL_S, plot_interval: float = PLOT_INTERVAL_S,
              webcam_every: float = WEBCAM_EVERY_S,
              webcam_time_limit: int = WEBCAM_TIME_LIMIT_S, session_ttl: float = SESSION_TTL_S,
              offer_demo_clip: bool = True):
    """The UI as a `gr.Blocks` (not launched): layout and event wiring around the shared `clip`.

    `labels` fill the labels box; `video` (a file) and `truth` (its CSV) are preloaded, and with
    `autostart` (default: when both video and labels are given) each new page starts processing
    the video at once. `method`, `config`, `every`, `topk`, `views` and `max_frames` are the
    defaults of the controls and of every session, as in the headless demo. `concurrency` bounds
    the model calls running at once (all users together); `update_interval` (s) bounds how often
    a video run refreshes the current frame and `plot_interval` (s) the plots over time (0: after
    every frame; a browser that cannot redraw as fast falls behind). `offer_demo_clip` adds a
    button that loads assets/demo.mp4 with its labels and ground truth.
    """
    import gradio as gr

    base = config if config is not None else EngineConfig(bank_size=DEFAULT_BANK_SIZE)
    if base.bank_size is None:
        base = dataclasses.replace(base, bank_size=DEFAULT_BANK_SIZE)
    method = get_method(method).name
    autostart = bool(video and labels) if autostart is None else autostart
    sessions: "weakref.WeakValueDictionary[str, UISession]" = weakref.WeakValueDictionary()
    model_line = (f"Model **{getattr(clip, 'name', '?')}** ({getattr(clip, 'pretrained', '?')}) on "
                  f"{getattr(clip, 'device', '?')}, {str(getattr(clip, 'dtype', '')).replace('torch.', '')}")

    demo_clip = _demo_clip() if offer_demo_clip else None
    if autostart:
        hello = "Processing the preloaded video…"
    elif video:
        hello = "A video is loaded: press **Process video**, or open the **Webcam** tab."
    else:
        hello = ("Upload a video" + (" (or use the demo clip)" if demo_clip else "")
                 + " and press **Process video**, or open the **Webcam** tab.")

    def new_stream(s: Settings) -> StreamSession:
        return StreamSession(clip, list(s.labels), template=s.template, method=s.method, config=s.config,
                             views=views, topk=topk)

    def session_of(ui: UISession | None, request: gr.Request | None) -> UISession:
        ui = ui if isinstance(ui, UISession) else UISession()
        hash_ = getattr(request, "session_hash", None) if request is not None else None
        if hash_ and ui.session_hash != hash_:
            ui.session_hash = hash_
            sessions[hash_] = ui
        return ui

    def free_session(ui: UISession | None) -> None:
        if isinstance(ui, UISession):
            ui.close()
            log.info("session %s freed", ui.session_hash)

    def failed(ui: UISession, message: str, toast: bool = True) -> tuple:
        if toast:
            gr.Warning(message)
        return tuple(_warn(message) if n == "status" else ui if n == "state" else gr.skip() for n in OUTPUT_NAMES)

    # ------------------------------------------------------------------ handlers
    def on_apply(labels_text, template_text, method_name, k, alpha, lam, capacity, bank_size,
                 ui: UISession | None, request: gr.Request):
        """Apply the labels and settings now (builds the classifier; restarts the engine if changed)."""
        ui = session_of(ui, request)
        try:
            settings = read_settings(labels_text, template_text, method_name, k, alpha, lam, capacity, bank_size, base)
            with ui.lock:
                existed = ui.stream is not None
                note = apply_settings(ui, settings, new_stream)
        except UserError as exc:
            return failed(ui, one_line(exc))
        if existed and note is None:
            return tuple("Labels and settings unchanged." if n == "status" else ui if n == "state" else gr.skip()
                         for n in OUTPUT_NAMES)
        text = note or f"Ready: {len(settings.labels)} classes, {method_title(settings.method)}."
        return _render(gr, ui, None, None, None, text)

    def on_reset(ui: UISession | None, request: gr.Request):
        """Forget the adaptation: empty cache and bank; the classifier stays."""
        ui = session_of(ui, request)
        with ui.lock:
            if ui.stream is not None:
                ui.stream.reset()
            ui.restart_history(ui.source)
        return _render(gr, ui, None, None, None, "Adaptation state cleared: empty cache and bank.")

    def on_stop(ui: UISession | None):
        """Ask the running video to end after its current frame; the run itself then reports."""
        if not isinstance(ui, UISession) or not ui.runs:
            return "Nothing to stop: no video is being processed."
        ui.stop_at = time.monotonic()
        return gr.skip()   # a message here could land after the run's last page and hide it

    def on_video(video_path, truth_file, every_n, labels_text, template_text, method_name, k, alpha, lam,
                 capacity, bank_size, ui: UISession | None, request: gr.Request) -> Iterator[tuple]:
        """Process a video file, streaming the results as frames are done."""
        ui = session_of(ui, request)
        if not video_path:
            yield failed(ui, "No video yet: upload one" + (" or use the demo clip" if demo_clip else "")
                         + ", then press Process video.")
            return
        name = Path(str(video_path)).name
        if not Path(str(video_path)).exists():
            yield failed(ui, f"'{name}' is no longer on the server (uploads are kept {CACHE_CLEANUP_S[1] // 60} "
                             "minutes); upload it again.")
            return
        try:
            settings = read_settings(labels_text, template_text, method_name, k, alpha, lam, capacity, bank_size, base)
            step = _int_control(every_n, "Every N-th frame") if every_n not in (None, "") else 0
            if step < 0:
                raise UserError(f"Every N-th frame: {step} is negative; use 0 for about 5 frames per second")
        except UserError as exc:
            yield failed(ui, one_line(exc))
            return
        truth_obj: Truth | None = None
        if truth_file:
            try:
                truth_obj = read_truth(truth_file, settings.labels)
            except UserError as exc:
                yield failed(ui, "Ground truth: " + _ui_message(exc, str(truth_file)))
                return
        try:
            source = _open_video(str(video_path))
        except UserError as exc:
            yield failed(ui, _ui_message(exc, str(video_path)))
            return
        try:
            with ui.lock:
                note = apply_settings(ui, settings, new_stream)
        except UserError as exc:
            source.close()
            yield failed(ui, one_line(exc))
            return
        yield from _run_video(gr, ui, source, name, step or default_every(source.fps), truth_obj, note,
                              max_frames, update_interval, plot_interval)

    def on_frame(image, labels_text, template_text, method_name, k, alpha, lam, capacity, bank_size,
                 ui: UISession | None, request: gr.Request):
        """One webcam frame (RGB numpy): adapt, predict, draw."""
        ui = session_of(ui, request)
        if image is None:
            return tuple(ui if n == "state" else gr.skip() for n in OUTPUT_NAMES)
        try:
            image = _as_rgb(image)
            settings = read_settings(labels_text, template_text, method_name, k, alpha, lam, capacity, bank_size, base)
            with ui.lock:
                note = apply_settings(ui, settings, new_stream)
                if ui.source != "webcam":
                    ui.restart_history("webcam")
                result = ui.stream.process(image)
                index = ui.webcam_frames
                ui.webcam_frames += 1
                ui.history.update(index, result)
                fps = ui.meter.tick()
        except UserError as exc:   # a stream repeats its error every frame: one toast, then the status line
            message, repeated = one_line(exc), ui.last_error == one_line(exc)
            ui.last_error = message
            return failed(ui, message, toast=not repeated)
        ui.last_error = None
        status = note or f"Webcam: frame {index + 1} processed."
        now = time.monotonic()
        plots_too = note is not None or plot_interval <= 0 or now - ui.last_plots >= plot_interval
        if plots_too:
            ui.last_plots = now
        return _render(gr, ui, image, result, index, status, fps, plots_too)

    def on_unload(request: gr.Request):
        ui = sessions.pop(getattr(request, "session_hash", None) or "", None)
        free_session(ui)

    def safe(fn, generator: bool = False, status_only: bool = False):
        """Last line of defence: an unexpected error is logged with its traceback and shown as one
        line in the status (`status_only`: the handler's one output), never as a trace in the page."""
        def page(exc: Exception):
            log.exception("UI handler %s failed", fn.__name__)
            message = _warn(f"Internal error ({type(exc).__name__}: {one_line(exc)[:200]}); "
                            "details are in the server log.")
            return message if status_only else tuple(message if n == "status" else gr.skip() for n in OUTPUT_NAMES)

        if generator:
            @functools.wraps(fn)
            def wrapped_gen(*args, **kwargs):
                try:
                    yield from fn(*args, **kwargs)
                except Exception as exc:  # noqa: BLE001 - logged with its traceback, shown as one line
                    yield page(exc)
            return wrapped_gen

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - logged with its traceback, shown as one line
                return page(exc)
        return wrapped

    # ------------------------------------------------------------------ layout
    with gr.Blocks(title="MS-TTA live: CLIP vs test-time adaptation", analytics_enabled=False,
                   delete_cache=CACHE_CLEANUP_S) as demo:
        state = gr.State(new_session, time_to_live=session_ttl, delete_callback=free_session)
        gr.Markdown("# MS-TTA live: zero-shot CLIP vs test-time adaptation\n"
                    "Each frame's CLIP features are classified twice: by zero-shot CLIP and by the adapted "
                    f"method, side by side. {model_line}.", elem_id="mstta-title")
        labels_in = gr.Textbox(value="\n".join(labels or []), lines=5, max_lines=20, render=False,
                               label="Labels (one class per line)", elem_id="mstta-labels",
                               placeholder="cat\ndog\nbird")
        with gr.Row(equal_height=False):
            with gr.Column(scale=2, min_width=340):
                with gr.Tabs():
                    with gr.Tab("Video", id="video-tab", elem_id="mstta-video-tab"):
                        video_in = gr.File(value=video, label="Video file (mp4, avi, mov, mkv, webm, ...)",
                                           file_types=list(VIDEO_TYPES), height=130, elem_id="mstta-video")
                        truth_in = gr.File(value=truth, label="Ground truth CSV (optional: adds accuracy)",
                                           file_types=[".csv", ".txt"], height=110, elem_id="mstta-truth")
                        every_in = gr.Number(value=every or 0, precision=0, minimum=0,
                                             label="Process every N-th frame (0 = about 5 per second of video)")
                        with gr.Row():
                            run_btn = gr.Button("▶ Process video", variant="primary", elem_id="mstta-run")
                            stop_btn = gr.Button("■ Stop", variant="stop", elem_id="mstta-stop")
                        if demo_clip is not None:
                            clip_btn = gr.Button("Use the demo clip: shapes at dusk, with ground truth", size="sm",
                                                 elem_id="mstta-demo-clip")
                    with gr.Tab("Webcam", id="webcam-tab", elem_id="mstta-webcam-tab"):
                        cam_in = gr.Image(sources=["webcam"], streaming=True, type="numpy", label="Webcam",
                                          height=260, elem_id="mstta-webcam",
                                          webcam_options=gr.WebcamOptions(mirror=False))   # as the camera sees
                        gr.HTML('<div id="mstta-camera-message" role="alert" style="display:none;padding:10px 12px;'
                                'border-radius:8px;background:#fee2e2;color:#991b1b;font-weight:600"></div>',
                                elem_id="mstta-camera-error")
                        gr.Markdown("Click the camera, allow access, then press **Record**: frames stream to "
                                    "the model while it records. If the browser blocked the camera, allow it "
                                    "from the address bar and reload the page.")
                labels_in.render()
                template_in = gr.Textbox(value=template or "", label="Prompt template (empty: built-in ensemble)",
                                         placeholder="a photo of a {}.", elem_id="mstta-template")
                with gr.Accordion("Adaptation settings", open=True):
                    method_in = gr.Dropdown(list_methods(), value=method, label="Method", elem_id="mstta-method")
                    with gr.Row():
                        k_in = gr.Slider(1, 16, value=base.k, step=1, label="k (mean-shift neighbours)")
                        alpha_in = gr.Slider(0.0, 1.0, value=base.alpha, step=0.05, label="α (mean-shift weight)")
                    with gr.Row():
                        lam_in = gr.Slider(0.0, 5.0, value=base.lam, step=0.1, label="λ (cache weight)")
                        cap_in = gr.Slider(1, 16, value=base.capacity, step=1, label="Q (cache size per class)")
                    bank_in = gr.Number(value=min(base.bank_size, MAX_BANK_SIZE), precision=0, minimum=1,
                                        maximum=MAX_BANK_SIZE, label="Bank size (features)")
                    with gr.Row():
                        apply_btn = gr.Button("Apply labels and settings", elem_id="mstta-apply")
                        reset_btn = gr.Button("↺ Reset adaptation", elem_id="mstta-reset")
            with gr.Column(scale=3, min_width=420):
                status_out = gr.Markdown(hello, elem_id="mstta-status", container=True, padding=True)
                verdict_out = gr.HTML(plots.verdict_html(None), elem_id="mstta-verdict")
                frame_out = gr.Image(label="Current frame, both predictions drawn", type="numpy", format="jpeg",
                                     interactive=False, height=380, elem_id="mstta-frame")
                with gr.Row():
                    clip_bars = gr.BarPlot(plots.topk_frame([], plots.CLIP_NAME), x="class", y="probability",
                                           color="model", color_map=plots.COLOR_MAP, y_lim=[0, 1], height=230,
                                           sort="-y", label=f"CLIP zero-shot: top-{topk}", elem_id="mstta-clip-topk",
                                           **NO_LEGEND)
                    tta_bars = gr.BarPlot(plots.topk_frame([], plots.ADAPTED_NAME), x="class", y="probability",
                                          color="model", color_map=plots.COLOR_MAP, y_lim=[0, 1], height=230,
                                          sort="-y", label=f"{method_title(method)}: top-{topk}",
                                          elem_id="mstta-tta-topk", **NO_LEGEND)
                stats_out = gr.Markdown("", elem_id="mstta-stats")
        legend_out = gr.HTML(plots.legend_html(method), elem_id="mstta-legend")
        empty = plots.History()
        with gr.Row():
            conf_plot = gr.LinePlot(plots.confidence_frame(empty), x="frame", y="confidence", color="model",
                                    color_map=plots.COLOR_MAP, y_lim=[0, 1], height=260, y_title="top-1 probability",
                                    label="Confidence of the top class", elem_id="mstta-confidence", **NO_LEGEND)
            agree_plot = gr.LinePlot(plots.agreement_frame(empty), x="frame", y="agreement", y_lim=[0, 100],
                                     height=260, y_title="agree (%)", label="Running agreement rate (%)",
                                     elem_id="mstta-agreement")
        with gr.Row():
            switch_plot = gr.LinePlot(plots.switches_frame(empty), x="frame", y="switches", color="model",
                                      color_map=plots.COLOR_MAP, y_lim=[0, 1], height=260, y_title="switches",
                                      label="Prediction switches: top-1 changes so far", elem_id="mstta-switches",
                                      **NO_LEGEND)
            cache_plot = gr.BarPlot(plots.cache_frame(labels or [], [0] * len(labels or [])), x="class", y="entries",
                                    y_lim=[0, base.capacity], height=260, sort=list(labels) if labels else None,
                                    label=f"Cache occupancy per class (Q = {base.capacity})", elem_id="mstta-cache")
        acc_plot = gr.LinePlot(plots.accuracy_frame(empty), x="frame", y="accuracy", color="model",
                               color_map=plots.COLOR_MAP, y_lim=[0, 100], height=220, y_title="accuracy (%)",
                               label="Running accuracy (%): give a ground-truth CSV with the video to see it",
                               elem_id="mstta-accuracy", **NO_LEGEND)
        with gr.Accordion("Raw result of the last frame (JSON)", open=False):
            result_out = gr.JSON(elem_id="mstta-result")

        # ------------------------------------------------------------------ wiring
        settings_in = [labels_in, template_in, method_in, k_in, alpha_in, lam_in, cap_in, bank_in]
        outputs = [status_out, verdict_out, frame_out, clip_bars, tta_bars, legend_out, conf_plot, agree_plot,
                   switch_plot, cache_plot, acc_plot, stats_out, result_out, state]
        model_calls = dict(concurrency_limit=concurrency, concurrency_id="mstta-model")
        video_inputs = [video_in, truth_in, every_in, *settings_in, state]
        # The status line shows a run's progress itself (a gr.Progress overlay would cover it).
        run_btn.click(safe(on_video, generator=True), video_inputs, outputs, api_name="process_video",
                      show_progress="hidden", **model_calls)
        if autostart:
            demo.load(safe(on_video, generator=True), video_inputs, outputs, api_name=False,
                      show_progress="hidden", **model_calls)
        # Stop is a flag the video loop reads after each frame, not an event cancel: the run then ends
        # with a last, complete page instead of being cut off between two updates.
        stop_btn.click(safe(on_stop, status_only=True), [state], [status_out], api_name="stop", queue=False)
        quick = dict(show_progress="minimal", show_progress_on=[status_out])
        apply_btn.click(safe(on_apply), [*settings_in, state], outputs, api_name="apply_settings", **quick,
                        **model_calls)
        reset_btn.click(safe(on_reset), [state], outputs, api_name="reset", concurrency_limit=None, **quick)
        cam_in.stream(safe(on_frame), [cam_in, *settings_in, state], outputs, api_name="webcam",
                      stream_every=webcam_every, time_limit=webcam_time_limit, show_progress="hidden",
                      **model_calls)
        # The same per-frame handler for API clients (gradio_client cannot join a browser stream).
        api_frame = gr.Image(type="numpy", visible=False)
        gr.Button(visible=False).click(safe(on_frame), [api_frame, *settings_in, state], outputs,
                                       api_name="process_frame", show_progress="hidden", **model_calls)
        # a truth file belongs to one video: a new upload clears it
        video_in.upload(lambda: None, None, truth_in, api_name=False, queue=False)
        if demo_clip is not None:
            clip_btn.click(lambda: demo_clip, None, [video_in, labels_in, truth_in], api_name=False, queue=False)
        demo.load(None, None, None, js=CAMERA_JS)
        demo.unload(on_unload)
    for dep in demo.fns.values():   # the State's per-page-load factory is no API endpoint
        if getattr(dep, "fn", None) is new_session:
            dep.api_visibility = "private"
    demo.mstta_sessions = sessions   # live sessions by session hash (for tests and debugging)
    return demo


def _as_rgb(image: Any) -> np.ndarray:
    """A webcam or API image as RGB uint8 [H, W, 3] (gray and RGBA are converted)."""
    arr = np.asarray(image)
    if arr.dtype != np.uint8:
        arr = np.clip(arr, 0, 255).astype(np.uint8)
    if arr.ndim == 2:
        arr = np.repeat(arr[:, :, None], 3, axis=2)
    if arr.ndim != 3 or arr.shape[2] not in (3, 4) or min(arr.shape[:2]) < 2:
        raise UserError(f"the image has shape {tuple(arr.shape)}; expected an RGB picture")
    return np.ascontiguousarray(arr[:, :, :3])


def _open_video(path: str):
    """Open an uploaded (or preloaded) video file; folders and streams are the headless demo's."""
    from .sources import classify_source, open_source

    kind, _ = classify_source(path)
    if kind != "file":
        raise UserError(f"--video {path}: the browser UI plays video files; use --headless for folders, "
                        "streams and cameras")
    return open_source(path)


def _run_video(gr, ui: UISession, source, name: str, every: int, truth: Truth | None, note: str | None,
               max_frames: int | None, update_interval: float, plot_interval: float) -> Iterator[tuple]:
    """The video loop: process every `every`-th frame; refresh the page at most every
    `update_interval` s and its plots over time at most every `plot_interval` s."""
    import cv2
    total_frames = getattr(source, "frame_count", None)
    expected = math.ceil(total_frames / every) if total_frames else None
    if max_frames is not None and expected is not None:
        expected = min(expected, max_frames)
    sampler = Sampler(every)
    with ui.lock:
        ui.restart_history("video")
        ui.runs += 1
    prefix = (note + " ") if note else ""
    last_yield = last_plots = 0.0
    pending: tuple | None = None
    start, started = time.perf_counter(), time.monotonic()
    stopped, failure = False, None
    try:
        for frame in sampler(source):
            if ui.stop_at > started:
                stopped = True
                break
            with ui.lock:
                if ui.stream is None:   # the page closed mid-run: its session was freed
                    return
                result = ui.stream.process(frame.image)
                label = truth.label_at(frame.index) if truth is not None else None
                ui.history.update(frame.index, result, label)
                fps = ui.meter.tick()
                done = ui.history.processed
            of = f" of ~{expected}" if expected else ""
            status = (f"{prefix}Processing **{html.escape(name)}**: frame {done}{of} (every {every})"
                      f"{plots.progress_bar(done, expected)}")
            now = time.perf_counter()
            if update_interval <= 0 or now - last_yield >= update_interval:
                plots_too = plot_interval <= 0 or now - last_plots >= plot_interval
                last_yield, last_plots = now, now if plots_too else last_plots
                pending = None
                with ui.lock:
                    page = _render(gr, ui, frame.image, result, frame.index, status, fps, plots_too)
                yield page   # never while holding the lock: the next step may run on another thread
            else:
                pending = (frame.image, result, frame.index, fps)
            if max_frames is not None and done >= max_frames:
                break
    except (OSError, cv2.error) as exc:   # a decoder failing mid-file (UserErrors are reported by the caller)
        failure = f"{name}: reading the video failed after {ui.history.processed} frames ({one_line(exc)[:200]})"
    finally:
        source.close()
        with ui.lock:
            ui.runs -= 1
    if failure is not None:
        log.warning("%s", failure)
        yield _render(gr, ui, None, ui.history.last, None, _warn(failure), plots_too=True)
        return
    seconds = time.perf_counter() - start
    processed = ui.history.processed
    log.info("%s: %d frames processed in %.1f s%s", name, processed, seconds, " (stopped)" if stopped else "")
    if processed == 0:
        message = "Stopped before the first frame." if stopped else _warn(f"{name}: no frame could be processed.")
        yield _render(gr, ui, None, None, None, message)
        return
    if stopped:
        status = (f"Stopped after {processed} frames of **{html.escape(name)}**; the adaptation state is kept "
                  "(**Reset** clears it).")
    else:
        status = (f"{prefix}Done: **{html.escape(name)}**, {processed} frames processed (every {every}, "
                  f"{source.stats.read} read) in {seconds:.1f} s.")
    if pending is not None:
        image, result, index, fps = pending
    else:   # the last frame is on the page already: keep its picture, refresh the rest
        image, result, index, fps = None, ui.history.last, ui.history.points[-1].frame, None
    with ui.lock:
        page = _render(gr, ui, image, result, index, status, fps)
    yield page


# ---------------------------------------------------------------------------- command line
def add_ui_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the browser UI's flags (used without --headless) to the `mstta-demo` parser (once)."""
    if "--host" in parser._option_string_actions:   # already added: calling twice is harmless
        return parser
    g = parser.add_argument_group("browser UI (without --headless)")
    g.add_argument("--host", default=DEFAULT_HOST,
                   help=f"address to bind (default {DEFAULT_HOST}: this machine only; 0.0.0.0 opens it to the network)")
    g.add_argument("--port", type=int, default=DEFAULT_PORT, metavar="N",
                   help=f"port to listen on (default {DEFAULT_PORT}; 0 picks a free one)")
    g.add_argument("--share", action="store_true", help="also make a public gradio.live link (off by default)")
    g.add_argument("--max-upload-mb", type=float, default=DEFAULT_MAX_UPLOAD_MB, metavar="MB",
                   help=f"largest video or file a user may upload (default {DEFAULT_MAX_UPLOAD_MB} MB)")
    g.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY, metavar="N",
                   help=f"model calls running at once, all users together (default {DEFAULT_CONCURRENCY})")
    g.add_argument("--queue-size", type=int, default=DEFAULT_QUEUE_SIZE, metavar="N",
                   help=f"requests allowed to wait beyond those; more are refused (default {DEFAULT_QUEUE_SIZE})")
    return parser


def resolve_port(host: str, port: int) -> int:
    """`port` if it is free on `host`, a free one when 0; a busy or bad port is a one-line UserError."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise UserError(f"--port {port!r}: expected 0 (any free port) or a port number 1-65535")
    bind_host = host.strip("[]") or DEFAULT_HOST
    family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((bind_host, port))
        except OSError as exc:
            if port and exc.errno in (98, 48, 10048):   # EADDRINUSE on Linux, macOS, Windows
                raise UserError(f"--port {port}: already in use on {host}; stop the program using it, "
                                "or pass another --port (0 picks a free one)") from None
            raise UserError(f"--host {host} --port {port}: cannot listen there ({exc.strerror or exc})") from None
        return s.getsockname()[1]


def _opt(args: argparse.Namespace, name: str, default: Any = None) -> Any:
    return getattr(args, name, default)


def _check_positive(value: Any, flag: str, number: type = int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float) if number is float else int) or value <= 0:
        raise UserError(f"{flag} {value!r}: expected a {'number' if number is float else 'whole number'} > 0")


def run_ui(args: argparse.Namespace) -> int:
    """`mstta-demo` without --headless: check the flags, load the model once, serve the UI until Ctrl-C."""
    from .pipeline import engine_config

    for flag, name in (("--camera", "camera"), ("--out", "out"), ("--log", "log")):
        if _opt(args, name) is not None:
            raise UserError(f"{flag} is for --headless runs; the browser UI takes videos and the browser's "
                            f"webcam (drop {flag}, or add --headless)")
    host, port = _opt(args, "host", DEFAULT_HOST), _opt(args, "port", DEFAULT_PORT)
    _check_positive(_opt(args, "max_upload_mb", DEFAULT_MAX_UPLOAD_MB), "--max-upload-mb", float)
    _check_positive(_opt(args, "concurrency", DEFAULT_CONCURRENCY), "--concurrency")
    _check_positive(_opt(args, "queue_size", DEFAULT_QUEUE_SIZE), "--queue-size")
    for flag, name in (("--every", "every"), ("--max-frames", "max_frames")):
        if _opt(args, name) is not None:
            _check_positive(_opt(args, name), flag)
    _check_positive(_opt(args, "topk", 3), "--topk")
    _check_positive(_opt(args, "views", 1), "--views")
    labels = read_labels(args.labels) if _opt(args, "labels") else None
    template = _opt(args, "template")
    if template is not None:
        from .labels import templates_for

        templates_for(template)
    method = get_method(_opt(args, "method", "ms-tta")).name
    config = engine_config(_opt(args, "bank_size", DEFAULT_BANK_SIZE), list(_opt(args, "set", None) or []))
    truth = _opt(args, "truth")
    if truth is not None:
        if labels is None:
            raise UserError("--truth needs --labels (its class names are checked against the labels file)")
        read_truth(truth, labels)
    video = _opt(args, "video")
    if video is not None:
        _open_video(video).close()    # readable now, or a one-line error before the model loads
        video = str(Path(video).resolve())
    port = resolve_port(host, port)

    from mstta.models import load_clip

    clip = load_clip(_opt(args, "model", "ViT-B-16"), _opt(args, "pretrained", "openai"),
                     device=_opt(args, "device", "auto"), precision=_opt(args, "precision"))
    concurrency = _opt(args, "concurrency", DEFAULT_CONCURRENCY)
    demo = build_app(clip, labels=labels, video=video, truth=str(Path(truth).resolve()) if truth else None,
                     template=template, method=method, config=config, every=_opt(args, "every"),
                     topk=_opt(args, "topk", 3), views=_opt(args, "views", 1), max_frames=_opt(args, "max_frames"),
                     concurrency=concurrency)
    demo.queue(max_size=_opt(args, "queue_size", DEFAULT_QUEUE_SIZE), default_concurrency_limit=concurrency)
    _, local_url, share_url = demo.launch(**launch_options(host, port, share=bool(_opt(args, "share", False)),
                                                           max_upload_mb=_opt(args, "max_upload_mb",
                                                                              DEFAULT_MAX_UPLOAD_MB)))
    print(f"{PROG}: UI running at {local_url} (Ctrl-C to stop)", flush=True)
    if share_url:
        print(f"{PROG}: public link {share_url}", flush=True)
    return _serve(demo)


def launch_options(host: str = DEFAULT_HOST, port: int | None = None, *, share: bool = False,
                   max_upload_mb: float = DEFAULT_MAX_UPLOAD_MB) -> dict[str, Any]:
    """`demo.launch(**launch_options(...))`: loopback by default, bounded uploads, only the demo's files."""
    return dict(server_name=host, server_port=port, share=share, max_file_size=int(max_upload_mb * 1024 * 1024),
                allowed_paths=[str(ASSETS_DIR)], prevent_thread_lock=True, quiet=True, show_error=False,
                inbrowser=False, enable_monitoring=False, run_history=False, mcp_server=False, ssr_mode=False,
                footer_links=["api", "gradio"], theme=_theme())


def _theme():
    """Gradio's default look with the system's fonts (nothing fetched, crisp everywhere)."""
    import gradio as gr

    return gr.themes.Default(font=["system-ui", "Liberation Sans", "DejaVu Sans", "sans-serif"],
                             font_mono=["ui-monospace", "DejaVu Sans Mono", "monospace"])


def _serve(demo) -> int:
    """Block until Ctrl-C or SIGTERM, then close the server; 0 (stopping a server is its normal end)."""
    main_thread = threading.current_thread() is threading.main_thread()

    def on_sigterm(signum, frame):  # noqa: ANN001 - signal handler signature
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_sigterm) if main_thread else None
    try:
        while demo.is_running:
            time.sleep(0.2)
    except KeyboardInterrupt:
        print(f"{PROG}: stopping the UI", flush=True)
    finally:
        demo.close(verbose=False)
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    return 0
