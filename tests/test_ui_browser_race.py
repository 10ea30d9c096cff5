"""The racing page as a newcomer reads it (issue 32.4), in real Chromium at 1280x720.

One `mstta-demo` UI process (random-weight `mstta-tiny`, a generated clip with its ground truth,
`--methods ms-tta,zero-shot,tda`, every 2nd frame), its run started at page load. Screenshots are
saved under each test's tmp_path and copied to /tmp/mstta_ui_shots/.
"""

from __future__ import annotations

import re

import pytest
from helpers_ui import (
    UIProcess,
    assert_clean,
    chromium,
    open_page,
    require_chromium,
    save_shot,
    tab,
    wait_for_file,
    wait_for_text,
    write_h264,
    write_truth,
)
from helpers_video import write_labels

pytestmark = pytest.mark.slow

FRAMES = 30  # the preloaded clip; every 2nd frame -> 15 processed, numbered 0, 2, ..., 28 in the JSONL


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    require_chromium()
    root = tmp_path_factory.mktemp("ui-race")
    server = UIProcess(
        [
            *("--labels", str(write_labels(root / "labels.txt"))),
            *("--video", str(write_h264(root / "preloaded.mp4", n=FRAMES))),
            *("--truth", str(write_truth(root / "truth.csv", n=FRAMES))),
            *("--every", "2", "--methods", "ms-tta,zero-shot,tda"),
            *("--model", "mstta-tiny", "--pretrained", "none", "--port", "0"),
        ],
        gradio_tmp=root / "gradio",
    )
    yield server
    assert server.stop() == 0, server.log()


def cut_short(page, selector: str) -> list[str]:
    """The texts under `selector` that the page cuts (wider than their box, or clipped by it)."""
    return page.evaluate(
        """(sel) => Array.from(document.querySelectorAll(sel)).filter(e =>
            e.scrollWidth > e.clientWidth + 1 || e.getBoundingClientRect().right > window.innerWidth)
            .map(e => e.innerText)""",
        selector,
    )


def test_one_clip_row_whole_title_and_the_race_above_the_fold(ui, tmp_path):
    """Zero-shot raced is the CLIP row itself (one row, one legend entry); the title (model, device)
    and the random-weights banner are whole; both top-3 charts are above the fold; the status line
    keeps its height when its text wraps (nothing below it jumps)."""
    with chromium(tmp_path, width=1280, height=720) as context:
        page = open_page(context, ui.url)
        save_shot(page, tmp_path, "ui_race_1280x720.png", full_page=False)
        rows = page.eval_on_selector_all("#mstta-leaderboard tr[data-method]", "rs => rs.map(r => r.dataset.method)")
        assert sorted(rows) == ["clip", "ms-tta", "tda"], rows
        assert "CLIP (zero-shot), reference" in page.inner_text("#mstta-leaderboard")
        legend = page.inner_text("#mstta-accuracy")
        assert "CLIP (zero-shot)" not in legend and "TDA" in legend, legend
        assert "ms / frame" not in page.inner_text("#mstta-leaderboard"), "one speed figure on the screen"
        assert not cut_short(page, "#mstta-title p, #mstta-random-weights"), "the title or the banner is cut"
        assert "mstta-tiny" in page.inner_text("#mstta-title") and "cpu" in page.inner_text("#mstta-title")
        for sel in ("#mstta-clip-topk", "#mstta-tta-topk", "#mstta-leaderboard", "#mstta-accuracy", "#mstta-gain"):
            box = page.locator(sel).bounding_box()
            assert box and box["y"] + box["height"] <= 720 and box["x"] + box["width"] <= 1280, (sel, box)
        status = "(t) => { document.querySelector('#mstta-status p').innerText = t; }"
        page.evaluate(status, "Ready: 3 classes, MS-TTA.")  # one line
        frame_y = page.locator("#mstta-frame").bounding_box()["y"]
        page.evaluate(status, "Refused: " + "a long status line that wraps onto a second line at this width " * 3)
        assert page.locator("#mstta-status p").bounding_box()["height"] > 25, "the text did not wrap"
        assert page.locator("#mstta-frame").bounding_box()["y"] == frame_y, "the page jumped when the status wrapped"
        assert_clean(page, context)


