"""The demo pipeline: source -> sampler -> encoder -> engine -> sinks, one frame at a time.

    summary = run_pipeline(DemoConfig(video="clip.mp4", labels="labels.txt", out="annotated.mp4",
                                      log="preds.jsonl", model="mstta-tiny", pretrained="none"))
    for step in iter_steps(frames, session, truth=truth, model_slot=slot):   # the UI's video runs
        ...                                # step.frame, step.result, step.truth_label, step.fps

`iter_steps` is the one frame loop: the headless run and the browser UI both drive it.
Cheap checks come first (labels, template, truth, hyperparameters, output paths, the source
itself), then the model loads, then frames flow one way through the stages. Ctrl-C ends the run
early: the sinks finalise what was written and the summary says `"interrupted": true`.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterable, Iterator

from mstta.atomic import sweep_stale
from mstta.checks import int_in
from mstta.configfile import from_dict, parse_overrides
from mstta.engine.config import EngineConfig
from mstta.errors import UserError
from mstta.features.extract_views import VIEWS_ON
from mstta.features.models import DEFAULT_MODEL, DEFAULT_TAG
from mstta.safety import STDOUT, check_outputs

from .annotate import RANDOM_WEIGHTS_MARK, random_weights
from .encoder import check_views
from .forgetting import choice_of, run_marks, with_forget
from .frames import MAX_PIXELS, parse_max_pixels
from .labels import prompt_templates, read_labels
from .progress import Progress, plural
from .record import FrameRecord
from .sampling import Sampler, default_every
from .session import DEFAULT_BANK_SIZE, FrameResult, StreamSession, check_methods, method_title
from .sinks import VIDEO_SUFFIXES, JsonlSink, VideoSink, check_output
from .sources import Frame, Source, open_source
from .summary import FpsMeter, RunSummary
from .truth import Truth, read_truth

log = logging.getLogger(__name__)


@dataclass
class DemoConfig:
    """Everything one headless run needs (the `mstta-demo` flags, same names and defaults)."""

    video: str | None = None  # file, image folder or stream URL
    camera: int | None = None  # webcam index (instead of video)
    labels: str | None = None  # labels file: one class name per line
    template: str | None = None  # prompt template with one {}; None = default ensemble
    model: str = DEFAULT_MODEL  # mstta.features.models' defaults (named once)
    pretrained: str = DEFAULT_TAG
    precision: str | None = None  # fp32 / fp16 / bf16; None = fp16 on GPU, fp32 on CPU
    device: str = "auto"
    views: int = 1  # images per frame fed to CLIP (1 = the frame only)
    views_on: str = "auto"  # where the extra views are made: auto | cpu | device
    method: str = "ms-tta"
    methods: list[str] | None = None  # methods raced on the same frames (up to 4; None = [method])
    overrides: list[str] = field(default_factory=list)  # --set KEY=VALUE onto EngineConfig
    forget: str | None = None  # --forget off|recommended|detect (app.forgetting); None: as --set gives it
    bank_size: int = DEFAULT_BANK_SIZE  # bound of the mean-shift feature bank
    every: int | None = None  # files/folders: process every N-th frame; None = ~5 per second
    max_frames: int | None = None  # stop after this many processed frames
    out: str | None = None  # annotated video (.mp4)
    log: str | None = None  # JSONL predictions
    truth: str | None = None  # CSV start_frame,end_frame,label
    topk: int = 3
    retries: int = 3  # live sources: reconnect attempts when a stream stops
    backoff: float = 0.5  # live sources: first reconnect delay (s), doubled each time
    max_pixels: int = MAX_PIXELS  # frames larger than this (width x height) are refused
    progress: bool = False  # progress bar / lines on stderr (the CLI's default; --quiet: off)


# the flags read as they come into the DemoConfig field of the same name (None: the field's default)
SAME_NAME_FLAGS = (
    "video",
    "camera",
    "labels",
    "template",
    "model",
    "pretrained",
    "precision",
    "device",
    "views",
    "views_on",
    "bank_size",
    "every",
    "max_frames",
    "out",
    "log",
    "truth",
    "topk",
    "forget",
)


def config_from_args(args: Any, **changes: Any) -> DemoConfig:
    """The `mstta-demo` flags (an argparse Namespace) as a `DemoConfig`: the one mapping the headless
    run and the browser UI share. A flag absent from `args` (or None) takes DemoConfig's default;
    `changes` replace fields after (the UI's bank bound, for one)."""
    base = DemoConfig()

    def opt(name: str) -> Any:
        value = getattr(args, name, None)
        return getattr(base, name) if value is None else value

    methods = check_methods(args.methods) if getattr(args, "methods", None) is not None else [opt("method")]
    max_pixels = getattr(args, "max_pixels", None)
    cfg = DemoConfig(
        **{name: opt(name) for name in SAME_NAME_FLAGS},
        method=methods[0],
        methods=methods,
        overrides=list(getattr(args, "set", None) or []),
        max_pixels=base.max_pixels if max_pixels is None else parse_max_pixels(max_pixels),
        progress=not getattr(args, "quiet", True),
    )
    return dataclasses.replace(cfg, **changes)


def demo_engine_config(bank_size: int | None, overrides: list[str], forget: str | None = None) -> EngineConfig:
    """EngineConfig with the bounded bank, then `--set` overrides (unknown keys: one-line UserError),
    then `--forget`'s rule (`app.forgetting`; it and `--set forget.rule/detect` exclude each other).

    Its `logit_scale` is the paper's 100 until the model is known: `with_model_scale` sets the
    checkpoint's own."""
    if bank_size is not None:
        int_in(bank_size, "--bank-size", 1)
    try:
        base = EngineConfig(bank_size=bank_size)
    except UserError as exc:
        raise UserError(f"--bank-size {bank_size}: {exc}") from None
    given = parse_overrides(overrides)
    clash = sorted(k for k in given if k in ("forget.rule", "forget.detect"))
    if forget is not None and clash:
        raise UserError(f"--forget {forget} and --set {clash[0]}: pass one of them")
    return with_forget(from_dict(EngineConfig, sections(given), "--set", base), forget)


def sections(given: dict[str, Any]) -> dict[str, Any]:
    """`--set` keys with a dot into their section: {"forget.horizon": 80} -> {"forget": {"horizon": 80}}
    (an unknown section or key is refused by `from_dict`, naming it)."""
    out: dict[str, Any] = {}
    for key, value in given.items():
        section, dot, sub = key.partition(".")
        if dot and sub:
            part = out.setdefault(section, {})
            if not isinstance(part, dict):
                raise UserError(f"--set {section} and --set {key}: pass one of them")
            part[sub] = value
        else:
            out[key] = value
    return out


def with_model_scale(engine_cfg: EngineConfig, clip: Any, overrides: list[str]) -> EngineConfig:
    """The engine's CLIP logit scale (Eq. 1) is the checkpoint's own (`ClipModel.logit_scale`: 100 for
    OpenAI's CLIP, the learned one of a small model) unless `--set logit_scale=...` gives one."""
    if "logit_scale" in parse_overrides(overrides):
        return engine_cfg
    scale = float(clip.logit_scale)
    try:
        return dataclasses.replace(engine_cfg, logit_scale=scale)
    except UserError as exc:
        raise UserError(
            f"--model {clip.name} --pretrained {clip.pretrained}: the checkpoint's logit scale {scale:g} "
            f"is out of bounds ({exc}); pass --set logit_scale=100"
        ) from None


DEVICE_RE = re.compile(r"auto|cpu|cuda(:\d{1,3})?")


def check_device(device: str) -> None:
    """`--device`: auto, cpu, cuda or cuda:N (a `meta` or other torch device would run nothing real)."""
    if not isinstance(device, str) or not DEVICE_RE.fullmatch(device.strip()):
        shown = device if not isinstance(device, str) or len(device) <= 30 else device[:30] + "..."
        raise UserError(f"--device {shown!r}: use auto, cpu, cuda or cuda:N")


@dataclass
class Prepared:
    """What `prepare` checked and read: class names (None without --labels), engine config, truth."""

    labels: list[str] | None
    engine_cfg: EngineConfig
    truth: Truth | None


def prepare(cfg: DemoConfig) -> Prepared:
    """Every check that needs neither the model nor the source (nothing is opened or loaded); one-line
    UserErrors. Labels and a source may be absent here (the UI starts without them); `run_pipeline`
    requires both."""
    if cfg.video is not None and cfg.camera is not None:
        raise UserError("pass either --video or --camera, not both")
    if cfg.labels is None and cfg.truth is not None:
        raise UserError("--truth needs --labels (its class names are checked against the labels file)")
    labels = read_labels(cfg.labels) if cfg.labels is not None else None
    if cfg.template is not None:
        prompt_templates(cfg.template)
    check_methods([cfg.method])
    if cfg.methods is not None:
        check_methods(cfg.methods)
    flags = {"--every": cfg.every, "--max-frames": cfg.max_frames, "--topk": cfg.topk, "--max-pixels": cfg.max_pixels}
    for flag, value in flags.items():
        if value is not None:
            int_in(value, flag, 1)
    check_views(cfg.views)
    if cfg.views_on not in VIEWS_ON:
        raise UserError(f"--views-on {cfg.views_on}: choose one of {', '.join(VIEWS_ON)}")
    check_device(cfg.device)
    engine_cfg = demo_engine_config(cfg.bank_size, cfg.overrides, cfg.forget)
    truth = read_truth(cfg.truth, labels) if cfg.truth else None
    check_outputs(outputs={"--out": cfg.out, "--log": cfg.log}, inputs=input_files(cfg), stdout_ok=("--log",))
    if cfg.out:
        check_output(cfg.out, "--out", tuple(VIDEO_SUFFIXES))
    if cfg.log and cfg.log != STDOUT:
        check_output(cfg.log, "--log")
    for out in {Path(p).parent for p in (cfg.out, cfg.log) if p and p != STDOUT}:
        sweep_stale(out)  # a killed run's hidden .part files
    return Prepared(labels, engine_cfg, truth)


def input_files(cfg: DemoConfig) -> dict[str, str]:
    """The files a run reads, by flag: no output may resolve to one of them."""
    files = {"--labels": cfg.labels, "--truth": cfg.truth}
    if cfg.video is not None and "://" not in str(cfg.video):
        files["--video"] = cfg.video
    return {flag: str(p) for flag, p in files.items() if p is not None}


@dataclass
class Step:
    """One processed frame, as `iter_steps` yields it."""

    frame: Frame
    result: FrameResult
    truth_label: str | None  # the truth file's class for this frame (None: no truth or unlabelled)
    fps: float | None  # processing rate over the last frames (None before the second)
    processed: int  # frames processed so far, this one included


def iter_steps(
    frames: Iterable[Frame],
    session: StreamSession,
    *,
    truth: Truth | None = None,
    max_frames: int | None = None,
    model_slot: Callable[[], ContextManager[Any]] | None = None,
) -> Iterator[Step]:
    """The one frame loop under the headless run and the UI: encode + adapt each frame, yield a Step.

    `session.process` runs inside `with model_slot():` when given, so concurrent streams share the
    model's slots frame by frame (the slot is released before the Step is yielded). Stops after
    `max_frames` processed frames or when `frames` ends.
    """
    meter = FpsMeter()
    processed = 0
    if max_frames is not None and max_frames < 1:
        return
    for frame in frames:
        processed += 1
        yield step_once(frame, session, truth=truth, meter=meter, processed=processed, model_slot=model_slot)
        if max_frames is not None and processed >= max_frames:
            return


def step_once(
    frame: Frame,
    session: StreamSession,
    *,
    truth: Truth | None = None,
    meter: FpsMeter,
    processed: int,
    model_slot: Callable[[], ContextManager[Any]] | None = None,
) -> Step:
    """One frame through the engine (encode + adapt), as a Step: `iter_steps`' body, and the webcam's
    step (its frames come one request at a time; `meter` and `processed` are its run's)."""
    if model_slot is None:
        result = session.process(frame.image)
    else:
        with model_slot():
            result = session.process(frame.image)
    index = truth.label_at(frame.index) if truth is not None else None
    label = session.labels[index] if index is not None and index < len(session.labels) else None
    return Step(frame, result, label, meter.tick(), processed)


def expected_frames(source: Source, every: int, max_frames: int | None) -> int | None:
    """How many frames a run will process, when the source knows its length (files, folders)."""
    length = None if source.live else source.length
    total = -(-length // every) if length else None
    if max_frames is not None:
        total = min(total, max_frames) if total is not None else None
    return total


@dataclass
class _Run:
    """One headless run once checked and opened: its config, inputs, source, model and stream state."""

    cfg: DemoConfig
    prep: Prepared
    source: Source
    clip: Any
    session: StreamSession
    sampler: Sampler
    scale_from: str  # where the engine's logit_scale came from: "checkpoint" or "--set"
    mark: str | None  # drawn on every annotated frame (random weights)
    video: VideoSink | None = None  # the annotated video, once `_stream` opened it


def _open_run(cfg: DemoConfig, clip: Any, source: Source | None, stack: ExitStack) -> _Run:
    """Checks first, then the source, then the model (each closed by `stack`); one-line UserErrors."""
    if source is not None:
        stack.enter_context(source)  # a given source is closed here too, even on a bad config
        cfg = dataclasses.replace(cfg, video=source.spec, camera=None)
    if cfg.labels is None:
        raise UserError("--labels is required: a text file with one class name per line")
    if source is None and cfg.video is None and cfg.camera is None:
        raise UserError("give a source: --video PATH|DIR|URL or --camera INDEX")
    prep = prepare(cfg)
    if source is None:
        spec = cfg.video if cfg.video is not None else cfg.camera
        source = stack.enter_context(
            open_source(spec, retries=cfg.retries, backoff=cfg.backoff, max_pixels=cfg.max_pixels)
        )
    if clip is None:
        from mstta.features.models import load_clip

        clip = load_clip(cfg.model, cfg.pretrained, device=cfg.device, precision=cfg.precision)
    engine_cfg = with_model_scale(prep.engine_cfg, clip, cfg.overrides)
    session = StreamSession(
        clip,
        prep.labels,
        template=cfg.template,
        method=cfg.method,
        methods=cfg.methods,
        config=engine_cfg,
        views=cfg.views,
        views_on=cfg.views_on,
        topk=cfg.topk,
    )
    every = 1 if source.live else (cfg.every or default_every(source.fps))
    if source.live and cfg.every not in (None, 1):
        log.warning("--every applies to files and folders; a live source keeps only its newest frame")
    scale_from = "--set" if "logit_scale" in parse_overrides(cfg.overrides) else "checkpoint"
    log.info(
        "model %s (%s), logit scale %.4g (%s); source %s (%s, %.1f fps), processing every %d frame(s)",
        clip.name,
        clip.pretrained,
        engine_cfg.logit_scale,
        scale_from,
        source.spec,
        source.kind,
        source.fps,
        every,
    )
    mark = RANDOM_WEIGHTS_MARK if random_weights(clip) else None
    return _Run(cfg, prep, source, clip, session, Sampler(every), scale_from, mark)


def _stream(run: _Run, summary: RunSummary, on_frame: Callable[[Frame, FrameResult], None] | None) -> None:
    """The frame loop with its outputs (finalised however it ends: Ctrl-C, a source that died)."""
    cfg, video = run.cfg, None
    progress = Progress(expected_frames(run.source, run.sampler.every, cfg.max_frames), enabled=cfg.progress)
    with ExitStack() as sinks:
        sinks.callback(progress.close)
        if cfg.out:
            video = run.video = sinks.enter_context(VideoSink(cfg.out, fps=run.source.fps / run.sampler.every))
        jsonl = sinks.enter_context(JsonlSink(cfg.log)) if cfg.log else None
        record = FrameRecord(
            counts=lambda st: summary.update(st.frame, st.result, st.truth_label),
            log=jsonl,
            video=video,
            mark=run.mark,
            bank_limit=run.session.config.bank_size,
            draw_fps=True,
        )
        for step in iter_steps(run.sampler(run.source), run.session, truth=run.prep.truth, max_frames=cfg.max_frames):
            record.write(step)  # a frame is recorded in the summary and every output, or in none
            progress.update(step.processed, step.fps)
            if on_frame is not None:
                on_frame(step.frame, step.result)


def run_pipeline(
    cfg: DemoConfig,
    *,
    clip: Any = None,
    source: Source | None = None,
    on_frame: Callable[[Frame, FrameResult], None] | None = None,
) -> dict[str, Any]:
    """Run the demo headless and return the summary dict (see `summary.RunSummary.finish`).

    `clip` reuses a loaded ClipModel (else `cfg.model`/`cfg.pretrained` are loaded); `source`
    replaces `cfg.video`/`cfg.camera` with an open Source (closed at the end); `on_frame(frame,
    result)` is called after each processed frame. KeyboardInterrupt ends the run with finalised
    outputs and `"interrupted": true` in the summary.
    """
    summary, interrupted = RunSummary(), False
    with ExitStack() as stack:
        run = _open_run(cfg, clip, source, stack)
        try:
            _stream(run, summary, on_frame)
        except KeyboardInterrupt:
            interrupted = True
            log.warning(
                "interrupted after %d processed %s; outputs finalised",
                summary.processed,
                plural(summary.processed, "frame"),
            )
    cfg, engine, video = run.cfg, run.session.config, run.video
    out = str(video.path) if video is not None and video.frames else None
    return summary.finish(
        run.source.stats,
        skipped=run.sampler.skipped,
        interrupted=interrupted,
        source=str(run.source.spec),
        source_kind=run.source.kind,
        model=run.clip.name,
        pretrained=run.clip.pretrained,
        random_weights=run.mark is not None,
        logit_scale=round(float(engine.logit_scale), 4),
        logit_scale_from=run.scale_from,
        method=run.session.method.name,
        method_title=method_title(run.session.method.name),
        methods=run.session.method_names,
        forget=choice_of(engine),  # what the entries without their own @choice forget with
        forget_horizon=engine.forget.steps,
        forget_marks=run_marks(run.session.engines),  # which parts of the raced forgetting are the project's adaptation
        every=run.sampler.every,
        classes=len(run.prep.labels),
        out=out,
        log=str(cfg.log) if cfg.log else None,
    )
