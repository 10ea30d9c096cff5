"""The UI's shared state (app/ui/state.py): fair model slots, the session cap, controls as Settings."""

from __future__ import annotations

import threading
import time

import pytest

from app.ui.state import SESSION_BANK_LIMIT, ModelSlots, Sessions, Settings, UISession
from mstta.engine.config import MAX_BANK_SIZE, EngineConfig
from mstta.errors import UserError


def test_model_slots_bound_concurrency_and_serve_in_arrival_order():
    slots = ModelSlots(1)
    order, inside, most = [], [0], [0]
    lock = threading.Lock()
    gate = threading.Event()

    def work(name):
        with slots():
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            order.append(name)
            if name == "first":
                gate.wait(5)
            time.sleep(0.01)
            with lock:
                inside[0] -= 1

    first = threading.Thread(target=work, args=("first",))
    first.start()
    while not order:
        time.sleep(0.001)
    waiters = []
    for i in range(5):  # queue up one by one, so arrival order is known
        t = threading.Thread(target=work, args=(f"w{i}",))
        t.start()
        waiters.append(t)
        deadline = time.monotonic() + 5
        while slots.waiting < i + 1 and time.monotonic() < deadline:
            time.sleep(0.001)
    gate.set()
    for t in [first, *waiters]:
        t.join(10)
    assert most[0] == 1
    assert order == ["first", "w0", "w1", "w2", "w3", "w4"]


def test_sessions_beyond_the_cap_drop_the_oldest_idle_one():
    sessions = Sessions(limit=2)
    a, b, c = UISession(), UISession(), UISession()
    a.stream = b.stream = c.stream = object()  # stand-ins for engines
    b.runs = 1  # b is streaming: never dropped while busy
    for key, ui in (("a", a), ("b", b), ("c", c)):
        sessions.touch(ui, key)
    assert len(sessions) == 2 and a.expired and a.stream is None and not b.expired and not c.expired
    sessions.touch(a, "a")  # an expired session is not live again until Reset
    assert len(sessions) == 2 and a.expired
    sessions.forget("c")
    assert c.stream is None and c.closed and len(sessions) == 1


def form(**changes):
    return dict(labels="cat\ndog", template="", method="ms-tta", k=2, alpha=0.5, lam=1.0, capacity=3, bank=16) | changes


def test_settings_bound_the_bank_and_name_the_control():
    base = EngineConfig(bank_size=4096)
    ok = Settings.from_controls(form(bank=SESSION_BANK_LIMIT), base)
    assert ok.labels == ("cat", "dog") and ok.config.bank_size == SESSION_BANK_LIMIT
    assert SESSION_BANK_LIMIT < MAX_BANK_SIZE, "the UI's own, smaller bound"
    for bank in (0, -5, 20000, SESSION_BANK_LIMIT + 1):
        with pytest.raises(
            UserError,
            match=rf"^Bank size \(features\): {bank} is out of range; enter a whole "
            r"number from 1 to 16,384$",
        ):
            Settings.from_controls(form(bank=bank), base)


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("lam", 100, r"λ \(cache weight\): 100 is out of range; enter a number from 0 to 10"),  # refused, not clamped
        ("lam", -0.5, r"λ \(cache weight\): -0.5 is out of range"),
        ("lam", None, r"λ \(cache weight\): enter a number"),
        ("k", "abc", r"k \(mean-shift neighbours\): 'abc' is not a number"),
        ("k", 2.5, r"k \(mean-shift neighbours\): 2.5 is not a whole number"),
        ("k", 17, r"k \(mean-shift neighbours\): 17 is out of range; enter a whole number from 1 to 16"),
        ("k", True, r"k \(mean-shift neighbours\): expected a number, got bool"),
        ("alpha", "NaN", r"α \(mean-shift weight\): 'NaN' is not a finite number"),
        ("alpha", "inf", r"α \(mean-shift weight\): 'inf' is not a finite number"),
        ("alpha", 1.5, r"α \(mean-shift weight\): 1.5 is out of range"),
        ("capacity", [3], r"Q \(cache size per class\): expected a number, got list"),
        ("capacity", {"a": 1}, r"Q \(cache size per class\): expected a number, got dict"),
        ("capacity", "1e400", r"Q \(cache size per class\): '1e400' is not a finite number"),
        ("bank", "", r"Bank size \(features\): enter a number"),
        ("labels", 5, r"Labels: expected text, got int"),
        ("template", ["a {}"], r"Prompt template: expected text, got list"),
        ("method", "nope", r"unknown method 'nope'"),
        ("method", None, r"unknown method ''"),
    ],
)
def test_every_control_is_checked_by_name_and_never_clamped(name, value, message):
    with pytest.raises(UserError, match=message):
        Settings.from_controls(form(**{name: value}), EngineConfig(bank_size=4096))


