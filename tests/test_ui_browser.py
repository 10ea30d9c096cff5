"""The browser UI in a real browser: Debian's Chromium, headless, driven by Playwright.

The server is `mstta-demo` without --headless as the CLI starts it (a child process on 127.0.0.1
with the random-weight `mstta-tiny`, a generated H.264 clip, its labels and ground truth). Every
test saves full-page screenshots under its tmp_path and copies them to /tmp/mstta_ui_shots/.
Requests to anything but 127.0.0.1 are blocked and must not happen.
"""
from __future__ import annotations

import re
import time

import pytest

from helpers_ui import (LABELS, UIProcess, chromium, marks, require_chromium, save_shot, wait_for_text, write_h264,
                        write_truth, write_y4m)
from helpers_video import write_labels, write_video

pytestmark = pytest.mark.slow

PRELOADED_FRAMES = 30      # the preloaded clip; --every 2 -> 15 processed frames


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    require_chromium()
    root = tmp_path_factory.mktemp("ui-browser")
    labels = write_labels(root / "labels.txt")
    video = write_h264(root / "preloaded.mp4", n=PRELOADED_FRAMES)
    truth = write_truth(root / "truth.csv", n=PRELOADED_FRAMES)
    server = UIProcess(["--labels", str(labels), "--video", str(video), "--truth", str(truth), "--every", "2",
                        "--model", "mstta-tiny", "--pretrained", "none", "--port", "0", "-v"],
                       gradio_tmp=root / "gradio")
    yield server
    assert server.stop() == 0, server.log()
    assert "Traceback" not in server.log(), server.log()


def open_page(context, url):
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(url, wait_until="load")
    page.wait_for_selector("#mstta-run", timeout=60_000)
    page.page_errors = errors
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


def upload_video(page, path) -> None:
    """Replace the video in the Video tab (clear the current one first, as a user does)."""
    box = page.locator("#mstta-video")
    if box.locator("input[type=file]").count() == 0:
        box.get_by_role("button", name=re.compile("clear", re.I)).first.click()
    box.locator("input[type=file]").set_input_files(str(path))
    wait_for_file(page, "#mstta-video", path.name)


def frames_done(page) -> int:
    m = re.search(r"(\d+)\s+frames", page.inner_text("#mstta-stats"))
    return int(m.group(1)) if m else 0


def wait_for_plots(page, timeout: float = 30.0) -> None:
    """Both top-k bar charts and every plot over time drawn with data."""
    deadline = time.monotonic() + timeout
    want = {"#mstta-clip-topk": "rect", "#mstta-tta-topk": "rect", "#mstta-confidence": "line",
            "#mstta-agreement": "line", "#mstta-switches": "line", "#mstta-cache": "rect"}
    missing = want
    while time.monotonic() < deadline:
        missing = {sel: mark for sel, mark in want.items() if marks(page, sel, mark) == 0}
        if not missing:
            return
        time.sleep(0.25)
    raise AssertionError(f"plots without data after {timeout:.0f} s: {sorted(missing)}")


def test_preloaded_video_streams_on_load_then_an_upload_fills_the_page(ui, tmp_path):
    upload = write_video(tmp_path / "upload.avi", n=200, size=(160, 120))   # MJPG: no browser could play it
    with chromium(tmp_path) as context:
        page = open_page(context, ui.url)
        # `mstta-demo --video ... --labels ...` processes the preloaded clip as soon as the page opens
        wait_for_text(page, "#mstta-status", r"Done: preloaded\.mp4, 15 frames processed", timeout=90)
        wait_for_plots(page)
        assert marks(page, "#mstta-accuracy", "line") >= 1, "a truth file was given: accuracy over time"
        assert re.search(r"accuracy CLIP [\d.]+%", page.inner_text("#mstta-stats"))
        assert page.input_value("#mstta-labels textarea") == "\n".join(LABELS)
        save_shot(page, tmp_path, "ui_01_preloaded_video.png")

        upload_video(page, upload)
        page.locator("#mstta-video-tab input[type=number]").fill("1")
        page.click("#mstta-run")
        wait_for_text(page, "#mstta-status", r"(Processing|Done:) upload\.avi")
        save_shot(page, tmp_path, "ui_02_upload_streaming.png")
        wait_for_text(page, "#mstta-status", r"Done: upload\.avi, 200 frames processed", timeout=90)
        wait_for_plots(page)
        verdict = page.inner_text("#mstta-verdict")
        assert re.search(r"Agree: CLIP and MS-TTA both say|DISAGREE: CLIP says .* MS-TTA says", verdict), verdict
        assert page.locator("#mstta-frame img").count() == 1, "the annotated frame is shown"
        assert frames_done(page) == 200
        assert marks(page, "#mstta-accuracy", "line") == 0, "the uploaded video has no truth file"
        assert "give a ground-truth CSV" in page.inner_text("#mstta-accuracy")
        save_shot(page, tmp_path, "ui_03_upload_done.png")
        assert_clean(page, context)


