"""The browser UI's server, launched on loopback and driven with gradio_client (no browser).

Generated videos, the random-weight `mstta-tiny` model; each client is its own browser session.
"""

from __future__ import annotations

import argparse
import socket
import threading
import time
import urllib.error
import urllib.request
from types import SimpleNamespace

import pytest
from helpers_ui import (
    EMPTY_UI_SCRIPT,
    LABELS,
    SETTINGS,
    UIProcess,
    bar_values,
    client,
    fake_frame,
    frame_args,
    launched,
    named,
    series_points,
    settings_args,
    upload,
    video_args,
    write_truth,
)
from helpers_video import tiny_clip, write_labels, write_video

from mstta.errors import UserError

OTHER_LABELS = ["cat", "dog", "bird", "fish"]


@pytest.fixture(scope="module")
def app():
    """One app for the module: labels preloaded, every processed frame and its plots sent to the page."""
    from app.ui import build_app

    demo = build_app(tiny_clip(), labels=LABELS, update_interval=0, offer_demo_clip=False)
    with launched(demo) as url:
        yield SimpleNamespace(demo=demo, url=url)


@pytest.fixture
def app_url(app):
    return app.url


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    return write_video(tmp_path_factory.mktemp("ui") / "clip.avi", n=24, size=(96, 64))


def run_video(c, *args):
    """Submit /process_video and collect every streamed output (by name)."""
    job = c.submit(*args, api_name="/process_video")
    job.result(timeout=120)
    return [named(o) for o in job.outputs()]


def last_result(c, video, keep: bool = False) -> dict:
    return run_video(c, *video_args(video, every=2, keep=keep))[-1]


def test_video_streams_per_frame_results(app_url, video, tmp_path):
    c = client(app_url)
    truth = write_truth(tmp_path / "truth.csv", n=24)
    outs = run_video(c, *video_args(video, truth=truth, every=2))
    frames = [o["result"]["frame"] for o in outs[:-1]]
    assert frames == list(range(0, 24, 2)), "one update per processed frame, in order"
    for o in outs[:-1]:
        r = o["result"]
        assert {s["label"] for s in r["clip_topk"] + r["tta_topk"]} <= set(LABELS)
        assert len(r["clip_topk"]) == len(r["tta_topk"]) == 3
        assert r["method"] == "ms-tta"
        assert "Processing **clip.avi**" in o["status"]
        assert ("DISAGREE" in o["verdict"]) == r["disagree"]
        assert o["frame"] is not None, "the annotated frame"
    final = outs[-1]
    assert final["status"].startswith("Done: **clip.avi**, 12 frames processed"), final["status"]
    assert "agreement" in final["status"] and "switches CLIP" in final["status"], "the end-of-run summary"
    assert series_points(final["confidence"]) == {"CLIP zero-shot": 12, "MS-TTA": 12}
    assert series_points(final["agreement"]) == {"agreement": 12}
    assert series_points(final["switches"]) == {"CLIP zero-shot": 12, "MS-TTA": 12}
    assert list(bar_values(final["cache"])) == LABELS
    assert sum(bar_values(final["cache"]).values()) == final["result"]["cache_size"]
    assert series_points(final["accuracy"]) == {"CLIP zero-shot": 12, "MS-TTA": 12}
    assert list(bar_values(final["clip_topk"]))[0] == outs[-2]["result"]["clip_topk"][0]["label"]
    assert "**12 frames**" in final["stats"] and "accuracy" in final["leaderboard"]
    assert final["result"]["bank_rows"] == 12


