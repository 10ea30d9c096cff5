"""Shared pieces of the UI tests: the app launched on loopback, the real `mstta-demo` UI process,
gradio_client helpers, a Chromium for Playwright, generated webcam footage, screenshots.

`python tests/helpers_ui.py --screenshot assets/ui.png` (`make screenshot`) makes the README's
screenshot with the same tooling: the UI on the bundled demo clip, in Chromium at 1280x720; add
`--model mstta-digits --video assets/digits.mp4 --labels assets/digits_labels.txt --truth
assets/digits_truth.csv` for another model and clip.

Nothing here touches the network beyond 127.0.0.1: the model is the random-weight `mstta-tiny`,
videos are generated, Gradio's and the client's analytics are off.
"""

from __future__ import annotations

import contextlib
import html
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
from helpers_video import LABELS, scene

REPO = Path(__file__).resolve().parent.parent
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
FAKE_CAMERA_FLAGS = ["--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream"]
LOOPBACK = re.compile(r"^(https?|wss?)://(127\.0\.0\.1|localhost)(:\d+)?/")
SHOTS_DIR = Path("/tmp/mstta_ui_shots")  # screenshots are copied here for people to look at
# method, k, alpha, lam, Q, bank size, raced methods, model ("": the server's own), views (the UI defaults)
SETTINGS = ["ms-tta", 2, 0.8, 1.0, 3, 4096, [], "", 1, "off"]  # method .. views, forget


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def launched(demo, *, concurrency: int = 2, max_upload_mb: float = 50) -> Iterator[str]:
    """Queue and launch a built app on 127.0.0.1 (a free port) as `mstta-demo` does; yields its URL."""
    from app.ui import launch_options

    demo.queue(max_size=16, default_concurrency_limit=concurrency)
    _, url, _ = demo.launch(**launch_options("127.0.0.1", free_port(), max_upload_mb=max_upload_mb))
    try:
        yield url
    finally:
        demo.close(verbose=False)


def client(url: str):
    """A gradio_client on the app: no analytics, output files left on the server (FileData)."""
    from gradio_client import Client

    return Client(url, verbose=False, analytics_enabled=False, download_files=False)


def named(outputs: Sequence[Any]) -> dict[str, Any]:
    """One handler output tuple (as gradio_client returns it: no State) by output name."""
    from app.ui import OUTPUTS

    names = [n for n in OUTPUTS if n not in ("state", "drop_truth")]  # no State, no button value
    assert len(outputs) == len(names), f"expected {len(names)} outputs, got {len(outputs)}"

    def value(v):  # an update (value and visibility) by its value
        return v.get("value") if isinstance(v, dict) and v.get("__type__") == "update" else v

    return {name: value(v) for name, v in zip(names, outputs)}


def series_points(chart_html: str) -> dict[str, int]:
    """A server-drawn line chart's series -> how many points it draws (its `data-points`)."""
    return {
        html.unescape(name): int(n)
        for name, n in re.findall(r'data-series="([^"]*)" data-points="(\d+)"', chart_html or "")
    }


def bar_values(chart_html: str) -> dict[str, float]:
    """A server-drawn bar chart's class -> value (its `data-value`)."""
    return {
        html.unescape(name): float(v)
        for name, v in re.findall(r'data-class="([^"]*)" data-value="([^"]*)"', chart_html or "")
    }


def video_args(
    video: str | Path | None,
    labels: Sequence[str] = LABELS,
    *,
    truth: str | Path | None = None,
    every: int = 1,
    keep: bool = False,
    realtime: bool = False,
    template: str = "",
    settings: Sequence[Any] = SETTINGS,
) -> list[Any]:
    """Positional inputs of /process_video (as fast as possible unless `realtime`)."""
    from gradio_client import handle_file

    return [
        handle_file(str(video)) if video else None,
        handle_file(str(truth)) if truth else None,
        every,
        keep,
        realtime,
        "\n".join(labels),
        template,
        *settings,
    ]


