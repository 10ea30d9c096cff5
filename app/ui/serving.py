"""Serving the UI: its command-line flags, the checks before the model loads, launch options, and
the serve-until-Ctrl-C loop. `mstta-demo` (app/cli.py) calls `add_ui_arguments(parser)` and, without
--headless, `run_ui(args)`.
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import threading
import time
import warnings
from pathlib import Path
from typing import Any

from mstta.checks import int_in
from mstta.errors import UserError
from mstta.features.models import ASSETS_DIR  # the demo's own files (served)

from ..prog import PROG
from ..session import DEFAULT_BANK_SIZE
from .state import DEFAULT_CONCURRENCY, DEFAULT_MAX_SESSIONS, SESSION_BANK_LIMIT, SESSION_TTL_S

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7860
DEFAULT_QUEUE_SIZE = 16  # events waiting beyond those running; more get "queue full"
DEFAULT_MAX_UPLOAD_MB = 200
MAX_SESSIONS_LIMIT = 1000
TTL_RANGE_S = (10, 86400)


def add_ui_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the browser UI's flags (used without --headless) to the `mstta-demo` parser (once)."""

    if "--host" in parser._option_string_actions:  # already added: calling twice is harmless
        return parser
    g = parser.add_argument_group("browser UI (without --headless)")
    g.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to bind (default {DEFAULT_HOST}: this machine only; 0.0.0.0 opens it to the network)",
    )
    g.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        metavar="N",
        help=f"port to listen on (default {DEFAULT_PORT}; 0 picks a free one)",
    )
    g.add_argument("--share", action="store_true", help="also make a public gradio.live link (off by default)")
    g.add_argument(
        "--max-upload-mb",
        type=float,
        default=DEFAULT_MAX_UPLOAD_MB,
        metavar="MB",
        help=f"largest video or file a user may upload (default {DEFAULT_MAX_UPLOAD_MB} MB)",
    )
    g.add_argument(
        "--concurrency",
        type=int,
        default=DEFAULT_CONCURRENCY,
        metavar="N",
        help=f"model calls running at once, all users together (default {DEFAULT_CONCURRENCY}); "
        "a video run takes a slot frame by frame",
    )
    g.add_argument(
        "--queue-size",
        type=int,
        default=DEFAULT_QUEUE_SIZE,
        metavar="N",
        help=f"requests allowed to wait beyond those; more are refused (default {DEFAULT_QUEUE_SIZE})",
    )
    g.add_argument(
        "--max-sessions",
        type=int,
        default=DEFAULT_MAX_SESSIONS,
        metavar="N",
        help=f"browser sessions holding an engine at once; beyond, the oldest idle one is dropped and "
        f"its user asked to press Reset (default {DEFAULT_MAX_SESSIONS})",
    )
    g.add_argument(
        "--session-ttl",
        type=float,
        default=SESSION_TTL_S,
        metavar="S",
        help=f"free a session this many seconds after its last action (default {SESSION_TTL_S}); "
        "a closed page frees its session at once",
    )
    return parser


def resolve_port(host: str, port: int) -> int:
    """`port` if it is free on `host`, a free one when 0; a busy or bad port is a one-line UserError."""
    int_in(port, "--port", 0, 65535, " (0 = any free port)")
    bind_host = host.strip("[]") or DEFAULT_HOST
    family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((bind_host, port))
        except OSError as exc:
            if port and exc.errno in (98, 48, 10048):  # EADDRINUSE on Linux, macOS, Windows
                raise UserError(
                    f"--port {port}: already in use on {host}; stop the program using it, "
                    "or pass another --port (0 picks a free one)"
                ) from None
            raise UserError(f"--host {host} --port {port}: cannot listen there ({exc.strerror or exc})") from None
        return s.getsockname()[1]


def _opt(args: argparse.Namespace, name: str, default: Any = None) -> Any:
    return getattr(args, name, default)


def _check_range(value: Any, flag: str, low: float, high: float, number: type = int) -> None:
    kinds = (int, float) if number is float else (int,)
    if isinstance(value, bool) or not isinstance(value, kinds) or not low <= value <= high:
        raise UserError(
            f"{flag} {value!r}: expected a {'number' if number is float else 'whole number'} from {low:g} to {high:g}"
        )


