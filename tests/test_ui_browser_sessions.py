"""Downloads per run and the release of sessions, in a real browser (headless Chromium, Playwright).

The server is `mstta-demo` without --headless as the CLI starts it (a child process on 127.0.0.1,
the random-weight `mstta-tiny`, labels but no preloaded video), with a small session cap
(`--max-sessions 3`) and -v, so its stderr says when a session is dropped or freed. Every file is
fetched through the link the page offers, as a user's click would; the session folders are looked
up where the server keeps them (its Gradio upload folder, GRADIO_TEMP_DIR here).
Requests to anything but 127.0.0.1 are blocked and must not happen.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
from helpers_ui import (
    UIProcess,
    assert_clean,
    chromium,
    chromium_browser,
    fast,
    open_page,
    require_chromium,
    save_shot,
    set_every,
    tab,
    upload_video,
    wait_for_downloads,
    wait_for_text,
    write_h264,
)
from helpers_video import write_labels

pytestmark = pytest.mark.slow

MAX_SESSIONS = 3


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    require_chromium()
    root = tmp_path_factory.mktemp("ui-sessions")
    labels = write_labels(root / "labels.txt")
    server = UIProcess(
        ["--labels", str(labels), "--model", "mstta-tiny", "--pretrained", "none", "--port", "0"]
        + ["--max-sessions", str(MAX_SESSIONS), "-v"],
        gradio_tmp=root / "gradio",
    )
    server.gradio_tmp = root / "gradio"
    yield server
    assert server.stop() == 0, server.log()
    assert "Traceback" not in server.log(), server.log()


def session_folders(server) -> list[Path]:
    """The sessions' download folders the server holds now (under its Gradio upload folder)."""
    return sorted(server.gradio_tmp.glob("mstta-ui-downloads-*/session-*"))