def test_bad_labels_show_a_message_and_keep_the_results(ui, tmp_path):
    with chromium(tmp_path) as context:
        page = open_page(context, ui.url)
        wait_for_text(page, "#mstta-status", r"Done: preloaded\.mp4", timeout=90)
        before = page.inner_text("#mstta-stats")
        page.fill("#mstta-labels textarea", "red circle\ngreen square\nred circle")
        page.click("#mstta-apply")
        status = wait_for_text(page, "#mstta-status", r"duplicate class name")
        assert "lines 1 and 3" in status
        page.get_by_text("duplicate class name").first.wait_for()   # also a toast
        assert page.inner_text("#mstta-stats") == before, "the session's results are untouched"
        save_shot(page, tmp_path, "ui_04_bad_labels.png")
        page.fill("#mstta-labels textarea", "")
        page.click("#mstta-run")
        wait_for_text(page, "#mstta-status", r"no class names found")
        assert page.inner_text("#mstta-stats") == before
        assert_clean(page, context)


def test_the_demo_clip_button_loads_clip_labels_and_truth(ui, tmp_path):
    with chromium(tmp_path) as context:
        page = open_page(context, ui.url)
        wait_for_text(page, "#mstta-status", r"Done: preloaded\.mp4", timeout=90)
        page.click("#mstta-demo-clip")
        wait_for_file(page, "#mstta-video", "demo.mp4")
        wait_for_file(page, "#mstta-truth", "truth.csv")
        assert page.input_value("#mstta-labels textarea").splitlines() == [
            "circle", "square", "triangle", "star", "heart", "arrow"]
        page.locator("#mstta-video-tab input[type=number]").fill("10")
        page.click("#mstta-run")
        wait_for_text(page, "#mstta-status", r"Done: demo\.mp4, 90 frames processed", timeout=90)
        wait_for_plots(page)
        assert marks(page, "#mstta-accuracy", "line") >= 1
        save_shot(page, tmp_path, "ui_05_demo_clip.png")
        assert_clean(page, context)


def test_stop_cancels_a_running_video_and_reset_clears(ui, tmp_path):
    long_video = write_video(tmp_path / "long.avi", n=3000, size=(64, 48))
    with chromium(tmp_path) as context:
        page = open_page(context, ui.url)
        wait_for_text(page, "#mstta-status", r"Done: preloaded\.mp4", timeout=90)
        upload_video(page, long_video)
        page.locator("#mstta-video-tab input[type=number]").fill("1")
        page.click("#mstta-run")
        wait_for_text(page, "#mstta-status", r"Processing long\.avi: frame \d+ of ~3000")
        page.click("#mstta-stop")
        status = wait_for_text(page, "#mstta-status", r"Stopped after \d+ frames of long\.avi")
        stopped_at = int(re.search(r"Stopped after (\d+)", status).group(1))
        assert 0 < stopped_at < 3000
        time.sleep(2.0)
        assert frames_done(page) == stopped_at, "the last page shows every frame done, then nothing more"
        save_shot(page, tmp_path, "ui_06_stopped.png")
        page.click("#mstta-reset")
        wait_for_text(page, "#mstta-status", r"Adaptation state cleared")
        assert page.inner_text("#mstta-verdict").strip() == "No frame processed yet"
        assert_clean(page, context)


def test_webcam_with_chromiums_fake_camera_shows_predictions(ui, tmp_path):
    footage = write_y4m(tmp_path / "camera.y4m", n=40)
    with chromium(tmp_path, camera="granted", camera_file=footage) as context:
        page = open_page(context, ui.url)
        wait_for_text(page, "#mstta-status", r"Done: preloaded\.mp4", timeout=90)
        page.get_by_role("tab", name="Webcam").click()
        page.get_by_text("Click to Access Webcam").click()
        page.locator("#mstta-webcam button", has_text="Record").click(timeout=30_000)
        wait_for_text(page, "#mstta-status", r"Webcam: frame ([5-9]|\d\d+) processed", timeout=60)
        wait_for_plots(page)
        assert re.search(r"Agree|DISAGREE", page.inner_text("#mstta-verdict"))
        assert not page.locator("#mstta-camera-message").is_visible()
        save_shot(page, tmp_path, "ui_07_webcam.png")
        page.locator("#mstta-webcam button", has_text="Stop").click()
        assert_clean(page, context)


def test_webcam_denied_shows_why(ui, tmp_path):
    with chromium(tmp_path, camera="denied") as context:
        page = open_page(context, ui.url)
        page.get_by_role("tab", name="Webcam").click()
        page.get_by_text("Click to Access Webcam").click()
        message = page.locator("#mstta-camera-message")
        message.wait_for(state="visible", timeout=30_000)
        assert "Webcam unavailable: the browser (or you) denied access to the camera" in message.inner_text()
        save_shot(page, tmp_path, "ui_08_webcam_denied.png")
        assert_clean(page, context, expected_errors=("Permission denied",))   # Gradio's own unhandled rejection


def test_closing_the_page_frees_its_session(ui, tmp_path):
    with chromium(tmp_path) as context:
        page = open_page(context, ui.url)
        wait_for_text(page, "#mstta-status", r"Done: preloaded\.mp4", timeout=90)
        freed_before = sum("freed" in line for line in ui.stderr)
        page.close()
        deadline = time.monotonic() + 30
        while sum("freed" in line for line in ui.stderr) <= freed_before and time.monotonic() < deadline:
            time.sleep(0.25)
        assert sum("freed" in line for line in ui.stderr) > freed_before, ui.log()
