"""The browser UI in a real browser: Chromium, headless, driven by Playwright.

The server is `mstta-demo` without --headless as the CLI starts it (a child process on 127.0.0.1
with the random-weight `mstta-tiny`, a generated H.264 clip, its labels and ground truth). Plots
are read as the browser renders them (the SVG/HTML in the page, and screenshot pixels), not from
the server's answer. Every test saves screenshots under its tmp_path, copied to /tmp/mstta_ui_shots/.
Requests to anything but 127.0.0.1 are blocked and must not happen.
"""
from __future__ import annotations

import re
import time

import pytest
from helpers_ui import (
    LABELS,
    STUB_WEIGHTS_SCRIPT,
    UIProcess,
    chromium,
    colour_pixels,
    drawn_lines,
    page_bars,
    page_series,
    require_chromium,
    save_shot,
    wait_for_text,
    write_h264,
    write_truth,
    write_y4m,
)
from helpers_video import write_labels, write_video

pytestmark = pytest.mark.slow

PRELOADED_FRAMES = 30      # the preloaded clip; --every 2 -> 15 processed frames
ORANGE = (245, 158, 11)    # the adapted method's colour in the plots
LINE_PLOTS = ("#mstta-confidence", "#mstta-agreement", "#mstta-switches")


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


def open_page(context, url, preloaded: bool = True):
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
    box = page.locator(selector)
    if box.locator("input[type=file]").count() == 0:
        box.get_by_role("button", name=re.compile("clear", re.I)).first.click()
    box.locator("input[type=file]").wait_for(state="attached", timeout=10_000)


def upload_video(page, path) -> None:
    """Replace the video in the Video tab (clear the current one first, as a user does)."""
    clear_file(page, "#mstta-video")
    page.locator("#mstta-video input[type=file]").set_input_files(str(path))
    wait_for_file(page, "#mstta-video", path.name)


def frames_done(page) -> int:
    m = re.search(r"(\d+)\s+frames?\b", page.inner_text("#mstta-stats"))
    return int(m.group(1)) if m else 0


def wait_for_plots(page, frames: int | None = None, timeout: float = 30.0) -> None:
    """Both top-k charts with bars and every line plot drawn with lines (`frames` points each, if given)."""
    deadline = time.monotonic() + timeout
    problems: list[str] = []
    while time.monotonic() < deadline:
        problems = [sel for sel in ("#mstta-clip-topk", "#mstta-tta-topk", "#mstta-cache") if not page_bars(page, sel)]
        for sel in LINE_PLOTS:
            points = set(page_series(page, sel).values())
            if drawn_lines(page, sel) == 0 or (frames is not None and points != {frames}):
                problems.append(f"{sel} {points}")
        if not problems:
            return
        time.sleep(0.25)
    raise AssertionError(f"plots not drawn after {timeout:.0f} s: {problems}")


def assert_plots_empty(page) -> None:
    """What the browser shows after Reset or a new engine: zero cache entries, no line at all."""
    bars = page_bars(page, "#mstta-cache")
    assert bars and set(bars.values()) == {0.0}, f"cache plot still shows entries: {bars}"
    widths = page.evaluate("""() => Array.from(document.querySelectorAll('#mstta-cache .bar'))
                                 .map(b => b.getBoundingClientRect().width)""")
    assert widths and max(widths) < 1, f"cache bars still drawn: {widths}"
    for sel in (*LINE_PLOTS, "#mstta-accuracy"):
        assert set(page_series(page, sel).values()) == {0}, f"{sel} still has points: {page_series(page, sel)}"
        assert drawn_lines(page, sel) == 0
    shot = page.locator("#mstta-confidence svg").screenshot()
    assert colour_pixels(shot, ORANGE) < 20, "the confidence plot still shows an orange line"


