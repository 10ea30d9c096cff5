"""`mstta-demo`: zero-shot CLIP vs MS-TTA on a video, an image folder, a stream or a webcam.

    mstta-demo --video clip.mp4 --labels labels.txt --headless --out annotated.mp4 --log preds.jsonl

With --headless the pipeline runs without a browser and prints one summary line (JSON with
--json); the UI stack (Gradio) is then never imported, so headless runs start faster and work
where Gradio is not installed. Without --headless the browser UI opens (`app.ui`).
`--bundled-demo` plays the bundled clip with CLIP, or offline with the bundled digits model
(`app.bundled`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import sys
from typing import Sequence

from mstta.engine.config import DEFAULT_BANK_SIZE
from mstta.engine.methods import list_methods
from mstta.errors import EXIT_INTERRUPTED, OneLineParser, UserError, run_cli
from mstta.features.extract_views import VIEWS_ON
from mstta.features.models import DEFAULT_MODEL, DEFAULT_TAG

from .bundled import apply_bundled
from .encoder import MAX_VIEWS
from .forgetting import CHOICES as FORGET_CHOICES
from .prog import PROG


def integer(text: str) -> int:
    """argparse's `type=int` (same message), with a long value cut in its error line (e.g. 5,000 digits)."""
    try:
        return int(text)
    except ValueError:
        shown = text if len(text) <= 30 else f"{text[:20]}... ({len(text):,} characters)"
        raise argparse.ArgumentTypeError(f"invalid int value: {shown!r}") from None


def build_parser(ui: bool = True, add_help: bool = True) -> argparse.ArgumentParser:
    """The `mstta-demo` parser; `ui=False` leaves out the browser UI's flags (and its imports)."""
    p = OneLineParser(
        prog=PROG,
        add_help=add_help,
        description="Zero-shot CLIP vs MS-TTA, frame by frame, on a video, an image folder, a stream or a webcam.",
        epilog="Example: mstta-demo --video assets/demo.mp4 --labels assets/labels.txt --headless "
        "--out out/annotated.mp4 --log out/preds.jsonl --truth assets/truth.csv",
    )
    _add_source_arguments(p)
    _add_class_arguments(p)
    _add_model_arguments(p)
    _add_run_arguments(p)
    _add_output_arguments(p)
    if ui:
        _add_ui_arguments(p)
    return p


def _add_source_arguments(p: argparse.ArgumentParser) -> None:
    """The source flags (one of --video, --camera, --bundled-demo)."""
    src = p.add_argument_group("source (one of)")
    src.add_argument(
        "--video",
        metavar="PATH|DIR|URL",
        help="a video file OpenCV reads, a folder of images (name order), or a stream URL (rtsp://, http://)",
    )
    src.add_argument("--camera", type=integer, metavar="INDEX", help="webcam index, e.g. 0")
    src.add_argument(
        "--bundled-demo",
        action="store_true",
        help="the bundled clip: ViT-B-16/openai on assets/demo.mp4 when those weights are in the local "
        "cache, else (offline) the bundled digits model mstta-digits on assets/digits.mp4; "
        "--model/--pretrained and --video/--camera override its parts",
    )


def _add_class_arguments(p: argparse.ArgumentParser) -> None:
    """The class names and their prompt template."""
    cls = p.add_argument_group("classes")
    cls.add_argument(
        "--labels",
        metavar="FILE",
        help="class names, one per line (blank lines and # comments ignored; UTF-8); required with --headless, "
        "optional for the UI (editable there)",
    )
    cls.add_argument(
        "--template",
        metavar="TEXT",
        help="prompt template with one {}, e.g. 'a photo of a {}.' (default: the built-in prompt ensemble)",
    )


def _add_model_arguments(p: argparse.ArgumentParser) -> None:
    """The model and adaptation flags."""
    mod = p.add_argument_group("model")
    mod.add_argument("--model", help=f"open_clip architecture (default {DEFAULT_MODEL}; mstta-tiny for a test run)")
    mod.add_argument(
        "--pretrained",
        help=f"open_clip pretrained tag, a checkpoint path, or none for random weights (default {DEFAULT_TAG})",
    )
    mod.add_argument("--precision", choices=("fp32", "fp16", "bf16"), help="default fp16 on GPU, fp32 on CPU")
    mod.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:1, ...")
    mod.add_argument(
        "--views",
        type=integer,
        default=1,
        metavar="V",
        help=f"images per frame fed to CLIP: the frame plus V-1 random resized crops, 1..{MAX_VIEWS} (default 1)",
    )
    mod.add_argument(
        "--views-on",
        default="auto",
        choices=VIEWS_ON,
        help="where the V-1 extra views are made: cpu (PIL), device (tensors on the model's device: "
        "PIL's pixels on CUDA, the fast path on a CPU), auto (default: device on CUDA, else cpu)",
    )
    ada = p.add_argument_group("adaptation")
    ada.add_argument("--method", metavar="NAME", help=f"one of: {', '.join(list_methods())} (default ms-tta)")
    ada.add_argument(
        "--methods",
        metavar="A,B,...",
        help="race up to 4 methods on the same frames (one encoder pass per frame, one engine step "
        "per method), e.g. ms-tta,tda,zero-shot: the log holds every method's top-k, the "
        "summary a leaderboard; the first one is drawn on the frame (replaces --method); "
        "NAME@off|recommended|detect races a method with its own --forget, e.g. ms-tta,ms-tta@recommended",
    )
    ada.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a hyperparameter, e.g. --set k=4 --set alpha=0.7 (repeatable); logit_scale "
        "defaults to the checkpoint's own (100 for OpenAI's CLIP)",
    )
    ada.add_argument(
        "--forget",
        choices=tuple(FORGET_CHOICES),
        help="forget old scenes (every raced method that keeps state; an entry NAME@CHOICE of --methods keeps "
        "its own): off (never forgets, as the paper runs it), recommended (the engine's recommended rule: "
        "cache entries age, forget.rule=timeliness), detect (that rule plus a reset at each detected scene "
        "cut, reported in the log and the summary); default: off, or what --set forget.* gives",
    )
    ada.add_argument(
        "--bank-size",
        type=integer,
        default=DEFAULT_BANK_SIZE,
        metavar="N",
        help=f"bound of the mean-shift feature bank, so an endless stream keeps flat memory "
        f"(default {DEFAULT_BANK_SIZE})",
    )