def settings_args(
    labels: Sequence[str] | str = LABELS,
    *,
    template: str = "",
    settings: Sequence[Any] = SETTINGS,
    truth: str | Path | None = None,
) -> list[Any]:
    """Positional inputs of /apply_settings (the labels box may be given as raw text)."""
    from gradio_client import handle_file

    text = labels if isinstance(labels, str) else "\n".join(labels)
    return [handle_file(str(truth)) if truth else None, text, template, *settings]


def frame_args(
    image: str | Path, labels: Sequence[str] = LABELS, *, keep: bool = False, settings: Sequence[Any] = SETTINGS
) -> list[Any]:
    """Positional inputs of /process_frame (an image file)."""
    from gradio_client import handle_file

    return [handle_file(str(image)), keep, "\n".join(labels), "", *settings]


def write_y4m(path: str | Path, n: int = 40, size: tuple[int, int] = (160, 120), fps: int = 10) -> Path:
    """Frames for Chromium's fake camera (`--use-file-for-fake-video-capture`): raw YUV 4:2:0."""
    import cv2

    path, (w, h) = Path(path), size
    with path.open("wb") as f:
        f.write(f"YUV4MPEG2 W{w} H{h} F{fps}:1 Ip A1:1 C420jpeg\n".encode())
        for i in range(n):
            f.write(b"FRAME\n")
            f.write(cv2.cvtColor(scene(i, w, h), cv2.COLOR_RGB2YUV_I420).tobytes())
    return path


def write_h264(path: str | Path, n: int = 30, size: tuple[int, int] = (160, 120), fps: float = 10.0) -> Path:
    """A browser-playable H.264 MP4 of scene frames, written by the demo's own VideoSink (PyAV)."""
    from app.sinks import VideoSink

    w, h = size
    with VideoSink(path, fps=fps) as sink:
        for i in range(n):
            sink.write(scene(i, w, h), i / fps)
    return Path(path)


def write_truth(path: str | Path, n: int, labels: Sequence[str] = LABELS, segment: int = 10) -> Path:
    """Ground truth matching `scene()`: the class changes every `segment` frames."""
    lines = ["start_frame,end_frame,label"]
    for start in range(0, n, segment):
        lines.append(f"{start},{min(n, start + segment) - 1},{labels[(start // segment) % len(labels)]}")
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return Path(path)


# ---------------------------------------------------------------------------- the real UI process
UI_SCRIPT = """
import logging, sys
from app.cli import build_parser, main
if "--host" in build_parser()._option_string_actions:   # the CLI runs the UI itself: use it as users do
    sys.exit(main(sys.argv[1:]))
from app.ui import add_ui_arguments, run_ui
from mstta.errors import run_cli
logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
logging.getLogger("app").setLevel(logging.INFO)
parser = add_ui_arguments(build_parser())
sys.exit(run_cli("mstta-demo", lambda argv: run_ui(parser.parse_args(argv)), sys.argv[1:]))
"""

# The loader stubbed to claim real weights (none exist here): the page must then show no random-weights banner.
STUB_WEIGHTS_SCRIPT = (
    """
import mstta.features.models as models
real = models.load_clip
def load_clip(name, pretrained, **kw):
    clip = real("mstta-tiny", "none", **kw)
    clip.pretrained = "openai"   # as if real weights had loaded
    return clip
models.load_clip = load_clip
"""
    + UI_SCRIPT
)

# `run_ui` reads only the flags it is given (the rest default): the UI with no labels and no video.
EMPTY_UI_SCRIPT = """
import argparse, sys
from app.ui import run_ui
sys.exit(run_ui(argparse.Namespace(model="mstta-tiny", pretrained="none", port=0)))
"""