def test_two_clients_at_once_keep_separate_adaptation(app, video):
    app_url = app.url
    a, b = client(app_url), client(app_url)
    results: dict[str, list] = {}

    def run(name, c, labels):
        results[name] = run_video(c, *video_args(video, labels, every=2))

    threads = [
        threading.Thread(target=run, args=("a", a, LABELS)),
        threading.Thread(target=run, args=("b", b, OTHER_LABELS)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    for name, labels in (("a", LABELS), ("b", OTHER_LABELS)):
        outs = results[name]
        seen = {s["label"] for o in outs[:-1] for s in o["result"]["clip_topk"] + o["result"]["tta_topk"]}
        assert seen <= set(labels), f"client {name} saw another session's classes: {seen - set(labels)}"
        assert list(bar_values(outs[-1]["cache"])) == labels
        assert outs[-1]["result"]["bank_rows"] == 12, "each engine saw its own 12 frames only"
    # with "keep adapting", a's adaptation continues on its next video; b's is untouched by it
    assert last_result(a, video, keep=True)["result"]["bank_rows"] == 24
    assert named(b.predict(api_name="/reset"))["status"].startswith("Adaptation state cleared")
    assert last_result(a, video, keep=True)["result"]["bank_rows"] == 36
    assert last_result(b, video, keep=True)["result"]["bank_rows"] == 12
    engines = [ui.stream.engine for ui in app.demo.mstta_context.sessions.live() if ui.stream is not None]
    assert len({id(e) for e in engines}) == len(engines) >= 2  # one engine per browser session, none shared


@pytest.mark.parametrize(
    "labels_text, message",
    [
        ("\n".join(f"class {i}" for i in range(1001)), "1001 class names; the UI takes at most 1000"),
        ("cat\ndog\ncat", "duplicate class name 'cat' on lines 1 and 3"),
        ("", "no class names found"),
        ("   \n# only a comment\n", "no class names found"),
        ("cat", "only one class name"),
    ],
)
def test_bad_labels_show_a_message_and_leave_the_session_alone(app_url, video, labels_text, message):
    c = client(app_url)
    assert last_result(c, video)["result"]["bank_rows"] == 12
    out = named(c.predict(*settings_args(labels_text), api_name="/apply_settings"))
    assert out["status"].startswith("⚠️") and message in out["status"], out["status"]
    outs = run_video(c, *video_args(video, [], every=2)[:5], labels_text, "", *SETTINGS)
    assert len(outs) == 1 and message in outs[0]["status"], "no frame processed with bad labels"
    again = last_result(c, video, keep=True)  # the good labels again: same classifier, the engine went on
    assert again["result"]["bank_rows"] == 24
    assert list(bar_values(again["cache"])) == LABELS


@pytest.mark.parametrize(
    "settings, message",
    [
        (["ms-tta", 2.5, 0.8, 1.0, 3, 4096], "⚠️ k (mean-shift neighbours): 2.5 is not a whole number"),
        (["ms-tta", 2, 1.5, 1.0, 3, 4096], "⚠️ α (mean-shift weight): 1.5 is out of range; enter a number from 0 to 1"),
        (["ms-tta", 2, 0.8, 100, 3, 4096], "⚠️ λ (cache weight): 100 is out of range"),  # refused, never clamped
        (["ms-tta", 2, 0.8, 1.0, 3, 0], "⚠️ Bank size (features): 0 is out of range"),
        (["ms-tta", 2, 0.8, 1.0, 3, -5], "⚠️ Bank size (features): -5 is out of range"),
        (
            ["ms-tta", 2, 0.8, 1.0, 3, 20000],
            "⚠️ Bank size (features): 20000 is out of range; enter a whole number from 1 to 16,384",
        ),  # the UI's per-session bound
        (["ms-tta", 2, 0.8, 1.0, 3, 10**9], "⚠️ Bank size (features): 1e+09 is out of range"),
        (["tda", "abc", 0.8, 1.0, 3, 4096], "⚠️ k (mean-shift neighbours): 'abc' is not a number"),
        (["tda", 2, "NaN", 1.0, 3, 4096], "⚠️ α (mean-shift weight): 'NaN' is not a finite number"),
        (["tda", 2, 0.8, None, 3, 4096], "⚠️ λ (cache weight): enter a number"),
        (["tda", 2, 0.8, 1.0, [3], 4096], "⚠️ Q (cache size per class): expected a number, got list"),
        (["tda", 16, 0.0, 0.0, 16, 16384], None),  # extreme but valid
    ],
)
def test_settings_are_checked_by_the_handler_and_name_the_control(app_url, settings, message):
    out = named(client(app_url).predict(*settings_args(settings=settings), api_name="/apply_settings"))
    if message is None:
        assert out["status"] == "Ready: 3 classes, TDA.", out["status"]
    else:
        assert out["status"].startswith(message), out["status"]


def test_a_method_not_among_the_choices_is_refused_in_one_line(app_url):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match="Method: .*no-such-method"):
        client(app_url).predict(
            *settings_args(settings=["no-such-method", 2, 0.8, 1.0, 3, 4096]), api_name="/apply_settings"
        )


def test_the_model_box_loads_only_what_its_list_offers(app, tmp_path):
    """Issue 32.1: a planted checkpoint, an uploaded one, /etc/passwd and a missing path are refused in
    the same words (nothing tells which paths exist), before anything is read; no model slot is taken."""
    from app.ui.models import NOT_OFFERED
    from mstta.features.models import bundled_checkpoint

    checkpoint = bundled_checkpoint("mstta-digits").read_bytes()
    planted = tmp_path / "planted.pt"
    planted.write_bytes(checkpoint)
    uploaded = upload(app.url, "uploaded.pt", checkpoint)
    ctx = app.demo.mstta_context
    before = ctx.models.loaded()
    c = client(app.url)
    for path in (str(planted), uploaded, "/etc/passwd", str(tmp_path / "missing.pt")):
        for value in (f"mstta-digits|{path}", path, f"mstta-digits ({path})"):
            out = named(
                c.predict(*settings_args(settings=[*SETTINGS[:-3], value, 1, SETTINGS[-1]]), api_name="/apply_settings")
            )
            assert out["status"] == f"⚠️ {NOT_OFFERED}", (value, out["status"])
    assert ctx.models.loaded() == before, "no model slot taken"
    assert "|" not in NOT_OFFERED and "pretrained" not in NOT_OFFERED


def test_bad_template_and_settings_changes(app_url, video):
    c = client(app_url)
    out = named(c.predict(*settings_args(template="a photo"), api_name="/apply_settings"))
    assert "Prompt template" in out["status"] and "{}" in out["status"]
    ready = named(c.predict(*settings_args(), api_name="/apply_settings"))
    assert ready["status"] == "Ready: 3 classes, MS-TTA."
    run_video(c, *video_args(video, every=2))
    same = named(c.predict(*settings_args(), api_name="/apply_settings"))  # Apply always starts over (docs/ui.md)
    assert same["status"] == "Same labels and settings: the adaptation started afresh (empty cache and bank)."
    assert set(series_points(same["confidence"]).values()) == {0} and set(bar_values(same["cache"]).values()) == {0}
    tda = ["tda", 3, 0.5, 2.0, 4, 64]
    changed = named(c.predict(*settings_args(settings=tda), api_name="/apply_settings"))
    assert changed["status"] == "New TDA settings: the adaptation started afresh."
    assert "TDA: top-3" in changed["tta_topk"]
    r = run_video(c, *video_args(video, every=2, settings=tda))[-1]["result"]  # the controls of a run win
    assert r["method"] == "tda" and r["cache_capacity"] == 3 * 4 and r["bank_rows"] == 0  # tda: no bank


def test_unreadable_video_and_bad_truth_give_messages(app_url, video, tmp_path):
    c = client(app_url)
    junk = tmp_path / "broken.mp4"
    junk.write_bytes(b"this is not a video at all" * 100)
    outs = run_video(c, *video_args(junk))
    assert len(outs) == 1
    status = outs[0]["status"]
    assert "'broken.mp4': not a video OpenCV can read" in status and "Traceback" not in status, status
    truth = tmp_path / "truth.csv"
    truth.write_text("0,10,zebra\n", encoding="utf-8")  # a class the labels lack: the run goes on, no accuracy
    outs = run_video(c, *video_args(video, truth=truth))
    assert "Accuracy off" in outs[0]["status"] and "'zebra'" in outs[0]["status"], outs[0]["status"]
    assert outs[-1]["status"].startswith("⚠️ Accuracy off") and "Done: **clip.avi**" in outs[-1]["status"]
    assert series_points(outs[-1]["accuracy"]) == {"CLIP zero-shot": 0, "MS-TTA": 0}
    truth.write_text("0,10,red circle\n5,12,blue triangle\n", encoding="utf-8")  # overlapping ranges
    outs = run_video(c, *video_args(video, truth=truth))
    assert "Ground truth: 'truth.csv': ranges on lines 1 and 2 overlap" in outs[0]["status"], outs[0]["status"]
    outs = run_video(c, *video_args(None))
    assert "No video yet" in outs[0]["status"]


def test_a_run_offers_its_annotated_mp4_and_jsonl_log(app_url, video, tmp_path):
    """The downloads, fetched over HTTP as the browser does: an H.264 MP4 with one frame per processed
    frame, and a JSONL log with one valid line per processed frame; a new run replaces them."""
    import json

    import av

    c = client(app_url)
    truth = write_truth(tmp_path / "truth.csv", n=24)
    outs = run_video(c, *video_args(video, truth=truth, every=2))
    assert outs[0]["downloads"] is None, "nothing to download while the run goes on"
    files = {f["orig_name"]: f for f in outs[-1]["downloads"]}
    assert set(files) == {"clip-annotated.mp4", "clip-predictions.jsonl"}, files
    fetched = {}
    for name, f in files.items():
        with urllib.request.urlopen(f["url"], timeout=30) as r:
            (tmp_path / name).write_bytes(r.read())
            fetched[name] = tmp_path / name
    with av.open(str(fetched["clip-annotated.mp4"])) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "h264", "browsers play H.264"
        decoded = sum(1 for _ in container.decode(stream))
    assert decoded == 12
    lines = fetched["clip-predictions.jsonl"].read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines]
    assert len(rows) == 12 and [r["frame"] for r in rows] == list(range(0, 24, 2))
    assert all(r["method"] == "ms-tta" and len(r["tta"]) == 3 and "truth" in r for r in rows)
    again = {f["orig_name"]: f for f in run_video(c, *video_args(video, every=3))[-1]["downloads"]}
    with urllib.request.urlopen(again["clip-predictions.jsonl"]["url"], timeout=30) as r:
        assert len(r.read().decode().splitlines()) == 8, "the new run's log: 24 frames, every 3rd"