def test_preloaded_video_then_an_upload_then_reset_and_apply_empty_the_plots(ui, tmp_path):
    upload = write_video(tmp_path / "upload.avi", n=120, size=(160, 120))   # MJPG: no browser could play it
    with chromium(tmp_path) as context:
        page = open_page(context, ui.url)
        # `mstta-demo --video ... --labels ...` processes the preloaded clip as soon as the page opens
        wait_for_plots(page, frames=15)
        assert page_series(page, "#mstta-accuracy") == {"CLIP zero-shot": 15, "MS-TTA": 15}, "truth: accuracy"
        assert re.search(r"accuracy CLIP [\d.]+%", page.inner_text("#mstta-stats"))
        assert page.input_value("#mstta-labels textarea") == "\n".join(LABELS)
        save_shot(page, tmp_path, "ui_01_preloaded_video.png")

        upload_video(page, upload)
        page.locator("#mstta-video-tab input[type=number]").fill("1")
        page.click("#mstta-run")
        status = wait_for_text(page, "#mstta-status", r"Done: upload\.avi, 120 frames processed", timeout=90)
        assert status.startswith("Fresh stream: empty cache and bank."), status
        wait_for_plots(page, frames=120)
        verdict = page.inner_text("#mstta-verdict")
        assert re.search(r"Agree: CLIP and MS-TTA both say|DISAGREE: CLIP says .* MS-TTA says", verdict), verdict
        assert page.locator("#mstta-frame img").count() == 1, "the annotated frame is shown"
        assert frames_done(page) == 120
        assert page_series(page, "#mstta-accuracy") == {"CLIP zero-shot": 0, "MS-TTA": 0}, "no truth: no accuracy"
        assert "load a ground-truth CSV" in page.inner_text("#mstta-accuracy")
        assert sum(page_bars(page, "#mstta-cache").values()) > 0
        assert colour_pixels(page.locator("#mstta-confidence svg").screenshot(), ORANGE) > 50
        save_shot(page, tmp_path, "ui_02_upload_done.png")

        page.click("#mstta-reset")
        wait_for_text(page, "#mstta-status", r"Adaptation state cleared")
        assert page.inner_text("#mstta-verdict").strip() == "No frame processed yet"
        assert_plots_empty(page)
        save_shot(page, tmp_path, "ui_03_after_reset.png")

        page.click("#mstta-run")   # fill the plots again, then Apply a changed setting
        wait_for_text(page, "#mstta-status", r"Done: upload\.avi, 120 frames processed", timeout=90)
        wait_for_plots(page, frames=120)
        page.locator("#mstta-capacity input[type=number]").fill("5")
        page.locator("#mstta-capacity input[type=number]").press("Enter")
        page.click("#mstta-apply")
        wait_for_text(page, "#mstta-status", r"New MS-TTA settings: the adaptation started afresh")
        assert_plots_empty(page)
        assert "Q = 5" in page.inner_text("#mstta-cache")
        assert_clean(page, context)


def test_bad_labels_show_a_message_and_keep_the_results(ui, tmp_path):
    with chromium(tmp_path) as context:
        page = open_page(context, ui.url)
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


def test_truth_naming_other_classes_offers_to_drop_it_and_the_empty_box_shows_its_icon(ui, tmp_path):
    with chromium(tmp_path) as context:
        page = open_page(context, ui.url)
        page.fill("#mstta-labels textarea", "cat\ndog\nbird")
        page.click("#mstta-apply")
        status = wait_for_text(page, "#mstta-status", r"missing from the labels")
        assert "'red circle', 'green square', 'blue triangle'" in status, status
        page.locator("#mstta-drop-truth").wait_for(state="visible", timeout=10_000)
        save_shot(page, tmp_path, "ui_05_truth_mismatch.png")
        page.click("#mstta-drop-truth")
        wait_for_text(page, "#mstta-status", r"Ground-truth file dropped")
        page.locator("#mstta-truth input[type=file]").wait_for(state="attached", timeout=10_000)
        assert not page.locator("#mstta-drop-truth").is_visible()
        # the empty file box shows its upload icon, clear of the label chip
        icon = page.locator("#mstta-truth svg").last.bounding_box()
        label = page.locator("#mstta-truth label, #mstta-truth [data-testid=block-label]").first.bounding_box()
        assert icon and label and icon["y"] >= label["y"] + label["height"] - 1, (icon, label)
        page.click("#mstta-run")
        done = wait_for_text(page, "#mstta-status", r"Done: preloaded\.mp4", timeout=90)
        assert "Accuracy off" not in done and "accuracy CLIP" not in page.inner_text("#mstta-stats")
        save_shot(page, tmp_path, "ui_06_truth_dropped.png")
        assert_clean(page, context)