class UIProcess:
    """`mstta-demo` without --headless, as the CLI wires it (`add_ui_arguments` + `run_ui`), in a child process."""

    URL_LINE = re.compile(r"UI running at (http://\S+)")

    def __init__(
        self, args: Sequence[str], timeout: float = 120.0, gradio_tmp: Path | None = None, script: str = UI_SCRIPT
    ):
        env = dict(os.environ, PYTHONUNBUFFERED="1", GRADIO_ANALYTICS_ENABLED="False")
        if gradio_tmp is not None:  # uploads and shown frames land there, not in /tmp/gradio
            env["GRADIO_TEMP_DIR"] = str(gradio_tmp)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script, *args],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self._threads = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, self.stdout), daemon=True),
            threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr), daemon=True),
        ]
        for t in self._threads:
            t.start()
        self.url = self._wait_for_url(timeout)

    @staticmethod
    def _pump(stream, sink: list[str]) -> None:
        for line in stream:
            sink.append(line.rstrip("\n"))

    def _wait_for_url(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.stdout):
                m = self.URL_LINE.search(line)
                if m:
                    return m.group(1)
            if self.proc.poll() is not None:
                time.sleep(0.2)  # let the pumps catch the last lines
                raise AssertionError(
                    f"the UI exited with {self.proc.returncode} before printing its URL:\n"
                    + "\n".join(self.stdout + self.stderr)
                )
            time.sleep(0.1)
        self.stop()
        raise AssertionError(f"the UI printed no URL within {timeout:.0f} s:\n{self.log()}")

    def log(self) -> str:
        return "\n".join(self.stdout + self.stderr)

    def stop(self) -> int:
        """SIGTERM, as `kill` would; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        for t in self._threads:
            t.join(timeout=5)
        return self.proc.returncode


# ---------------------------------------------------------------------------- the browser
def preloaded_ui(root: Path, frames: int) -> UIProcess:
    """`mstta-demo` as the browser tests start it: `mstta-tiny` at random weights on a generated H.264
    clip of `frames` frames with its labels and ground truth, every 2nd frame, on a free port."""
    from helpers_video import write_labels

    args = ["--labels", str(write_labels(root / "labels.txt")), "--every", "2"]
    args += ["--video", str(write_h264(root / "preloaded.mp4", n=frames))]
    args += ["--truth", str(write_truth(root / "truth.csv", n=frames))]
    args += ["--model", "mstta-tiny", "--pretrained", "none", "--port", "0", "-v"]
    return UIProcess(args, gradio_tmp=root / "gradio")


def find_chromium() -> str | None:
    """A Chromium already on this machine: $MSTTA_CHROMIUM, one on PATH, or Playwright's own download."""
    if os.environ.get("MSTTA_CHROMIUM"):
        return os.environ["MSTTA_CHROMIUM"]
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    try:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as pw:
            path = pw.chromium.executable_path
        return path if path and Path(path).exists() else None
    except Exception:  # no Playwright, or no browser of its own
        return None


NO_BROWSER = (
    "no Chromium found (PATH, $MSTTA_CHROMIUM or Playwright's own): install one to run the browser "
    "tests, e.g. `sudo apt-get install chromium` (Debian/Ubuntu), `brew install --cask chromium`, or "
    "`.venv/bin/python -m playwright install chromium`"
)


def require_chromium() -> str:
    """The Chromium to drive. Missing: the browser tests are skipped, with how to get one; under CI
    (CI=true) a missing browser is a failure, never a skip."""
    import pytest

    found = find_chromium()
    if found:
        return found
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI=true and {NO_BROWSER}; .ci/run installs Debian's chromium before `make test`")
    pytest.skip(NO_BROWSER)