def test_single_frames_go_through_the_webcam_handler(app_url, tmp_path):
    import cv2

    c = client(app_url)
    results = []
    for i in range(3):
        path = str(tmp_path / f"frame{i}.png")
        cv2.imwrite(path, cv2.cvtColor(fake_frame(i), cv2.COLOR_RGB2BGR))
        results.append(named(c.predict(*frame_args(path), api_name="/process_frame")))
    assert [r["result"]["frame"] for r in results] == [0, 1, 2]
    assert results[0]["status"] == "Webcam: frame 1 processed."  # a new session: nothing to empty
    assert results[-1]["status"] == "Webcam: frame 3 processed."
    assert results[-1]["result"]["bank_rows"] == 3
    assert series_points(results[-1]["confidence"]) == {"CLIP zero-shot": 3, "MS-TTA": 3}


def test_a_closed_session_lets_go_of_everything_it_held(app, video):
    """Issue 32.3: once a page closes (here: the client's heartbeat ends), neither our registry nor
    Gradio's state holds the session: its UISession (engine, history, strip thumbnails, last page)
    is garbage, not kept an hour as Gradio would."""
    import gc
    import weakref

    ctx, holder = app.demo.mstta_context, app.demo.state_holder
    c = client(app.url)
    run_video(c, *video_args(video, every=4))
    key = c.session_hash
    ui = next(u for u in ctx.sessions.live() if u.session_hash == key)
    ref = weakref.ref(ui)
    del ui
    c.close()
    deadline = time.monotonic() + 30
    while (key in holder.session_data or ref() is not None) and time.monotonic() < deadline:
        time.sleep(0.2)
        gc.collect()
    assert key not in holder.session_data, "Gradio still keeps the closed session's state"
    assert ref() is None, "the closed session's UISession is still referenced"