def ui_config(args: argparse.Namespace):
    """The flags as the headless pipeline's `DemoConfig`, checked by its `prepare` (labels, template,
    method, hyperparameters, truth, views, sizes), plus the UI's own flags; before the model loads."""
    from .. import pipeline

    for flag, name in (("--camera", "camera"), ("--out", "out"), ("--log", "log")):
        if _opt(args, name) is not None:
            raise UserError(
                f"{flag} is for --headless runs; the browser UI takes videos and the browser's "
                f"webcam (drop {flag}, or add --headless)"
            )
    _check_range(_opt(args, "max_upload_mb", DEFAULT_MAX_UPLOAD_MB), "--max-upload-mb", 0.001, 1e6, float)
    _check_range(_opt(args, "concurrency", DEFAULT_CONCURRENCY), "--concurrency", 1, 64)
    _check_range(_opt(args, "queue_size", DEFAULT_QUEUE_SIZE), "--queue-size", 1, 10_000)
    _check_range(_opt(args, "max_sessions", DEFAULT_MAX_SESSIONS), "--max-sessions", 1, MAX_SESSIONS_LIMIT)
    _check_range(_opt(args, "session_ttl", SESSION_TTL_S), "--session-ttl", *TTL_RANGE_S, number=float)
    bank = _opt(args, "bank_size") if _opt(args, "bank_size") is not None else DEFAULT_BANK_SIZE
    if isinstance(bank, int) and not isinstance(bank, bool) and bank > SESSION_BANK_LIMIT:
        if bank != DEFAULT_BANK_SIZE:  # the engine's default is larger than the UI's bound: lowered quietly
            raise UserError(
                f"--bank-size {bank}: the browser UI keeps at most {SESSION_BANK_LIMIT:,} features per "
                "session (each session has its own bank); lower it"
            )
        bank = SESSION_BANK_LIMIT
    video = _opt(args, "video")
    cfg = pipeline.config_from_args(args, camera=None, out=None, log=None, bank_size=bank, progress=False)
    prep = pipeline.prepare(cfg)  # labels and the source may be absent: the UI starts empty
    if video is not None:
        from .video import open_video

        open_video(video, cfg.max_pixels).close()  # readable now, or a one-line error before the model loads
    return cfg, prep


def run_ui(args: argparse.Namespace) -> int:
    """`mstta-demo` without --headless: check the flags, load the model once, serve the UI until Ctrl-C."""
    from .events import build_app

    cfg, prep = ui_config(args)
    host, port = _opt(args, "host", DEFAULT_HOST), _opt(args, "port", DEFAULT_PORT)
    port = resolve_port(host, port)

    from mstta.configfile import parse_overrides
    from mstta.features.models import load_clip

    from ..pipeline import with_model_scale

    clip = load_clip(cfg.model, cfg.pretrained, device=cfg.device, precision=cfg.precision)
    concurrency = _opt(args, "concurrency", DEFAULT_CONCURRENCY)
    video = str(Path(cfg.video).resolve()) if cfg.video else None
    demo = build_app(
        clip,
        labels=prep.labels,
        video=video,
        truth=str(Path(cfg.truth).resolve()) if cfg.truth else None,
        template=cfg.template,
        method=cfg.method,
        race=(cfg.methods or [cfg.method])[1:],
        config=with_model_scale(prep.engine_cfg, clip, cfg.overrides),
        own_scale="logit_scale" not in parse_overrides(cfg.overrides),
        every=cfg.every,
        topk=cfg.topk,
        views=cfg.views,
        views_on=cfg.views_on,
        max_frames=cfg.max_frames,
        concurrency=concurrency,
        max_sessions=_opt(args, "max_sessions", DEFAULT_MAX_SESSIONS),
        session_ttl=_opt(args, "session_ttl", SESSION_TTL_S),
        max_pixels=cfg.max_pixels,
    )
    demo.queue(max_size=_opt(args, "queue_size", DEFAULT_QUEUE_SIZE), default_concurrency_limit=concurrency)
    _, local_url, share_url = demo.launch(
        **launch_options(
            host,
            port,
            share=bool(_opt(args, "share", False)),
            max_upload_mb=_opt(args, "max_upload_mb", DEFAULT_MAX_UPLOAD_MB),
            max_sessions=_opt(args, "max_sessions", DEFAULT_MAX_SESSIONS),
        )
    )
    print(f"{PROG}: UI running at {local_url} (Ctrl-C to stop)", flush=True)
    if share_url:
        print(f"{PROG}: public link {share_url}", flush=True)
    return serve(demo)


def launch_options(
    host: str = DEFAULT_HOST,
    port: int | None = None,
    *,
    share: bool = False,
    max_upload_mb: float = DEFAULT_MAX_UPLOAD_MB,
    max_sessions: int = 16,
) -> dict[str, Any]:
    """`demo.launch(**launch_options(...))`: loopback by default, bounded uploads and stored sessions,
    only the demo's files served, nothing fetched from the network."""
    import gradio as gr
    from starlette.middleware import Middleware

    from .guard import QuietErrors
    from .layout import CSS

    _quiet_pil()
    return dict(
        server_name=host,
        server_port=port,
        share=share,
        max_file_size=int(max_upload_mb * 1024 * 1024),
        allowed_paths=[str(ASSETS_DIR)],
        prevent_thread_lock=True,
        quiet=True,
        show_error=False,
        inbrowser=False,
        enable_monitoring=False,
        run_history=False,
        mcp_server=False,
        ssr_mode=False,
        footer_links=["api", "gradio"],
        css=CSS,
        state_session_capacity=4 * max_sessions,
        app_kwargs={"middleware": [Middleware(QuietErrors)]},
        theme=gr.themes.Default(
            font=["system-ui", "Liberation Sans", "DejaVu Sans", "sans-serif"],
            font_mono=["ui-monospace", "DejaVu Sans Mono", "monospace"],
        ),
    )


def _quiet_pil() -> None:
    """Pixel limits are ours (`frames.decode_image` refuses from the header, with one line): PIL's
    own size warning would add a second, multi-line message to the server log."""
    from PIL import Image

    warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)


def serve(demo) -> int:
    """Block until Ctrl-C or SIGTERM, then close the server; 0 (stopping a server is its normal end)."""
    main_thread = threading.current_thread() is threading.main_thread()

    def on_sigterm(signum, frame):  # signal handler signature
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