def test_ground_truth_is_said_alike_after_load_and_apply(ui, tmp_path):
    """After the run: accuracy on the board, the gain and the plot; after Apply (truth still loaded,
    no frame yet): the same words on all three, never "no ground truth" beside "loaded"."""
    with chromium(tmp_path, width=1280, height=720) as context:
        page = open_page(context, ui.url)
        assert re.search(r"TDA\s+[\d.]+%", page.inner_text("#mstta-leaderboard"))
        assert "Gain of MS-TTA over CLIP (points)" in page.inner_text("#mstta-gain")
        tab(page, "Settings")
        page.click("#mstta-apply")
        wait_for_text(page, "#mstta-status", r"afresh")
        words = "ground truth loaded, no labelled frame yet"
        for sel in ("#mstta-leaderboard", "#mstta-gain", "#mstta-accuracy"):
            assert words in page.inner_text(sel), (sel, page.inner_text(sel))
        save_shot(page, tmp_path, "ui_race_truth_after_apply.png", full_page=False)
        assert_clean(page, context)


def test_the_demo_clip_follows_the_sessions_model_and_says_what_it_loaded(ui, tmp_path):
    """The server runs mstta-tiny (the photographs clip); this session picks the digits model in
    Settings: "Use the demo clip" loads the digits clip and says so in the status line."""
    from app.ui.models import label_of
    from mstta.features.models import BUNDLED_TAG

    with chromium(tmp_path, width=1280, height=720) as context:
        page = open_page(context, ui.url)
        tab(page, "Settings")
        page.locator("#mstta-model input").click()
        page.get_by_role("option", name=label_of("mstta-digits", BUNDLED_TAG), exact=True).click()
        tab(page, "Video")
        page.click("#mstta-demo-clip")
        wait_for_file(page, "#mstta-video", "digits.mp4")
        status = wait_for_text(page, "#mstta-status", r"Demo clip for mstta-digits loaded")
        assert "digits.mp4" in status and "10 labels" in status and "ground truth" in status, status
        save_shot(page, tmp_path, "ui_race_demo_clip.png", full_page=False)
        assert_clean(page, context)


def test_chart_text_is_whole_at_1280x720_and_not_oversized_at_1920x1080(ui, tmp_path):
    """The confidence plot's y-axis title lies inside its chart; on a wide screen the charts' text
    stays near the leaderboard's size (the charts stop growing)."""
    for width, height in ((1280, 720), (1920, 1080)):
        with chromium(tmp_path, width=width, height=height) as context:
            page = open_page(context, ui.url)
            page.locator("#mstta-confidence").scroll_into_view_if_needed()
            inside = page.evaluate("""() => { const svg = document.querySelector('#mstta-confidence svg')
                .getBoundingClientRect(); const t = document.querySelector('#mstta-confidence .axis-title.y')
                .getBoundingClientRect(); return t.top >= svg.top - 0.5 && t.bottom <= svg.bottom + 0.5; }""")
            assert inside, f"the confidence plot's y label is clipped at {width}x{height}"
            board = page.evaluate(
                "() => parseFloat(getComputedStyle(document.querySelector('#mstta-leaderboard td')).fontSize)"
            )
            ticks = "#mstta-gain svg text.tick, #mstta-accuracy svg text.tick"
            chart = page.evaluate(
                "(s) => Math.max(...Array.from(document.querySelectorAll(s)).map(e => e.getBBox && "
                "e.getBoundingClientRect().height))",
                ticks,
            )
            assert chart <= 1.6 * board, f"chart text {chart:.1f} px beside the board's {board:.1f} px at {width}"
            save_shot(page, tmp_path, f"ui_race_charts_{width}.png", full_page=False)
            assert_clean(page, context)
