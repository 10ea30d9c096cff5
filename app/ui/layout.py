"""The page: every component, placed, returned as one `Components` object (no behaviour here).

At 1280x720 the frame, the agreement banner and both top-k charts sit in the first screen (right
column); the controls are on the left; the plots over time follow below, two per row.
"""
from __future__ import annotations

import base64
import binascii
import dataclasses
import logging
from typing import Any, Sequence

import gradio as gr

from mstta.config import EngineConfig
from mstta.methods import get_method, list_methods

from . import plots
from .handlers import VIDEO_TYPES, empty_page, method_info
from .state import MAX_BANK_SIZE, UISession

log = logging.getLogger(__name__)

CSS = """
.gradio-container {max-width: 1600px !important; padding-top: 6px !important}
#mstta-title h1 {font-size: 1.2rem; margin: 0; display: inline}
#mstta-title p {margin: 0; font-size: .85rem}
#mstta-random-weights {padding: 5px 12px; border-radius: 8px; background: #fef3c7; color: #92400e;
  font-weight: 600; border: 1px solid #f59e0b}
#mstta-random-weights span {font-weight: 400}
#mstta-verdict-box {padding: 6px 12px; border-radius: 8px; font-size: 1.05rem; font-weight: 600; color: white;
  background: #6b7280}
#mstta-verdict-box.agree {background: #16a34a}
#mstta-verdict-box.disagree {background: #dc2626}
#mstta-status {min-height: 0; padding: 6px 12px !important}
#mstta-status p {margin: 0}
.mstta-chart {margin: 0}
.mstta-chart figcaption {font-size: .85rem; display: flex; gap: 2px 12px; flex-wrap: wrap; align-items: center;
  margin-bottom: 2px}
.mstta-chart .key i {display: inline-block; width: 18px; height: 4px; border-radius: 2px; margin-right: 4px;
  vertical-align: middle}
.mstta-chart svg {width: 100%; height: auto; display: block}
.mstta-chart .axis-title {font-weight: 600}
.mstta-bars .row {display: flex; align-items: center; gap: 6px; font-size: .8rem; line-height: 1.15rem}
.mstta-bars .name {flex: 0 0 32%; text-align: right; overflow: hidden; text-overflow: ellipsis; white-space: nowrap}
.mstta-bars .track {flex: 1 1 auto; position: relative; height: .8rem; background: #f3f4f6; border-radius: 2px}
.mstta-bars .bar {position: absolute; left: 0; top: 0; bottom: 0; border-radius: 2px}
.mstta-bars .val {flex: 0 0 2.6rem; font-variant-numeric: tabular-nums}
.mstta-bars .axis .track {background: none; height: .9rem; border-top: 1px solid #9ca3af; border-radius: 0}
.mstta-bars .tick {position: absolute; top: 0; transform: translateX(-50%); font-size: .7rem; color: #6b7280}
.mstta-bars .axis-title {text-align: center; font-size: .75rem; color: #6b7280; padding-left: 32%}
"""


@dataclasses.dataclass
class Components:
    """Every component the handlers read or write (names as in `handlers.OUTPUTS`, plus inputs)."""

    state: Any
    # inputs
    video: Any
    truth: Any
    every: Any
    keep: Any
    webcam: Any
    api_frame: Any
    labels: Any
    template: Any
    method: Any
    k: Any
    alpha: Any
    lam: Any
    capacity: Any
    bank: Any
    # buttons and timers
    run: Any
    stop: Any
    apply: Any
    reset: Any
    drop_truth: Any
    demo_clip: Any | None
    api_button: Any
    webcam_timer: Any
    # outputs
    status: Any
    verdict: Any
    frame: Any
    clip_topk: Any
    tta_topk: Any
    stats: Any
    confidence: Any
    agreement: Any
    switches: Any
    cache: Any
    accuracy: Any
    result: Any

    @property
    def settings(self) -> list[Any]:
        """The controls `read_settings` takes, in its order."""
        return [self.labels, self.template, self.method, self.k, self.alpha, self.lam, self.capacity, self.bank]


# Gradio writes a .pyi stub beside any module that subclasses a component, so the two adaptations
# below wrap a component instance's `preprocess` instead.
MAX_INLINE_FRAME = 16 * 1024 * 1024   # bytes of one inline frame (a webcam JPEG is ~50 KB)