@contextlib.contextmanager
def chromium(
    tmp_path: Path, *, camera: str | None = None, camera_file: Path | None = None, width: int = 1400, height: int = 1500
):
    """A headless Chromium with a fresh profile. `camera`: None (no camera), "granted" (Chromium's
    fake webcam, allowed; fed `camera_file` if given) or "denied" (a fake webcam the page may not use).

    Yields a browser context; every request to anything but 127.0.0.1 is aborted and recorded in
    `context.external_requests` (the page must need nothing from the network).
    """
    from playwright.sync_api import sync_playwright

    flags = list(CHROMIUM_FLAGS)
    if camera == "granted":
        flags += FAKE_CAMERA_FLAGS
        if camera_file is not None:
            flags.append(f"--use-file-for-fake-video-capture={camera_file}")
    elif camera == "denied":  # a device, but no permission and no auto-accept: getUserMedia is refused
        flags.append("--use-fake-device-for-media-stream")
    profile = tmp_path / f"chromium-profile-{time.monotonic_ns()}"
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=find_chromium() or require_chromium(),
            headless=True,
            args=flags,
            viewport={"width": width, "height": height},
            permissions=["camera"] if camera == "granted" else [],
        )
        guard_network(context)
        try:
            yield context
        finally:
            context.close()


def guard_network(context) -> None:
    """Abort every request of a browser context to anything but 127.0.0.1 (and data:/blob: URLs),
    recording it in `context.external_requests`."""
    external: list[str] = []

    def guard(route) -> None:
        url = route.request.url
        if LOOPBACK.match(url) or url.startswith(("data:", "blob:")):
            route.continue_()
        else:
            external.append(url)
            route.abort()

    context.route("**/*", guard)
    context.external_requests = external


@contextlib.contextmanager
def chromium_browser(width: int = 1400, height: int = 1500):
    """One headless Chromium for several separate users: it yields `new_context()`, which gives a
    fresh browser context (its own cookies and storage, so its own Gradio sessions), network-guarded
    as `chromium()`'s. Contexts still open at the end are closed with the browser."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=find_chromium() or require_chromium(), headless=True, args=list(CHROMIUM_FLAGS)
        )

        def new_context():
            context = browser.new_context(viewport={"width": width, "height": height})
            guard_network(context)
            return context

        try:
            yield new_context
        finally:
            browser.close()


def save_shot(page, tmp_path: Path, name: str, full_page: bool = True) -> Path:
    """Screenshot (full page by default) into tmp_path, copied to SHOTS_DIR."""
    path = tmp_path / name
    page.screenshot(path=str(path), full_page=full_page)
    SHOTS_DIR.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, SHOTS_DIR / name)
    return path


def wait_for_text(page, selector: str, pattern: str, timeout: float = 60.0) -> str:
    """Poll an element's text until it matches `pattern` (regex); returns the text."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        loc = page.locator(selector)
        if loc.count():
            text = loc.first.inner_text()
            if re.search(pattern, text):
                return text
        time.sleep(0.25)
    raise AssertionError(f"{selector} never matched {pattern!r} in {timeout:.0f} s; last text: {text!r}")


# ---------------------------------------------------------------------------- the page's controls
def open_page(context, url, preloaded: bool = True):
    """A new page on the UI, loaded (with `preloaded`: once the auto-started run of preloaded.mp4 is done);
    uncaught page errors are collected in `page.page_errors`."""
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(url, wait_until="load")
    page.wait_for_selector("#mstta-run", timeout=60_000)
    page.page_errors = errors
    if preloaded:
        wait_for_text(page, "#mstta-status", r"Done: preloaded\.mp4", timeout=90)
    return page


def assert_clean(page, context, expected_errors: tuple[str, ...] = ()):
    text = page.inner_text("body")
    assert "Traceback" not in text and 'File "' not in text, "a stack trace reached the page"
    assert not context.external_requests, f"the page asked the network for {context.external_requests}"
    unexpected = [e for e in page.page_errors if e not in expected_errors]
    assert not unexpected, unexpected