def test_a_new_source_starts_a_fresh_stream_unless_kept(app_url, video, tmp_path):
    import cv2

    c = client(app_url)
    assert last_result(c, video)["result"]["bank_rows"] == 12
    again = last_result(c, video)
    assert again["status"].startswith("Fresh stream: empty cache and bank.") and again["result"]["bank_rows"] == 12
    kept = last_result(c, video, keep=True)
    assert kept["status"].startswith("Kept adapting across sources") and kept["result"]["bank_rows"] == 24
    path = str(tmp_path / "frame.png")
    cv2.imwrite(path, cv2.cvtColor(fake_frame(0), cv2.COLOR_RGB2BGR))
    cam = named(c.predict(*frame_args(path), api_name="/process_frame"))  # switching source: fresh again
    assert cam["status"].startswith("Fresh stream") and cam["result"]["bank_rows"] == 1
    cam = named(c.predict(*frame_args(path, keep=True), api_name="/process_frame"))
    assert cam["status"] == "Webcam: frame 2 processed." and cam["result"]["bank_rows"] == 2


def test_reset_and_apply_after_a_run_empty_every_plot(app_url, video):
    c = client(app_url)
    done = last_result(c, video)
    assert sum(bar_values(done["cache"]).values()) > 0 and series_points(done["confidence"])["MS-TTA"] == 12
    for page in (
        named(c.predict(api_name="/reset")),
        named(c.predict(*settings_args(settings=["ms-tta", 3, 0.8, 1.0, 3, 4096]), api_name="/apply_settings")),
    ):
        assert set(bar_values(page["cache"]).values()) == {0.0}, page["cache"]
        for name in ("confidence", "agreement", "switches", "accuracy"):
            assert set(series_points(page[name]).values()) == {0}, (name, page[name])
        assert list(bar_values(page["clip_topk"])) == [] and page["stats"] == ""
        assert "No frame processed yet" in page["verdict"]


