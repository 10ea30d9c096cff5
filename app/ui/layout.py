"""The page: every component, placed, returned as one `Components` object (no behaviour here).

One screen at 1280x720: a side panel of tabs on the left (Video, Webcam, Settings) with the run's
downloads under it; in the middle the agreement banner, the annotated frame and its numbers; on the
right both top-k charts and the running agreement and accuracy. The other plots over time follow
below the fold.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import gradio as gr

from mstta.engine.config import EngineConfig

from . import plots
from .components import Number, frame_input, quiet
from .page import empty_page
from .settings_tab import settings_tab
from .state import FORM, UISession
from .video import VIDEO_TYPES

CSS = """
.gradio-container {max-width: 100% !important}
.gradio-container > main, .gradio-container .main {padding-top: 0 !important; padding-bottom: 0 !important}
.gradio-container .contain {gap: 8px !important}
#mstta-header {align-items: center; gap: 8px; flex-wrap: nowrap; overflow: visible !important; z-index: 50;
  position: relative}
#mstta-title p {margin: 0; font-size: .85rem; white-space: nowrap; overflow: hidden; text-overflow: ellipsis}
#mstta-title strong:first-child {font-size: 1.05rem}
#mstta-random-weights {padding: 2px 10px; border-radius: 8px; background: #fef3c7; color: #92400e;
  font-weight: 600; border: 1px solid #f59e0b; font-size: .8rem; white-space: nowrap; overflow: hidden;
  text-overflow: ellipsis}
#mstta-random-weights span {font-weight: 400}
#mstta-right {gap: 6px}
#mstta-verdict-box {padding: 5px 12px; border-radius: 8px; font-size: 1rem; font-weight: 600; color: white;
  background: #6b7280; white-space: nowrap; overflow: hidden; text-overflow: ellipsis}
#mstta-verdict-box.agree {background: #16a34a}
#mstta-verdict-box.disagree {background: #dc2626}
#mstta-verdict-box .name {font-weight: 800; text-decoration: none; color: inherit}
#mstta-status {min-height: 0; padding: 3px 10px !important; font-size: .85rem; line-height: 1.25}
#mstta-status p {margin: 0}
#mstta-stats p {margin: 0; font-size: .85rem}
#mstta-frame {padding: 0 !important; border: none !important; background: none !important}
#mstta-middle {gap: 6px}
.mstta-hidden {display: none !important}
.mstta-chart {margin: 0}
.mstta-chart figcaption {font-size: .8rem; display: flex; gap: 2px 12px; flex-wrap: wrap; align-items: center;
  margin-bottom: 1px}
.mstta-chart .key i {display: inline-block; width: 18px; height: 4px; border-radius: 2px; margin-right: 4px;
  vertical-align: middle}