def test_controls_that_do_nothing_for_a_method_say_why_and_the_others_their_range():
    from app.ui.handlers import method_info

    summary, notes = method_info("ms-tta")
    assert "mean shift" in summary and all(used for _, used in notes.values())
    assert notes["k"][0] == "whole number, 1 to 16" and notes["lam"][0] == "0 to 10"
    _, notes = method_info("tda")
    assert notes["k"] == notes["alpha"] == notes["bank"] == ("Unused: TDA has no mean shift", False)
    assert notes["lam"] == ("0 to 10", True) and notes["capacity"][1]
    _, notes = method_info("zero-shot")
    assert notes["lam"] == notes["capacity"] == ("Unused: CLIP (zero-shot) keeps no cache", False)


def test_history_counts_like_the_headless_summary():
    """The UI's History and the headless RunSummary hold the same Tally: same counts for the same frames."""
    import numpy as np

    from app.session import FrameResult, Scored
    from app.sources import Frame
    from app.summary import RunSummary
    from app.ui.state import History

    labels = ["cat", "dog", "bird"]

    def result(clip, tta):
        def top(i):
            return [Scored(labels[i], i, 0.6), Scored(labels[(i + 1) % 3], (i + 1) % 3, 0.4)]

        return FrameResult(top(clip), top(tta), 0.5, 0, 9, 1, 1.0)

    h, s = History(), RunSummary()
    for i, (clip, tta, truth) in enumerate(((0, 0, "cat"), (1, 0, "cat"), (1, 1, None), (2, 1, "dog"))):
        h.update(result(clip, tta), truth)
        s.update(Frame(i, i / 5, np.zeros((2, 2, 3), np.uint8), "x"), result(clip, tta), truth)
    assert vars(h.tally) == vars(s.tally)
    t = h.tally
    assert t.processed == 4 and t.agree == 2 and h.agreement == 50.0
    assert t.switches == {"clip": 2, "tta": 1}  # CLIP 0->1->1->2, adapted 0->0->1->1
    assert t.labelled == 3 and t.correct == {"clip": 1, "tta": 3}  # cat/cat/dog
    assert [p.x for p in h.points] == [1, 2, 3, 4]  # x = processed frames, 1-based
    out = s.finish(__import__("app.sources", fromlist=["SourceStats"]).SourceStats(read=4, received=4))
    assert out["agreement"] == 50.0 and out["accuracy_tta"] == 100.0 and out["accuracy_clip"] == round(100 / 3, 2)
    h.clear()
    assert h.processed == 0 and not h.points and h.last is None


def _frame_result(i: int):
    from app.session import FrameResult, Scored

    top = [Scored("cat", 0, 0.7), Scored("dog", 1, 0.3)]
    return FrameResult(top, top, 0.1, 0, 0, i, 1.0)


def test_a_sessions_downloads_are_whole_files_and_go_with_the_session(tmp_path):
    """A run's MP4 and JSONL (written with the headless sinks) appear whole when it finishes; the next
    finished run replaces them; closing the session removes its folder."""
    import json

    import av
    import numpy as np

    from app.pipeline import Step
    from app.sources import Frame
    from app.ui.recording import Downloads

    ui = UISession()
    ui.downloads = Downloads(tmp_path)
    rec = ui.downloads.start("my clip (1).mp4", fps=5.0)
    for i in range(7):
        image = np.full((48, 64, 3), i * 30, np.uint8)
        rec.write(Step(Frame(i * 6, i / 5, image, "x"), _frame_result(i), "cat", None, i + 1))
    assert all(p.name.startswith(".") for p in rec.folder.iterdir()), "only hidden temp files yet"
    files = ui.downloads.finish(rec)
    assert [p.rsplit("/", 1)[1] for p in files] == ["my_clip_1-annotated.mp4", "my_clip_1-predictions.jsonl"]
    rows = [json.loads(line) for line in open(files[1], encoding="utf-8")]
    assert [r["frame"] for r in rows] == [0, 6, 12, 18, 24, 30, 36] and rows[3]["bank_size"] == 3
    with av.open(files[0]) as container:
        assert sum(1 for _ in container.decode(video=0)) == 7
    nxt = ui.downloads.start("next.mp4", fps=5.0)
    nxt.write(Step(Frame(0, 0.0, image, "x"), _frame_result(0), None, None, 1))
    assert all(__import__("os").path.exists(p) for p in files), "offered until the next run has its own"
    ui.downloads.finish(nxt)
    assert ui.downloads.files != files, "the next finished run is offered"
    ui.downloads.finish(ui.downloads.start("third.mp4", fps=5.0))
    assert ui.downloads.files != files
    folder = ui.downloads.folder
    ui.close()
    assert not folder.exists(), "the session's files go with it"