def wait_for_file(page, selector: str, name: str, timeout: float = 30.0) -> None:
    """Until a file box shows `name` (Gradio may set the name and its extension apart)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if name in re.sub(r"\s+", "", page.inner_text(selector)):
            return
        time.sleep(0.2)
    raise AssertionError(f"{selector} never showed {name}: {page.inner_text(selector)!r}")


def clear_file(page, selector: str) -> None:
    """Empty a file box as a user does (its clear button where it holds a file). Gradio mounts the box's
    upload input or its clear button some time after the page's load: wait for one of them first (a
    box read before it was mounted looked full, and the test waited for a clear button never shown)."""
    box = page.locator(selector)
    upload = box.locator("input[type=file]")
    clear = box.get_by_role("button", name=re.compile("clear", re.I))
    upload.or_(clear).first.wait_for(state="attached", timeout=30_000)
    if upload.count() == 0:
        clear.first.click()
    upload.wait_for(state="attached", timeout=10_000)


def upload_video(page, path) -> None:
    """Replace the video in the Video tab (clear the current one first, as a user does)."""
    clear_file(page, "#mstta-video")
    page.locator("#mstta-video input[type=file]").set_input_files(str(path))
    wait_for_file(page, "#mstta-video", path.name)


def tab(page, name: str) -> None:
    """Open a tab of the side panel (Video, Webcam, Settings)."""
    page.get_by_role("tab", name=name).click()


def fast(page, on: bool = True) -> None:
    """Untick (or tick) Real time: as fast as possible."""
    tab(page, "Video")
    box = page.locator("#mstta-realtime input[type=checkbox]")
    if box.is_checked() == on:
        box.click()


def set_every(page, n: int) -> None:
    tab(page, "Video")
    page.locator("#mstta-every input[type=number]").fill(str(n))


def frames_done(page) -> int:
    m = re.search(r"(\d+)\s+frames?\b", page.inner_text("#mstta-stats"))
    return int(m.group(1)) if m else 0


def download_links(page) -> dict[str, str]:
    """The files the Downloads box offers now: file name -> its URL (as the page's links give them)."""
    links = page.evaluate("""() => Array.from(document.querySelectorAll('#mstta-downloads a'))
        .map(a => a.href).filter(h => h.includes('/file='))""")
    return {href.rsplit("/", 1)[-1].split("?")[0]: href for href in links}


def wait_for_downloads(page, *names: str, timeout: float = 30.0) -> dict[str, str]:
    """Until the Downloads box offers exactly `names`; their URLs by name."""
    deadline = time.monotonic() + timeout
    found: dict[str, str] = {}
    while time.monotonic() < deadline:
        found = download_links(page)
        if set(found) == set(names):
            return found
        time.sleep(0.2)
    raise AssertionError(f"the Downloads box never offered {sorted(names)}: {sorted(found)}")


def page_series(page, selector: str) -> dict[str, int]:
    """The series a chart on the page draws right now -> points, read from the rendered SVG."""
    return page.evaluate(
        """(sel) => Object.fromEntries(Array.from(document.querySelectorAll(`${sel} .series`))
             .map(e => [e.getAttribute('data-series'), Number(e.getAttribute('data-points'))]))""",
        selector,
    )


def page_bars(page, selector: str) -> dict[str, float]:
    """The bars a chart on the page shows right now: class -> value, with their drawn width (%)."""
    return page.evaluate(
        """(sel) => Object.fromEntries(Array.from(document.querySelectorAll(`${sel} .bar`))
             .map(e => [e.getAttribute('data-class'), Number(e.getAttribute('data-value'))]))""",
        selector,
    )


def drawn_lines(page, selector: str) -> int:
    """How many series of a chart are drawn with at least two points (lines with real geometry)."""
    return page.evaluate(
        """(sel) => Array.from(document.querySelectorAll(`${sel} polyline.series`))
             .filter(p => (p.getAttribute('points') || '').trim().split(/\\s+/).length >= 2
                          && !(p.getAttribute('points') || '').includes('NaN')).length""",
        selector,
    )


def colour_pixels(png: bytes, rgb: tuple[int, int, int], tolerance: int = 40) -> int:
    """Pixels of a screenshot within `tolerance` of a colour (a drawn series shows up as many)."""
    import io

    from PIL import Image

    img = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(np.int16)
    return int((np.abs(img - np.array(rgb, dtype=np.int16)).max(axis=2) <= tolerance).sum())


def fake_frame(i: int = 0, size: tuple[int, int] = (96, 64)) -> np.ndarray:
    return scene(i, *size)


# ---------------------------------------------------------------------------- the README's screenshot
ASSETS = REPO / "assets"


def make_screenshot(
    out: Path,
    *,
    model: str = "mstta-tiny",
    pretrained: str = "none",
    video: Path = ASSETS / "demo.mp4",
    labels: Path = ASSETS / "labels.txt",
    truth: Path | None = ASSETS / "truth.csv",
    every: int | None = None,
    settle: float = 1.0,
    width: int = 1280,
    height: int = 720,
    methods: str | None = None,
) -> Path:
    """The UI at width x height on a video (by default the bundled demo clip on the random-weight
    `mstta-tiny`), screenshot after the run (real time: the clip takes its own length)."""
    import tempfile

    args = ["--labels", str(labels), "--video", str(video), "--model", model, "--port", "0"]
    args += ["--pretrained", pretrained] if pretrained else []
    args += ["--truth", str(truth)] if truth else []
    args += ["--every", str(every)] if every else []
    args += ["--methods", methods] if methods else []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        server = UIProcess(args, gradio_tmp=root / "gradio")
        try:
            with chromium(root, width=width, height=height) as context:
                page = context.new_page()
                page.goto(server.url, wait_until="load")
                wait_for_text(page, "#mstta-status", rf"Done: {re.escape(Path(video).name)}", timeout=600)
                time.sleep(settle)  # the last page's picture
                part = out.with_name(f".{out.name}.{os.getpid()}.png")
                page.screenshot(path=str(part))
                os.replace(part, out)
        finally:
            server.stop()
    return out


def upload(url: str, name: str, data: bytes) -> str:
    """POST a file to Gradio's upload route as a client would (the local test server); returns its server path."""
    import json
    import urllib.request
    import uuid

    boundary = uuid.uuid4().hex
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{name}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    req = urllib.request.Request(
        f"{url}gradio_api/upload",
        data=body,
        method="POST",
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())[0]


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="make the README's UI screenshot with the browser tests' tooling")
    parser.add_argument("--screenshot", type=Path, required=True, metavar="PNG")
    parser.add_argument("--model", default="mstta-tiny", help="model name, e.g. mstta-digits (default mstta-tiny)")
    parser.add_argument(
        "--pretrained", default=None, help="weights tag (default: none for mstta-tiny, the model's own otherwise)"
    )
    parser.add_argument("--video", type=Path, default=ASSETS / "demo.mp4")
    parser.add_argument("--labels", type=Path, default=ASSETS / "labels.txt")
    parser.add_argument(
        "--truth",
        type=Path,
        default=None,
        help="ground truth CSV (default: assets/truth.csv with the demo clip, none otherwise)",
    )
    parser.add_argument("--every", type=int, default=None, help="process every N-th frame (default: ~5 per second)")
    parser.add_argument("--methods", default=None, help="the race, as mstta-demo's --methods (default: ms-tta alone)")
    args = parser.parse_args()
    if find_chromium() is None:
        sys.exit(f"helpers_ui.py: error: {NO_BROWSER}")
    truth = args.truth if args.truth else (ASSETS / "truth.csv" if args.video == ASSETS / "demo.mp4" else None)
    pretrained = args.pretrained if args.pretrained is not None else ("none" if args.model == "mstta-tiny" else "")
    print(
        make_screenshot(
            args.screenshot,
            model=args.model,
            pretrained=pretrained,
            video=args.video,
            labels=args.labels,
            truth=truth,
            every=args.every,
            methods=args.methods,
        )
    )