def test_truth_naming_other_classes_is_caught_at_apply(app_url, tmp_path):
    c = client(app_url)
    truth = write_truth(tmp_path / "truth.csv", n=30)
    out = named(c.predict(*settings_args(OTHER_LABELS, truth=truth), api_name="/apply_settings"))
    assert "missing from the labels: 'red circle', 'green square', 'blue triangle'" in out["status"], out["status"]
    assert "Drop the ground-truth file" in out["status"]
    ok = named(c.predict(*settings_args(LABELS, truth=truth), api_name="/apply_settings"))
    assert "missing" not in ok["status"], ok["status"]


def test_light_actions_answer_while_another_session_streams(tmp_path):
    """One model slot: session A streams a long video; B's Apply and Reset still come back before A ends
    (they wait at most for one of A's frames, never for A's whole run)."""
    from app.ui import build_app

    long_video = write_video(tmp_path / "long.avi", n=400, size=(32, 24))  # ~20 s: B's three actions take ~1
    demo = build_app(tiny_clip(), labels=LABELS, concurrency=1, offer_demo_clip=False)
    with launched(demo, concurrency=1) as url:
        a, b = client(url), client(url)
        named(b.predict(*settings_args(), api_name="/apply_settings"))
        job = a.submit(*video_args(long_video, every=1), api_name="/process_video")
        while not job.outputs() and not job.done():
            time.sleep(0.05)
        assert not job.done(), "A's run must still be going"
        events = []
        for args, api in (
            (settings_args(settings=["ms-tta", 3, 0.8, 1.0, 3, 4096]), "/apply_settings"),
            ((), "/reset"),
            (settings_args(OTHER_LABELS), "/apply_settings"),
        ):
            status = named(b.predict(*args, api_name=api))["status"]
            events.append((api, status, job.done()))
        job.result(timeout=300)
        final = named(job.outputs()[-1])
        assert final["status"].startswith("Done: **long.avi**, 400 frames processed"), final["status"]
        assert [done for _, _, done in events] == [False, False, False], events
        assert events[0][1].startswith("New MS-TTA settings") and events[1][1].startswith("Adaptation state cleared")
        assert events[2][1].startswith("New 4 classes"), events