def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    """Which frames are processed, how many, and how large they may be."""
    run = p.add_argument_group("run")
    run.add_argument(
        "--every",
        type=integer,
        metavar="N",
        help="files and folders: process every N-th frame (default: about 5 frames per second of video)",
    )
    run.add_argument("--max-frames", type=integer, metavar="N", help="stop after N processed frames")
    run.add_argument("--headless", action="store_true", help="run without the browser UI")
    run.add_argument(
        "--topk", type=integer, default=3, metavar="K", help="classes shown and logged per method (default 3)"
    )
    run.add_argument(
        "--max-pixels",
        default="4096x4096",
        metavar="WxH|N",
        help="refuse frames larger than this, before decoding them where the format allows (default 4096x4096)",
    )


def _add_output_arguments(p: argparse.ArgumentParser) -> None:
    """The annotated video, the log, the ground truth and what the run prints."""
    out = p.add_argument_group("outputs")
    out.add_argument(
        "--out", metavar="FILE.mp4", help="annotated H.264 video: both top-k, disagreement mark, fps, cache fill"
    )
    out.add_argument(
        "--log",
        metavar="FILE.jsonl",
        help="one JSON line per processed frame; - writes them to standard output (the summary then goes to stderr)",
    )
    out.add_argument(
        "--truth",
        metavar="FILE.csv",
        help="ground truth, lines start_frame,end_frame,label (inclusive source frame ranges): adds accuracy",
    )
    out.add_argument("--json", action="store_true", help="print the end-of-run summary as one JSON object")
    out.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress on stderr (default: a bar on a terminal, else a line every few seconds)",
    )
    out.add_argument("-v", "--verbose", action="store_true", help="log progress details to stderr")


def _add_ui_arguments(p: argparse.ArgumentParser) -> None:
    """The UI's flags; where the UI stack is not installed, a note in --help instead (`p.ui_missing`)."""
    from .ui import add_ui_arguments  # Gradio-free: the flags and their defaults only

    add_ui_arguments(p)
    try:  # the UI stack is an install extra the headless demo does not need; look for it without importing it
        found = importlib.util.find_spec("gradio") is not None
    except ImportError:
        found = False
    if not found:
        p.ui_missing = "gradio"
        p.epilog = (
            f"{p.epilog or ''} The browser UI and its flags are unavailable here: {p.ui_missing} is not "
            "installed (pip install -e .)."
        )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse the flags; a headless command line is parsed without the UI's flags or imports."""
    args, rest = build_parser(ui=False, add_help=False).parse_known_args(argv)
    if not (args.headless and not rest):  # the UI, --help, or a flag only the full parser knows
        parser = build_parser()
        args = parser.parse_args(argv)
        missing = getattr(parser, "ui_missing", None)
        if missing and not args.headless:
            raise UserError(
                f"the browser UI needs {missing}, which is not installed (pip install -e .); "
                "or run without a browser: --headless"
            )
    note = apply_bundled(args) if args.bundled_demo else None
    if note:
        print(f"{PROG}: {note}", file=sys.stderr, flush=True)
    args.method = "ms-tta" if args.method is None else args.method  # after the bundled demo chose its race
    args.model = DEFAULT_MODEL if args.model is None else args.model
    args.pretrained = DEFAULT_TAG if args.pretrained is None else args.pretrained
    return args


def _config(args: argparse.Namespace):
    from .pipeline import config_from_args

    return config_from_args(args)


def _main(argv: Sequence[str] | None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    if args.verbose:
        for name in ("app", "mstta"):
            logging.getLogger(name).setLevel(logging.INFO)
    if not args.headless:
        from .ui import run_ui

        return run_ui(args)
    if args.video is None and args.camera is None:
        raise UserError(f"no source: pass --video PATH|DIR|URL or --camera INDEX (see {PROG} --help)")
    if args.video is not None and args.camera is not None:
        raise UserError("pass either --video or --camera, not both")
    from .pipeline import run_pipeline
    from .summary import format_summary

    summary = run_pipeline(_config(args))  # run_cli turns SIGTERM into Ctrl-C: outputs are finalised
    stream = sys.stderr if args.log == "-" else sys.stdout
    print(json.dumps(summary) if args.json else f"{PROG}: {format_summary(summary)}", file=stream, flush=True)
    if summary.get("interrupted"):
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