def test_method_dropdown_titles_and_unused_controls_are_disabled(ui, tmp_path):
    with chromium(tmp_path) as context:
        page = open_page(context, ui.url, preloaded=False)
        assert "kNN mean shift" in page.inner_text("#mstta-method")   # the description of MS-TTA
        page.locator("#mstta-method input").click()
        options = page.locator("ul[role=listbox] li").all_inner_texts()
        assert {"MS-TTA", "TDA", "BoostAdapter", "CLIP (zero-shot)"} <= {o.replace("✓", "").strip() for o in options}, options
        page.get_by_role("option", name="TDA", exact=True).click()
        wait_for_text(page, "#mstta-method", r"positive \+ negative caches")
        page.wait_for_function("() => document.querySelector('#mstta-k input[type=range]').disabled")
        assert page.locator("#mstta-alpha input[type=range]").is_disabled()
        assert "no mean shift" in page.inner_text("#mstta-k")
        assert "no mean shift" in (page.get_attribute("#mstta-k", "title") or "")
        assert not page.locator("#mstta-lam input[type=range]").is_disabled(), "TDA has a cache: λ is used"
        save_shot(page, tmp_path, "ui_07_tda_disables_k.png")
        page.locator("#mstta-method input").click()
        page.get_by_role("option", name="MS-TTA", exact=True).click()
        page.wait_for_function("() => !document.querySelector('#mstta-k input[type=range]').disabled")
        assert not page.get_attribute("#mstta-k", "title")
        assert_clean(page, context)