def frame_input(image: gr.Image) -> gr.Image:
    """`image` hands the handler the frame undecoded: the uploaded file's path, or the bytes of an
    inline `data:` URL (how the browser's webcam sends frames). The handler reads the header first
    and refuses frames above the pixel limit (`frames.decode_image`)."""
    def preprocess(payload):  # noqa: ANN001 - Gradio's ImageData
        if payload is None:
            return None
        if payload.url and payload.url.startswith("data:"):
            header, _, data = payload.url.partition(",")
            if len(data) > MAX_INLINE_FRAME * 4 // 3 + 4 or not header.endswith(";base64"):
                log.info("refused an inline frame: %d characters or not base64", len(data))
                raise gr.Error("the frame is too large or not a base64 image", print_exception=False)
            try:
                return base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError):
                log.info("refused an inline frame: not valid base64")
                raise gr.Error("the frame is not valid base64", print_exception=False) from None
        return payload.path

    image.preprocess = preprocess
    return image


def quiet(component: Any) -> Any:
    """`component` whose refusals (a value out of its range, not among its choices) are one server
    line: Gradio's own check raises an error that it would print with a full traceback."""
    checked = component.preprocess

    def preprocess(payload):  # noqa: ANN001 - the component's payload
        try:
            return checked(payload)
        except gr.Error as exc:
            log.info("refused %s: %s", component.label, exc.message)
            raise gr.Error(exc.message, print_exception=False) from None

    component.preprocess = preprocess
    return component


def Number(*args: Any, **kwargs: Any) -> gr.Number:  # noqa: N802 - stands for the component
    return quiet(gr.Number(*args, **kwargs))


def Slider(*args: Any, **kwargs: Any) -> gr.Slider:  # noqa: N802
    return quiet(gr.Slider(*args, **kwargs))


def Dropdown(*args: Any, **kwargs: Any) -> gr.Dropdown:  # noqa: N802
    return quiet(gr.Dropdown(*args, **kwargs))


def method_choices() -> list[tuple[str, str]]:
    return [(get_method(name).title, name) for name in list_methods()]