def test_the_oldest_idle_session_is_dropped_beyond_the_cap(tmp_path):
    import cv2

    from app.ui import build_app

    demo = build_app(tiny_clip(), labels=LABELS, max_sessions=2, offer_demo_clip=False)
    path = str(tmp_path / "frame.png")
    cv2.imwrite(path, cv2.cvtColor(fake_frame(0), cv2.COLOR_RGB2BGR))
    with launched(demo) as url:
        a, b, c = client(url), client(url), client(url)
        for one in (a, b, c):
            assert named(one.predict(*settings_args(), api_name="/apply_settings"))["status"].startswith("Ready")
        sessions = demo.mstta_context.sessions
        assert len(sessions) == 2
        expired = named(a.predict(*frame_args(path), api_name="/process_frame"))
        assert "Session expired" in expired["status"] and "Press **Reset**" in expired["status"]
        assert named(b.predict(*frame_args(path), api_name="/process_frame"))["result"]["bank_rows"] == 1
        assert named(a.predict(api_name="/reset"))["status"].startswith("Adaptation state cleared")
        back = named(a.predict(*frame_args(path), api_name="/process_frame"))
        assert back["result"]["bank_rows"] == 1 and len(sessions) == 2


def test_upload_limit_and_only_the_demos_files_are_served(tmp_path):
    from app.ui import build_app
    from app.ui.serving import ASSETS_DIR

    demo = build_app(tiny_clip(), labels=LABELS, offer_demo_clip=False)
    with launched(demo, max_upload_mb=0.01) as url:
        big = write_video(tmp_path / "big.avi", n=60, size=(160, 120))
        assert big.stat().st_size > 0.01 * 1024 * 1024
        with pytest.raises(Exception, match="(?i)size|large|413"):
            client(url).predict(*video_args(big), api_name="/process_video")
        for path, allowed in (
            (ASSETS_DIR / "labels.txt", True),
            ("/etc/passwd", False),
            (ASSETS_DIR.parent / "pyproject.toml", False),
        ):
            try:
                with urllib.request.urlopen(f"{url}gradio_api/file={path}", timeout=10) as r:
                    status = r.status
            except urllib.error.HTTPError as exc:
                status = exc.code
            assert (status == 200) == allowed, (path, status)


# ---------------------------------------------------------------------------- the command line
def ui_args(**kw) -> argparse.Namespace:
    from app.cli import build_parser
    from app.ui import add_ui_arguments

    parser = add_ui_arguments(add_ui_arguments(build_parser()))  # adding twice is harmless
    argv = ["--labels", str(kw.pop("labels")), "--model", "mstta-tiny", "--pretrained", "none"]
    for key, value in kw.items():
        argv += [f"--{key.replace('_', '-')}"] + ([] if value is True else [str(value)])
    return parser.parse_args(argv)


def test_ui_flags_defaults(tmp_path):
    args = ui_args(labels=write_labels(tmp_path / "l.txt"))
    assert (args.host, args.port, args.share, args.concurrency) == ("127.0.0.1", 7860, False, 2)
    assert args.max_upload_mb > 0 and args.queue_size > 0


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"camera": 0}, "--camera is for --headless runs"),
        ({"out": "x.mp4"}, "--out is for --headless runs"),
        ({"concurrency": 0}, "--concurrency 0: expected a whole number from 1 to 64"),
        ({"max_sessions": 0}, "--max-sessions 0: expected a whole number from 1 to 1000"),
        ({"session_ttl": 1}, "--session-ttl 1.0: expected a number from 10 to 86400"),
        ({"bank_size": 20000}, "--bank-size 20000: the browser UI keeps at most 16,384 features per session"),
        ({"video": "/no/such/clip.mp4"}, "no such file or folder"),
        ({"truth": "/no/such/truth.csv"}, "no such file"),
    ],
)
def test_run_ui_rejects_bad_flags_before_loading_the_model(tmp_path, extra, message):
    from app.ui import run_ui

    with pytest.raises(UserError, match=message.replace("(", r"\(")):
        run_ui(ui_args(labels=write_labels(tmp_path / "l.txt"), **extra))