def test_the_demo_clip_button_loads_clip_labels_and_truth(ui, tmp_path):
    import cv2

    from app.ui.handlers import demo_clip

    clip = demo_clip()
    if clip is None:
        pytest.skip("assets/demo.mp4 or assets/labels.txt is missing (regenerate with assets/make_assets.py)")
    video, labels_text, truth = clip
    cap = cv2.VideoCapture(video)
    frames = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
    cap.release()
    with chromium(tmp_path) as context:
        page = open_page(context, ui.url)
        page.click("#mstta-demo-clip")
        wait_for_file(page, "#mstta-video", "demo.mp4")
        if truth:
            wait_for_file(page, "#mstta-truth", "truth.csv")
        assert page.input_value("#mstta-labels textarea") == labels_text
        every = max(1, frames // 40)
        page.locator("#mstta-video-tab input[type=number]").fill(str(every))
        page.click("#mstta-run")
        expected = -(-frames // every)
        wait_for_text(page, "#mstta-status", rf"Done: demo\.mp4, {expected} frames processed", timeout=120)
        wait_for_plots(page, frames=expected)
        if truth:
            assert page_series(page, "#mstta-accuracy")["CLIP zero-shot"] > 0
        save_shot(page, tmp_path, "ui_08_demo_clip.png")
        assert_clean(page, context)


def test_plots_never_blank_while_streaming_then_stop(ui, tmp_path):
    long_video = write_video(tmp_path / "long.avi", n=10000, size=(32, 24))   # long enough to sample and stop
    with chromium(tmp_path) as context:
        page = open_page(context, ui.url)
        upload_video(page, long_video)
        page.locator("#mstta-video-tab input[type=number]").fill("1")
        page.click("#mstta-run")
        wait_for_text(page, "#mstta-status", r"Processing long\.avi: frame \d+ of ~10000")
        # once a plot has drawn 2 frames, every sampled screenshot of every line plot has its lines
        deadline = time.monotonic() + 30
        while min(min(page_series(page, s).values() or [0]) for s in LINE_PLOTS) < 2:
            assert time.monotonic() < deadline, "the plots never reached 2 frames"
            time.sleep(0.1)
        samples = []
        for i in range(8):
            for sel in LINE_PLOTS:
                shot = page.locator(f"{sel} svg").screenshot()   # the drawing, not the legend
                colour = (139, 92, 246) if sel == "#mstta-agreement" else ORANGE
                samples.append((i, sel, drawn_lines(page, sel), colour_pixels(shot, colour)))
            time.sleep(0.35)
        blank = [s for s in samples if s[2] == 0 or s[3] < 20]
        assert not blank, f"plots without lines in {len(blank)} of {len(samples)} samples: {blank}"
        assert "Processing long.avi" in page.inner_text("#mstta-status"), "sampled while the run went on"
        save_shot(page, tmp_path, "ui_09_streaming.png")
        page.click("#mstta-stop")
        status = wait_for_text(page, "#mstta-status", r"Stopped after \d+ frames of long\.avi")
        stopped_at = int(re.search(r"Stopped after (\d+)", status).group(1))
        assert 0 < stopped_at < 10000
        time.sleep(1.0)
        assert frames_done(page) == stopped_at, "the last page shows every frame done, then nothing more"
        assert_clean(page, context)


def test_webcam_with_chromiums_fake_camera_then_its_summary(ui, tmp_path):
    footage = write_y4m(tmp_path / "camera.y4m", n=40)
    with chromium(tmp_path, camera="granted", camera_file=footage) as context:
        page = open_page(context, ui.url)
        page.get_by_role("tab", name="Webcam").click()
        page.get_by_text("Click to Access Webcam").click()
        page.locator("#mstta-webcam button", has_text="Record").click(timeout=30_000)
        status = wait_for_text(page, "#mstta-status", r"Webcam: frame ([5-9]|\d\d+) processed", timeout=60)
        assert "Fresh stream" in status or "frame" in status
        wait_for_plots(page)
        assert re.search(r"Agree|DISAGREE", page.inner_text("#mstta-verdict"))
        assert not page.locator("#mstta-camera-message").is_visible()
        save_shot(page, tmp_path, "ui_10_webcam.png")
        page.locator("#mstta-webcam button", has_text="Stop").click()
        summary = wait_for_text(page, "#mstta-status", r"Webcam stopped: \d+ frames? processed in", timeout=20)
        assert re.search(r"agreement [\d.]+%; switches CLIP \d+, MS-TTA \d+", summary), summary
        assert re.search(r"\([\d.]+ fps\)", summary), summary
        assert_clean(page, context)


def test_webcam_denied_shows_why(ui, tmp_path):
    with chromium(tmp_path, camera="denied") as context:
        page = open_page(context, ui.url, preloaded=False)
        page.get_by_role("tab", name="Webcam").click()
        page.get_by_text("Click to Access Webcam").click()
        message = page.locator("#mstta-camera-message")
        message.wait_for(state="visible", timeout=30_000)
        assert "Webcam unavailable: the browser (or you) denied access to the camera" in message.inner_text()
        save_shot(page, tmp_path, "ui_11_webcam_denied.png")
        assert_clean(page, context, expected_errors=("Permission denied",))   # Gradio's own unhandled rejection


def test_first_screen_at_1280x720_and_the_random_weights_banner(ui, tmp_path):
    with chromium(tmp_path, width=1280, height=720) as context:
        page = open_page(context, ui.url)
        wait_for_plots(page, frames=15)
        banner = page.locator("#mstta-random-weights")
        assert banner.is_visible() and "Random weights — predictions are meaningless" in banner.inner_text()
        for sel in ("#mstta-frame", "#mstta-verdict", "#mstta-clip-topk", "#mstta-tta-topk", "#mstta-random-weights"):
            box = page.locator(sel).bounding_box()
            assert box and box["y"] >= 0 and box["y"] + box["height"] <= 720, f"{sel} not in the first screen: {box}"
        for sel in LINE_PLOTS:
            text = page.inner_text(sel)
            assert "processed frames" in text, f"{sel} has no x-axis title"
        save_shot(page, tmp_path, "ui_12_first_screen_1280x720.png", full_page=False)
        assert_clean(page, context)


def test_no_banner_with_real_weights(tmp_path):
    """The loader stubbed to report real weights: the page shows no random-weights banner."""
    require_chromium()
    labels = write_labels(tmp_path / "labels.txt")
    server = UIProcess(["--labels", str(labels), "--model", "mstta-tiny", "--pretrained", "openai", "--port", "0"],
                       script=STUB_WEIGHTS_SCRIPT, gradio_tmp=tmp_path / "gradio")
    try:
        with chromium(tmp_path) as context:
            page = open_page(context, server.url, preloaded=False)
            assert "(openai)" in page.inner_text("#mstta-title")
            assert page.locator("#mstta-random-weights").count() == 0
            assert "Random weights" not in page.inner_text("body")
    finally:
        assert server.stop() == 0, server.log()


def test_closing_the_page_frees_its_session(ui, tmp_path):
    with chromium(tmp_path) as context:
        page = open_page(context, ui.url)
        freed_before = sum("freed" in line for line in ui.stderr)
        page.close()
        deadline = time.monotonic() + 30
        while sum("freed" in line for line in ui.stderr) <= freed_before and time.monotonic() < deadline:
            time.sleep(0.25)
        assert sum("freed" in line for line in ui.stderr) > freed_before, ui.log()