.mstta-chart svg {width: 100%; height: auto; display: block}
.mstta-chart .axis-title {font-weight: 600}
.mstta-bars .row {display: flex; align-items: center; gap: 6px; font-size: .8rem; line-height: 1.1rem}
.mstta-bars .name {flex: 0 0 32%; text-align: right; overflow: hidden; text-overflow: ellipsis; white-space: nowrap}
.mstta-bars .track {flex: 1 1 auto; position: relative; height: .8rem; background: #f3f4f6; border-radius: 2px}
.mstta-bars .bar {position: absolute; left: 0; top: 0; bottom: 0; border-radius: 2px}
.mstta-bars .val {flex: 0 0 2.6rem; font-variant-numeric: tabular-nums}
.mstta-bars .axis .track {background: none; height: .9rem; border-top: 1px solid #9ca3af; border-radius: 0}
.mstta-bars .tick {position: absolute; top: 0; transform: translateX(-50%); font-size: .7rem; color: #6b7280}
.mstta-bars .axis-title {text-align: center; font-size: .7rem; color: #6b7280; padding-left: 32%}
.mstta-board {overflow: hidden}
.mstta-board table {width: 100% !important; table-layout: fixed; border-collapse: collapse; font-size: .74rem;
  font-variant-numeric: tabular-nums; border: none !important; margin: 0 !important}
.mstta-board th {white-space: normal !important; line-height: .9rem !important; vertical-align: bottom}
.mstta-board th:nth-child(1) {width: 22px} .mstta-board th:nth-child(3) {width: 68px}
.mstta-board th:nth-child(4) {width: 56px} .mstta-board th:nth-child(5) {width: 50px}
.mstta-board th:nth-child(6) {width: 50px}
.mstta-board th, .mstta-board td {border: none !important; background: none !important; line-height: 1.15rem}
.mstta-board th {font-weight: 600; color: #6b7280; text-align: right; padding: 0 4px !important; font-size: .72rem;
  white-space: nowrap}
.mstta-board td {text-align: right; padding: 0 4px !important; border-top: 1px solid #f3f4f6 !important;
  white-space: nowrap}
.mstta-board td, .mstta-board th {overflow: hidden; text-overflow: ellipsis}
.mstta-board td.name, .mstta-board th:nth-child(2) {text-align: left}
.mstta-board td.rank {color: #6b7280; width: 1em}
.mstta-board td.name i {display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 4px}
.mstta-board .mark {font-size: .7rem; color: #92400e; background: #fef3c7; border-radius: 4px; padding: 0 3px}
.mstta-strip .strip {display: flex; gap: 8px; overflow-x: auto; padding: 4px 0}
.mstta-strip .item {flex: 0 0 auto; display: flex; flex-direction: column; font-size: .75rem; width: 120px;
  border: 2px solid #e5e7eb; border-radius: 6px; padding: 3px}
.mstta-strip .item.fixed {border-color: #16a34a} .mstta-strip .item.broke {border-color: #dc2626}
.mstta-strip img {width: 100%; cursor: zoom-in; border-radius: 3px}
.mstta-strip img:focus {position: fixed; z-index: 1000; left: 50%; top: 50%; width: min(80vw, 640px);
  transform: translate(-50%, -50%); cursor: zoom-out; box-shadow: 0 0 0 100vmax rgba(0,0,0,.6); outline: none}
.mstta-strip .clip b {color: #3b82f6} .mstta-strip .tta b {color: #b45309}
#mstta-explain {flex: 0 0 auto; width: auto !important; min-width: 0 !important; padding: 2px 8px !important;
  position: relative; overflow: visible !important; z-index: 50}
#mstta-explain > div:last-child {position: absolute; right: 0; top: 100%; width: min(720px, 90vw); z-index: 60;
  background: var(--background-fill-primary, white); border: 1px solid #d1d5db; border-radius: 8px; padding: 4px 12px;
  box-shadow: 0 8px 24px rgba(0,0,0,.18)}
.mstta-file .upload-container {padding-top: 24px !important}
.mstta-file [data-testid=upload-text] .or {display: none}
.toast-wrap {top: 8px !important; left: 50% !important; right: auto !important; transform: translateX(-50%)}
"""


EXPLAIN = """\
**Zero-shot CLIP** names each frame by comparing its image embedding with the text embeddings of your
labels ("a photo of a {label}"): no training on your classes, and nothing learned from the stream.
**Test-time adaptation** learns from the stream itself, without labels or gradients: the engine keeps
a **bank** of the frames' embeddings seen so far, a **cache** of the most confident ones per class,
and (MS-TTA) a **mean shift** that moves each new embedding toward its nearest neighbours in the bank,
so a blurry or odd frame borrows from the clear ones around it. When the camera or scene shifts for a
while, the cache fills with that scene's frames and the adapted prediction can beat zero-shot CLIP.

- **Banner**: whether CLIP and the (first) adapted method agree on this frame.
- **Top-k bars**: each one's probabilities for the current frame.
- **Leaderboard**: every raced method: accuracy on frames the ground truth labels, how often it agrees
  with CLIP, **fixed · broke** (frames CLIP got wrong and it got right, and the reverse), and its cost
  (ms per frame: the shared encoder pass plus its own step).
- **Gain**: each raced method's running accuracy minus CLIP's, in points: above zero it is ahead; a dashed
  mark is a scene cut a method's forgetting detected (Settings: Forget old scenes).
- **Running accuracy**: CLIP's and every raced method's, over the processed frames.
- **Disagreement strip** (below): the newest frames where the two differ, with the truth; click one to enlarge.
"""


@dataclasses.dataclass
class Components:
    """Every component the handlers read or write (names as in `page.OUTPUTS`, plus inputs)."""

    state: Any
    # inputs
    video: Any
    truth: Any
    every: Any
    realtime: Any
    keep: Any
    webcam: Any
    api_frame: Any
    labels: Any
    template: Any
    method: Any
    race: Any
    forget: Any
    k: Any
    alpha: Any
    lam: Any
    capacity: Any
    bank: Any
    model: Any
    views: Any
    # buttons and timers
    run: Any
    stop: Any
    apply: Any
    reset: Any
    drop_truth: Any
    demo_clip: Any | None
    title: Any
    banner: Any
    api_button: Any
    webcam_stop: Any
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
    leaderboard: Any
    gain: Any
    per_class: Any
    disagreements: Any
    result: Any
    downloads: Any

    def form(self, **extra: Any) -> dict[str, Any]:
        """The settings form by name (`state.FORM`) after the `extra` named inputs, then the session:
        the handlers' keyword inputs (and the API's parameters, in this order)."""
        return extra | {name: getattr(self, name) for name in FORM} | {"state": self.state}


def _header(title_md: str, random_weights: bool) -> dict:
    """The title, the random-weights banner (empty for trained weights; both follow the session's
    model), and "What you're seeing" (it opens over the page, so the first screen keeps its height)."""
    with gr.Row(elem_id="mstta-header"):
        title = gr.Markdown(title_md, elem_id="mstta-title")
        banner = gr.HTML(
            plots.RANDOM_WEIGHTS_HTML if random_weights else "",
            elem_id="mstta-random-weights-banner",
            padding=False,
            container=False,
        )
        with gr.Accordion("What you're seeing", open=False, elem_id="mstta-explain"):
            gr.Markdown(EXPLAIN, elem_id="mstta-explain-text")
    return dict(title=title, banner=banner)


def _video_tab(video: str | None, truth: str | None, every: int | None, realtime: bool, demo_clip: bool) -> dict:
    with gr.Tab("Video", id="video-tab", elem_id="mstta-video-tab"):
        with gr.Row():
            c = dict(
                run=gr.Button(
                    "▶ Process video", variant="primary", elem_id="mstta-run", scale=2, min_width=150, size="md"
                ),
                stop=gr.Button("■ Stop", variant="stop", elem_id="mstta-stop", scale=1, min_width=70, size="md"),
            )
        c["demo_clip"] = (
            gr.Button("Use the demo clip (with labels and ground truth)", size="sm", elem_id="mstta-demo-clip")
            if demo_clip
            else None
        )
        c |= dict(
            video=gr.File(
                value=video,
                label="Video file (mp4, avi, mov, mkv, webm, ...)",
                file_types=list(VIDEO_TYPES),
                height=128,
                elem_id="mstta-video",
                elem_classes=["mstta-file"],
            ),
            truth=quiet(
                gr.File(
                    value=truth,
                    label="Ground truth CSV (adds accuracy)",
                    file_types=[".csv", ".txt"],
                    height=128,
                    elem_id="mstta-truth",
                    elem_classes=["mstta-file"],
                )
            ),
            drop_truth=gr.Button("Drop the ground-truth file", size="sm", visible=False, elem_id="mstta-drop-truth"),
            realtime=quiet(
                gr.Checkbox(
                    realtime,
                    label="Real time (off: as fast as possible)",
                    info="Plays at the video's own rate; frames the model cannot keep up with are skipped and counted",
                    elem_id="mstta-realtime",
                )
            ),
            every=Number(
                value=every or 0,
                precision=0,
                label="Process every N-th frame",
                info="0 = about 5 frames per second of video",
                elem_id="mstta-every",
            ),
        )
    return c


def _webcam_tab() -> dict:
    with gr.Tab("Webcam", id="webcam-tab", elem_id="mstta-webcam-tab"):
        webcam = frame_input(
            gr.Image(
                sources=["webcam"],
                streaming=True,
                type="filepath",
                image_mode=None,
                label="Webcam",
                height=240,
                elem_id="mstta-webcam",
                webcam_options=gr.WebcamOptions(mirror=False),
            )
        )
        gr.HTML(
            '<div id="mstta-camera-message" role="alert" style="display:none;padding:10px 12px;'
            'border-radius:8px;background:#fee2e2;color:#991b1b;font-weight:600"></div>',
            elem_id="mstta-camera-error",
        )
        gr.Markdown(
            "Click the camera, allow access, then press **Record**: frames stream to the model while it "
            "records; **Stop** ends the run with its summary and downloads. If the browser blocked the "
            "camera, allow it from the address bar and reload the page."
        )
        stop = gr.Button("webcam stopped", elem_id="mstta-webcam-stop", elem_classes=["mstta-hidden"])
    return dict(webcam=webcam, webcam_stop=stop)


def _results(first: dict[str, Any]) -> dict:
    """The middle (banner, frame, numbers) and right (top-k, agreement, accuracy) columns."""
    with gr.Column(scale=5, min_width=480, elem_id="mstta-middle"):
        c = dict(
            verdict=gr.HTML(first["verdict"], elem_id="mstta-verdict"),
            frame=gr.Image(
                label="Current frame, both predictions drawn",
                show_label=False,
                type="numpy",
                format="jpeg",
                interactive=False,
                height=500,
                elem_id="mstta-frame",
            ),
            stats=gr.Markdown("", elem_id="mstta-stats"),
        )
    with gr.Column(scale=4, min_width=340, elem_id="mstta-right"):
        for name in ("leaderboard", "gain", "accuracy", "clip_topk", "tta_topk"):
            c[name] = gr.HTML(first[name], elem_id=f"mstta-{name.replace('_', '-')}", padding=False)
    return c


def _below(first: dict[str, Any]) -> dict:
    """Below the fold: the other plots over time, the raw result, the API's hidden frame input."""
    c = {"disagreements": gr.HTML(first["disagreements"], elem_id="mstta-disagreements", padding=False)}
    gr.Markdown("### More over time", elem_id="mstta-over-time")
    with gr.Row():
        for name in ("agreement", "per_class"):
            c[name] = gr.HTML(first[name], elem_id=f"mstta-{name.replace('_', '-')}", padding=False)
    with gr.Row():
        c |= {name: gr.HTML(first[name], elem_id=f"mstta-{name}", padding=False) for name in ("confidence", "switches")}
    c["cache"] = gr.HTML(first["cache"], elem_id="mstta-cache", padding=False)
    with gr.Accordion("Raw result of the last frame (JSON)", open=False):
        c["result"] = gr.JSON(elem_id="mstta-result")
    # the per-frame handler for API clients (gradio_client cannot join a browser stream)
    c["api_frame"] = frame_input(gr.Image(type="filepath", image_mode=None, visible=False))
    c["api_button"] = gr.Button(visible=False)
    c["webcam_timer"] = gr.Timer(1.0, active=False)
    return c


def build_layout(
    *,
    title_md: str,
    random_weights: bool,
    model: tuple[str, str],
    views: int,
    labels: Sequence[str] | None,
    video: str | None,
    truth: str | None,
    template: str | None,
    method: str,
    race: Sequence[str],
    base: EngineConfig,
    every: int | None,
    realtime: bool,
    hello: str,
    demo_clip: bool,
    session_ttl: float,
    on_state_deleted,
) -> Components:
    """Create and place every component (inside an open `gr.Blocks`)."""
    c: dict[str, Any] = {"state": gr.State(UISession, time_to_live=session_ttl, delete_callback=on_state_deleted)}
    first = empty_page(status=hello)
    c |= _header(title_md, random_weights)
    c["status"] = gr.Markdown(hello, elem_id="mstta-status", container=True)
    with gr.Row(equal_height=False):
        with gr.Column(scale=0, min_width=290, elem_id="mstta-side"):
            with gr.Tabs(overflow_behavior="wrap"):  # all three tabs always shown (never behind a "..." menu)
                c |= _video_tab(video, truth, every, realtime, demo_clip)
                c |= _webcam_tab()
                c |= settings_tab(labels, template, method, race, base, model, views)
            # under the tabs: a run's files never push the Video tab's controls down
            c["downloads"] = gr.File(
                label="Downloads: the last run's annotated video and log",
                file_count="multiple",
                interactive=False,
                height=110,
                visible=False,
                elem_id="mstta-downloads",
            )
        c |= _results(first)
    c |= _below(first)
    return Components(**c)