def test_two_overlapping_runs_of_one_session_never_share_a_file(tmp_path):
    """Two runs of one session written at once (a second video while the first runs): each run's
    files hold its own frames only, row for row, even with the same video name."""
    import json

    import numpy as np

    from app.pipeline import Step
    from app.sources import Frame
    from app.ui.recording import Downloads

    downloads = Downloads(tmp_path)
    first, second = downloads.start("clip.mp4", fps=5.0), downloads.start("clip.mp4", fps=5.0)
    image = np.zeros((16, 16, 3), np.uint8)
    for i in range(4):  # interleaved, as two runs' frames arrive
        first.write(Step(Frame(100 + i, i / 5, image, "x"), _frame_result(i), None, None, i + 1))
        second.write(Step(Frame(i, i / 5, image, "x"), _frame_result(i), None, None, i + 1))
    second_files = downloads.finish(second)
    first_files = downloads.finish(first)
    assert set(first_files).isdisjoint(second_files)
    frames = [[json.loads(line)["frame"] for line in open(f[1], encoding="utf-8")] for f in (first_files, second_files)]
    assert frames == [[100, 101, 102, 103], [0, 1, 2, 3]]
    assert downloads.files == second_files, "the session offers the newer run, whichever ended last"
    third = downloads.start("clip.mp4", fps=5.0)
    third.write(Step(Frame(0, 0.0, image, "x"), _frame_result(0), None, None, 1))
    downloads.finish(third)
    assert not any(__import__("os").path.exists(p) for p in first_files), "older runs' files go"


@pytest.mark.parametrize("views_on", ["cpu", "device"])
def test_every_session_makes_its_views_where_the_demo_was_told(tiny_clip, views_on):
    """`mstta-demo --views 3 --views-on ...` in the UI: each new stream's encoder makes its views there."""
    from app.ui.context import Context

    ctx = Context(
        clip=tiny_clip,
        base=EngineConfig(bank_size=64),
        slots=ModelSlots(1),
        sessions=Sessions(2),
        views=3,
        views_on=views_on,
    )
    enc = ctx.new_stream(Settings(("cat", "dog"), None, "ms-tta", EngineConfig(bank_size=64))).encoder
    assert (enc.views, enc.views_on) == (3, views_on)


def test_an_api_webcam_run_ends_on_the_servers_clock_and_its_page_is_shown_once(tiny_clip):
    """No page timer: `sweep` (the server's clock) ends an idle webcam run, finishing its downloads;
    the page's timer (or Stop) then gets that run's summary once, and a new run never shows it."""
    import io

    from PIL import Image

    from app.ui import handlers
    from app.ui.context import Context

    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (120, 30, 30)).save(buf, "PNG")
    form = {
        "image": buf.getvalue(),
        "keep": False,
        "labels": "cat\ndog",
        "template": "",
        "method": "ms-tta",
        "k": 2,
        "alpha": 0.8,
        "lam": 1.0,
        "capacity": 3,
        "bank": 64,
        "race": [],
    }
    ctx = Context(
        clip=tiny_clip, base=EngineConfig(bank_size=64), slots=ModelSlots(1), sessions=Sessions(4), webcam_end=0.0
    )
    ui = UISession()
    ctx.sessions.touch(ui, "api")
    for _ in range(3):
        handlers.process_frame(ctx, ui, form)
    assert ui.source == "webcam" and ui.webcam_recording is not None
    assert handlers.sweep(ctx) == 1 and handlers.sweep(ctx) == 0
    assert ui.webcam_recording is None and len(ui.downloads.files) == 2
    page = handlers.webcam_tick(ctx, ui)
    assert page["status"].startswith("Webcam ended") and handlers.webcam_tick(ctx, ui) is None
    handlers.process_frame(ctx, ui, form)  # a new run
    assert (
        ui.source == "webcam"
        and ui.webcam_frames == 1
        and handlers.webcam_stop(ctx, ui)["status"].startswith("Webcam stopped")
    )  # its own summary, not the run before's


def test_a_session_is_busy_only_while_it_handles_an_event():
    ui = UISession()
    ui.webcam_last = time.monotonic()  # a frame a moment ago: idle between frames
    assert not ui.busy
    with ui.handling():
        assert ui.busy
    assert not ui.busy
    ui.runs = 1
    assert ui.busy


def test_a_rows_marks_follow_its_summary_in_the_method_list():
    """The method list's note carries a row's marks (DPE is not training-free), the others none."""
    from app.ui.handlers import method_info
    from mstta.engine.methods import get_method, list_methods

    for name in list_methods():
        summary, _ = method_info(name)
        m = get_method(name)
        assert summary.startswith(m.summary) and all(f"[{mark}]" in summary for mark in m.marks)
    assert "[not training-free]" in method_info("dpe")[0] and "[" not in method_info("tda")[0]