def build_layout(*, title_md: str, random_weights: bool, labels: Sequence[str] | None, video: str | None,
                 truth: str | None, template: str | None, method: str, base: EngineConfig, every: int | None,
                 topk: int, hello: str, demo_clip: bool, session_ttl: float, on_state_deleted) -> Components:
    """Create and place every component (inside an open `gr.Blocks`)."""
    state = gr.State(UISession, time_to_live=session_ttl, delete_callback=on_state_deleted)
    gr.Markdown(title_md, elem_id="mstta-title")
    if random_weights:
        gr.HTML(plots.RANDOM_WEIGHTS_HTML, elem_id="mstta-random-weights-banner")
    first = empty_page(status=hello)
    summary, unused = method_info(method)

    def off(name: str) -> dict:   # a control that does nothing for the method: disabled, saying why
        return dict(interactive=not unused[name], info=unused[name] or None, elem_id=f"mstta-{name}")

    with gr.Row(equal_height=False):
        with gr.Column(scale=2, min_width=330):
            with gr.Tabs():
                with gr.Tab("Video", id="video-tab", elem_id="mstta-video-tab"):
                    video_in = gr.File(value=video, label="Video file (mp4, avi, mov, mkv, webm, ...)",
                                       file_types=list(VIDEO_TYPES), height=150, elem_id="mstta-video",
                                       elem_classes=["mstta-file"])
                    truth_in = gr.File(value=truth, label="Ground truth CSV (optional: adds accuracy)",
                                       file_types=[".csv", ".txt"], height=150, elem_id="mstta-truth",
                                       elem_classes=["mstta-file"])
                    drop_truth = gr.Button("Drop the ground-truth file", size="sm", visible=False,
                                           elem_id="mstta-drop-truth")
                    every_in = Number(value=every or 0, precision=0, minimum=0,
                                         label="Process every N-th frame (0 = about 5 per second of video)")
                    with gr.Row():
                        run_btn = gr.Button("▶ Process video", variant="primary", elem_id="mstta-run")
                        stop_btn = gr.Button("■ Stop", variant="stop", elem_id="mstta-stop")
                    clip_btn = (gr.Button("Use the demo clip (with labels and ground truth)", size="sm",
                                          elem_id="mstta-demo-clip") if demo_clip else None)
                with gr.Tab("Webcam", id="webcam-tab", elem_id="mstta-webcam-tab"):
                    cam_in = frame_input(gr.Image(
                        sources=["webcam"], streaming=True, type="filepath", image_mode=None, label="Webcam",
                        height=260, elem_id="mstta-webcam", webcam_options=gr.WebcamOptions(mirror=False)))
                    gr.HTML('<div id="mstta-camera-message" role="alert" style="display:none;padding:10px 12px;'
                            'border-radius:8px;background:#fee2e2;color:#991b1b;font-weight:600"></div>',
                            elem_id="mstta-camera-error")
                    gr.Markdown("Click the camera, allow access, then press **Record**: frames stream to the "
                                "model while it records; **Stop** ends the run with its summary. If the browser "
                                "blocked the camera, allow it from the address bar and reload the page.")
            keep_in = gr.Checkbox(False, label="Keep adapting across videos",
                                  info="Off: each new video or source starts a fresh stream (empty cache and bank)",
                                  elem_id="mstta-keep")
            labels_in = gr.Textbox(value="\n".join(labels or []), lines=4, max_lines=20,
                                   label="Labels (one class per line)", elem_id="mstta-labels",
                                   placeholder="cat\ndog\nbird")
            template_in = gr.Textbox(value=template or "", label="Prompt template (empty: built-in ensemble)",
                                     placeholder="a photo of a {}.", elem_id="mstta-template")
            with gr.Accordion("Adaptation settings", open=True):
                method_in = Dropdown(method_choices(), value=method, label="Method", info=summary,
                                        elem_id="mstta-method")
                with gr.Row():
                    k_in = Slider(1, 16, value=base.k, step=1, label="k (mean-shift neighbours)", **off("k"))
                    alpha_in = Slider(0.0, 1.0, value=base.alpha, step=0.05, label="α (mean-shift weight)",
                                      **off("alpha"))
                with gr.Row():
                    lam_in = Slider(0.0, 5.0, value=base.lam, step=0.1, label="λ (cache weight)", **off("lam"))
                    cap_in = Slider(1, 16, value=base.capacity, step=1, label="Q (cache size per class)",
                                    **off("capacity"))
                bank_in = Number(value=min(base.bank_size or MAX_BANK_SIZE, MAX_BANK_SIZE), precision=0,
                                 minimum=1, maximum=MAX_BANK_SIZE, **off("bank"),
                                 label=f"Bank size (features; at most {MAX_BANK_SIZE:,} per session)")
                with gr.Row():
                    apply_btn = gr.Button("Apply labels and settings", elem_id="mstta-apply")
                    reset_btn = gr.Button("↺ Reset adaptation", elem_id="mstta-reset")
        with gr.Column(scale=3, min_width=420):
            status_out = gr.Markdown(hello, elem_id="mstta-status", container=True)
            verdict_out = gr.HTML(first["verdict"], elem_id="mstta-verdict")
            frame_out = gr.Image(label="Current frame, both predictions drawn", type="numpy", format="jpeg",
                                 interactive=False, height=270, elem_id="mstta-frame")
            with gr.Row(equal_height=True):
                clip_bars = gr.HTML(first["clip_topk"], elem_id="mstta-clip-topk", padding=False)
                tta_bars = gr.HTML(first["tta_topk"], elem_id="mstta-tta-topk", padding=False)
            stats_out = gr.Markdown("", elem_id="mstta-stats")
    gr.Markdown("## Over time", elem_id="mstta-over-time")
    with gr.Row():
        conf_plot = gr.HTML(first["confidence"], elem_id="mstta-confidence", padding=False)
        agree_plot = gr.HTML(first["agreement"], elem_id="mstta-agreement", padding=False)
    with gr.Row():
        switch_plot = gr.HTML(first["switches"], elem_id="mstta-switches", padding=False)
        acc_plot = gr.HTML(first["accuracy"], elem_id="mstta-accuracy", padding=False)
    cache_plot = gr.HTML(first["cache"], elem_id="mstta-cache", padding=False)
    with gr.Accordion("Raw result of the last frame (JSON)", open=False):
        result_out = gr.JSON(elem_id="mstta-result")
    # the per-frame handler for API clients (gradio_client cannot join a browser stream)
    api_frame = frame_input(gr.Image(type="filepath", image_mode=None, visible=False))
    api_button = gr.Button(visible=False)
    timer = gr.Timer(1.0, active=False)
    return Components(
        state=state, video=video_in, truth=truth_in, every=every_in, keep=keep_in, webcam=cam_in,
        api_frame=api_frame, labels=labels_in, template=template_in, method=method_in, k=k_in, alpha=alpha_in,
        lam=lam_in, capacity=cap_in, bank=bank_in, run=run_btn, stop=stop_btn, apply=apply_btn, reset=reset_btn,
        drop_truth=drop_truth, demo_clip=clip_btn, api_button=api_button, webcam_timer=timer, status=status_out,
        verdict=verdict_out, frame=frame_out, clip_topk=clip_bars, tta_topk=tta_bars, stats=stats_out,
        confidence=conf_plot, agreement=agree_plot, switches=switch_plot, cache=cache_plot, accuracy=acc_plot,
        result=result_out)