def test_run_ui_busy_port_is_a_clear_error(tmp_path):
    from app.ui import run_ui

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        with pytest.raises(UserError, match=f"--port {port}: already in use on 127.0.0.1; .*0 picks a free one"):
            run_ui(ui_args(labels=write_labels(tmp_path / "l.txt"), port=port))


def test_mstta_demo_ui_process_prints_its_url_and_serves(tmp_path):
    """The UI as `mstta-demo` starts it: model loaded once, loopback, URL on one line, SIGTERM stops it."""
    labels = write_labels(tmp_path / "labels.txt")
    video = write_video(tmp_path / "clip.avi", n=12, size=(96, 64))
    ui = UIProcess(
        [
            "--labels",
            str(labels),
            "--video",
            str(video),
            "--model",
            "mstta-tiny",
            "--pretrained",
            "none",
            "--port",
            "0",
            "--every",
            "3",
        ],
        gradio_tmp=tmp_path / "gradio",
    )
    try:
        assert ui.url.startswith("http://127.0.0.1:"), ui.url
        assert sum("UI running at" in line for line in ui.stdout) == 1
        outs = run_video(client(ui.url), *video_args(video, every=3))
        assert outs[-1]["status"].startswith("Done: **clip.avi**, 4 frames processed"), outs[-1]["status"]
    finally:
        code = ui.stop()
    assert code == 0, ui.log()
    assert "Traceback" not in ui.log(), ui.log()


def test_the_ui_can_start_empty(tmp_path):
    """`mstta-demo` with no labels and no video: a page that asks for both, then works."""
    ui = UIProcess([], script=EMPTY_UI_SCRIPT, gradio_tmp=tmp_path / "gradio")
    try:
        c = client(ui.url)
        assert "No video yet" in run_video(c, *video_args(None, []))[0]["status"]
        assert "no class names found" in named(c.predict(*settings_args(""), api_name="/apply_settings"))["status"]
        video = write_video(tmp_path / "clip.avi", n=6, size=(96, 64))
        assert run_video(c, *video_args(video))[-1]["status"].startswith("Done: **clip.avi**, 6 frames processed")
    finally:
        assert ui.stop() == 0, ui.log()


def test_the_page_shows_the_view_count_and_the_per_frame_cost(tmp_path):
    """`--views N` > 1: the title and the numbers under the charts say how many views each frame is
    and what a frame costs; with one view only the cost."""
    import urllib.request as request

    import cv2

    from app.ui import build_app

    frame = tmp_path / "frame.png"
    cv2.imwrite(str(frame), cv2.cvtColor(fake_frame(0), cv2.COLOR_RGB2BGR))
    for views in (1, 4):
        demo = build_app(tiny_clip(), labels=LABELS, views=views, offer_demo_clip=False)
        with launched(demo) as url:
            settings = [*SETTINGS[:-2], views, SETTINGS[-1]]  # the form's views box holds the server's --views
            out = named(client(url).predict(*frame_args(frame, settings=settings), api_name="/process_frame"))
            with request.urlopen(f"{url}config", timeout=30) as r:
                config = r.read().decode()
        cost = f"{out['result']['latency_ms']:.1f} ms per frame"
        if views == 1:
            assert f"{cost} (encoder + 1 step" in out["stats"] and "views" not in out["stats"], out["stats"]
            assert "views per frame" not in config
        else:
            assert f"{cost} (encoder on 4 views + 1 step" in out["stats"], out["stats"]
            assert "4 views per frame" in config, "the title says it too"