def open_files(server) -> list[str]:
    """What the server process holds open under its Gradio upload folder (uploads, recordings)."""
    fds = Path(f"/proc/{server.proc.pid}/fd")
    held = []
    for fd in os.listdir(fds):
        try:
            target = os.readlink(fds / fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith(str(server.gradio_tmp)):
            held.append(target)
    return held


def lines(server, text: str) -> int:
    return sum(text in line for line in list(server.stderr))


def fetch(context, href: str, tries: int = 3) -> tuple[int, bytes]:
    """GET a link as the page's browser context would: (status, body). A connection reset is tried
    again: the request context reuses a keep-alive connection, which uvicorn closes after 5 idle
    seconds, and a GET sent as it closes is reset (seen once under load); a status is never retried."""
    from playwright.sync_api import Error as PlaywrightError

    for attempt in range(tries):
        try:
            response = context.request.get(href)
        except PlaywrightError as exc:
            if "ECONNRESET" not in str(exc) or attempt == tries - 1:
                raise
            time.sleep(0.5)
            continue
        return response.status, response.body() if response.ok else b""
    raise AssertionError("unreachable")


GONE = (403, 404)  # a link whose file is deleted: Gradio's file route answers 403 "File not allowed" for a
# path in its upload folder that no longer exists (404 for other routes); either way no byte of the file


def rows_of(body: bytes) -> list[tuple[int, float]]:
    """A predictions JSONL's rows as (frame index, timestamp)."""
    return [(row["frame"], row["timestamp"]) for row in map(json.loads, body.decode("utf-8").splitlines())]


def sampled(n: int, fps: float, every: int) -> list[tuple[int, float]]:
    """The (frame index, timestamp) a run of an n-frame clip at `fps` processes with stride `every`."""
    return [(i, round(i / fps, 3)) for i in range(0, n, every)]


def mp4_frames(body: bytes, path: Path) -> int:
    """Frames an MP4 decodes to (PyAV)."""
    import av

    path.write_bytes(body)
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "h264", stream.codec_context.name
        return sum(1 for _ in container.decode(stream))


def run_clip(page, clip: Path, every: int, frames: int, timeout: float = 60.0) -> dict[str, str]:
    """Upload `clip`, process it as fast as possible with stride `every`; its offered links by name."""
    upload_video(page, clip)
    set_every(page, every)
    fast(page)
    page.click("#mstta-run")
    wait_for_text(page, "#mstta-status", rf"Done: {re.escape(clip.name)}, {frames} frames? processed", timeout=timeout)
    stem = clip.stem
    return wait_for_downloads(page, f"{stem}-annotated.mp4", f"{stem}-predictions.jsonl")


def check_run(context, links: dict[str, str], stem: str, expected: list[tuple[int, float]], tmp_path: Path) -> bytes:
    """The offered JSONL holds exactly `expected` (frame, timestamp) rows in order, the MP4 as many
    frames; the JSONL's bytes."""
    status, log = fetch(context, links[f"{stem}-predictions.jsonl"])
    assert status == 200, (stem, status)
    rows = rows_of(log)
    assert [f for f, _ in rows] == [f for f, _ in expected], f"{stem}: frames {[f for f, _ in rows]}"
    assert [t for _, t in rows] == pytest.approx([t for _, t in expected], abs=2e-3), f"{stem}: timestamps {rows}"
    status, video = fetch(context, links[f"{stem}-annotated.mp4"])
    assert status == 200, (stem, status)
    assert mp4_frames(video, tmp_path / f"{stem}.mp4") == len(expected)
    return log


def test_each_run_offers_its_own_files_and_a_second_press_never_mixes_runs(ui, tmp_path):
    """Four runs in one page: each offers files holding exactly its own frames (the clips differ in
    length, stride and frame rate, so rows of another clip show); the run before the newest stays
    fetchable unchanged (docs/ui.md: a session keeps at most the one before), older ones are gone (`GONE`).
    Process pressed again while a real-time run goes, with another video: that video's run either
    replaces the first or waits for it, and the files offered at the end are its own, never mixed."""
    alpha = write_h264(tmp_path / "alpha.mp4", n=12, size=(96, 64), fps=10.0)
    bravo = write_h264(tmp_path / "bravo.mp4", n=20, size=(96, 64), fps=8.0)
    charlie = write_h264(tmp_path / "charlie.mp4", n=150, size=(64, 48), fps=10.0)  # 15 s in real time
    delta = write_h264(tmp_path / "delta.mp4", n=15, size=(96, 64), fps=5.0)
    with chromium(tmp_path) as context:
        page = open_page(context, ui.url, preloaded=False)
        a_links = run_clip(page, alpha, every=1, frames=12)
        a_log = check_run(context, a_links, "alpha", sampled(12, 10.0, 1), tmp_path)

        b_links = run_clip(page, bravo, every=2, frames=10)
        assert set(b_links.values()).isdisjoint(a_links.values()), "a new run, new URLs"
        check_run(context, b_links, "bravo", sampled(20, 8.0, 2), tmp_path)
        assert fetch(context, a_links["alpha-predictions.jsonl"]) == (200, a_log), "the run before: kept, unchanged"
        save_shot(page, tmp_path, "ui_sessions_01_second_run.png")

        upload_video(page, charlie)
        set_every(page, 1)
        fast(page, on=False)  # real time: the run lasts about 15 s
        page.click("#mstta-run")
        wait_for_text(page, "#mstta-status", r"Processing charlie\.mp4: frame ([3-9]|\d\d) ", timeout=60)
        upload_video(page, delta)
        fast(page)
        wait_for_text(page, "#mstta-status", r"Processing charlie\.mp4", timeout=10)  # the first run still goes
        page.click("#mstta-run")
        wait_for_text(page, "#mstta-status", r"Done: delta\.mp4, 15 frames processed", timeout=60)
        d_links = wait_for_downloads(page, "delta-annotated.mp4", "delta-predictions.jsonl")
        check_run(context, d_links, "delta", sampled(15, 5.0, 1), tmp_path)
        save_shot(page, tmp_path, "ui_sessions_02_second_press.png")
        for name, href in (a_links | b_links).items():  # two newer runs finished since: their files are gone
            assert fetch(context, href)[0] in GONE, f"{name} still served after two newer runs"
        assert_clean(page, context)


def test_closed_pages_free_their_sessions_and_files_and_the_cap_locks_nobody_out(ui, tmp_path):
    """More users than --max-sessions, each with a finished run (download files): the cap drops the
    oldest idle one (its files go with it; its page says so, and Reset lets that user in again);
    closing the pages frees every session (stderr "freed", no session folder, no open file left);
    every closed page's links answer 403/404 (`GONE`); a new user's page still runs and offers its
    files."""
    clip = write_h264(tmp_path / "short.mp4", n=6, size=(64, 48), fps=10.0)
    names = ("short-annotated.mp4", "short-predictions.jsonl")
    freed, dropped = lines(ui, "freed"), lines(ui, "session dropped")
    with chromium_browser() as new_context:
        users = []
        for _ in range(MAX_SESSIONS + 1):
            context = new_context()
            page = open_page(context, ui.url, preloaded=False)
            links = run_clip(page, clip, every=1, frames=6)
            assert all(fetch(context, href)[0] == 200 for href in links.values())
            users.append((context, page, links))
            assert len(session_folders(ui)) <= MAX_SESSIONS, session_folders(ui)
        assert lines(ui, "session dropped") > dropped, "one user more than the cap: the oldest idle one is dropped"
        first_context, first_page, first_links = users[0]
        assert all(fetch(first_context, href)[0] in GONE for href in first_links.values()), "dropped: its files went"
        save_shot(users[-1][1], tmp_path, "ui_sessions_03_over_the_cap.png")
        first_page.click("#mstta-run")  # the dropped user is told, and Reset lets them in again
        wait_for_text(first_page, "#mstta-status", r"Session expired: .*Press Reset to start again")
        tab(first_page, "Settings")
        first_page.click("#mstta-reset")
        wait_for_text(first_page, "#mstta-status", r"Adaptation state cleared")
        tab(first_page, "Video")
        first_page.click("#mstta-run")
        wait_for_text(first_page, "#mstta-status", r"Done: short\.mp4, 6 frames processed")
        again = wait_for_downloads(first_page, *names)
        assert set(again.values()).isdisjoint(first_links.values()), "new files, new URLs"
        users[0] = (first_context, first_page, first_links | {f"again-{n}": href for n, href in again.items()})
        assert len(session_folders(ui)) <= MAX_SESSIONS, session_folders(ui)

        checker = new_context()  # fetches the closed pages' links afterwards
        for context, _, _ in users:
            context.close()
        deadline = time.monotonic() + 30
        while (session_folders(ui) or lines(ui, "freed") < freed + MAX_SESSIONS) and time.monotonic() < deadline:
            time.sleep(0.25)
        assert lines(ui, "freed") >= freed + MAX_SESSIONS, ui.log()
        assert not session_folders(ui), f"closed pages left {session_folders(ui)}"
        assert not open_files(ui), f"the server still holds {open_files(ui)}"
        gone = [name for _, _, links in users for name, href in links.items() if fetch(checker, href)[0] not in GONE]
        assert not gone, f"served after their page closed: {gone}"

        page = open_page(checker, ui.url, preloaded=False)  # a new user after all that: not locked out
        links = run_clip(page, clip, every=1, frames=6)
        assert set(links) == set(names) and all(fetch(checker, href)[0] == 200 for href in links.values())
        assert len(session_folders(ui)) == 1
        assert_clean(page, checker)
