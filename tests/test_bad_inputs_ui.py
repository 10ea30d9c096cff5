"""Hostile and careless requests against the browser UI's server (issue 12, part 4), as raw HTTP.

One `mstta-demo` UI process on 127.0.0.1 (random-weight `mstta-tiny`, `--max-sessions 4`,
`--session-ttl 10`); every case sends a bounded number of requests to Gradio's public REST routes
(`/gradio_api/upload`, `/gradio_api/call/<api>`), with no browser and no session cookie, as an
anonymous client would. Each case checks the answer, that the server's peak memory (VmHWM in
/proc/<pid>/status) grew by less than a bound, and that a refusal left one server line and no
traceback. The table is the regression suite: CASES lists what it tries.
"""

from __future__ import annotations

import base64
import io
import json
import re
import struct
import time
import urllib.error
import urllib.request
import uuid
import zlib
from pathlib import Path

import pytest
from helpers_ui import LABELS, SETTINGS, UIProcess, upload
from helpers_video import write_labels

pytestmark = pytest.mark.slow

MAX_SESSIONS = 4
GROWTH_MB = 150  # a refused bomb must not cost the server more than this (they would cost 0.4-1.2 GB)


# ---------------------------------------------------------------------------- crafted inputs
def png_bomb(width: int, height: int, bit_depth: int = 8) -> bytes:
    """A valid grayscale PNG of width x height zeros, compressed as it is streamed (never held whole)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    row = b"\x00" * (1 + (width * bit_depth + 7) // 8)  # filter byte + packed pixels
    z, parts = zlib.compressobj(9), []
    for _ in range(height // 100):
        parts.append(z.compress(row * 100))
    parts.append(z.compress(row * (height % 100)) + z.flush())
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", b"".join(parts)) + chunk(b"IEND", b"")


def jpeg_declaring(width: int, height: int) -> bytes:
    """A small JPEG (an MJPEG frame) whose header declares width x height."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (90, 120, 200)).save(buf, "JPEG")
    data = bytearray(buf.getvalue())
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def small_png(width: int = 96, height: int = 64) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (width, height), (200, 60, 60)).save(buf, "PNG")
    return buf.getvalue()


# ---------------------------------------------------------------------------- raw HTTP
def file_data(path: str, name: str) -> dict:
    return {"path": path, "orig_name": name, "meta": {"_type": "gradio.FileData"}}


def call(url: str, api: str, data: list, session_hash: str | None = None) -> tuple[str, object]:
    """One anonymous call of a named endpoint: ("complete", outputs) or ("error", message)."""
    body = {"data": data} | ({"session_hash": session_hash} if session_hash else {})
    req = urllib.request.Request(
        f"{url}gradio_api/call/{api}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        event_id = json.loads(r.read())["event_id"]
    with urllib.request.urlopen(f"{url}gradio_api/call/{api}/{event_id}", timeout=120) as r:
        text = r.read().decode()
    events = re.findall(r"event: (\w+)\ndata: (.*)", text)
    kind, payload = events[-1]
    return kind, json.loads(payload) if payload and payload != "null" else None


def frame_call(url: str, image: dict | None) -> tuple[str, object]:
    return call(url, "process_frame", [image, False, "\n".join(LABELS), "", *SETTINGS])


def status_of(outputs) -> str:
    return outputs[0] if isinstance(outputs, list) else str(outputs)


def peak_mb(pid: int) -> float:
    """The process's peak resident memory (VmHWM) in MB."""
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", text).group(1)) / 1024


# ---------------------------------------------------------------------------- the server
@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad-inputs-ui")
    labels = write_labels(root / "labels.txt")
    ui = UIProcess(
        [
            "--labels",
            str(labels),
            "--model",
            "mstta-tiny",
            "--pretrained",
            "none",
            "--port",
            "0",
            "--max-sessions",
            str(MAX_SESSIONS),
            "--session-ttl",
            "10",
            "--max-upload-mb",
            "5",
            "-v",
        ],
        gradio_tmp=root / "gradio",
    )
    status, outputs = frame_call(ui.url, file_data(upload(ui.url, "warm.png", small_png()), "warm.png"))
    assert status == "complete" and "Webcam: frame 1 processed" in status_of(outputs), outputs  # warmed up
    yield ui
    assert ui.stop() == 0, ui.log()
    assert "Traceback" not in ui.log(), ui.log()


def refused_lines(ui: UIProcess) -> int:
    return sum("refused" in line for line in ui.stderr)


# Frames sent to /process_frame (the webcam's per-frame handler for API clients).
BOMBS = {
    "png_10000x10000_gray": lambda: png_bomb(10_000, 10_000),  # ~100 KB, 100 MP (300 MB as RGB)
    "png_20000x20000_1bit": lambda: png_bomb(20_000, 20_000, 1),  # ~50 KB, 400 MP (1.2 GB as RGB)
    "mjpeg_frame_8000x8000": lambda: jpeg_declaring(8_000, 8_000),  # 64 MP (192 MB as RGB)
}

CASES = [
    *(f"upload:{n}" for n in BOMBS),
    *(f"inline:{n}" for n in BOMBS),
    "garbage_bytes",
    "empty_file",
    "upload_above_max_upload_mb",
    "large_but_allowed_3000x3000",
    "inline_not_base64",
    "apply_bank_65536_x40",
    "apply_valid_x40_capped",
    "expired_session_told_to_reset",
    "video_declaring_5000x4000",
    "bank_bound_in_the_control",
    "state_freed_after_ttl",
]


@pytest.mark.parametrize("name", list(BOMBS))
def test_decompression_bombs_are_refused_from_their_header(server, name):
    data = BOMBS[name]()
    for how in ("upload", "inline"):
        before, lines = peak_mb(server.proc.pid), refused_lines(server)
        if how == "upload":
            image = file_data(upload(server.url, f"{name}.png", data), f"{name}.png")
        else:  # how the browser's webcam sends a frame: a data: URL in the request
            image = {
                "url": "data:image/png;base64," + base64.b64encode(data).decode(),
                "path": None,
                "meta": {"_type": "gradio.FileData"},
            }
        status, outputs = frame_call(server.url, image)
        assert status == "complete", (how, outputs)
        text = status_of(outputs)
        assert "pixels, above the limit of 16,777,216" in text and "--max-pixels" in text, (how, text)
        assert peak_mb(server.proc.pid) - before < GROWTH_MB, f"{how} {name}: peak memory grew"
        assert refused_lines(server) == lines + 1, "one server line per refusal"


@pytest.mark.parametrize(
    "name, data, message",
    [
        ("garbage_bytes", b"this is not an image" * 50, "not a readable image"),
        ("empty_file", b"", "not a readable image"),
    ],
)
def test_unreadable_frames_get_one_line(server, name, data, message):
    status, outputs = frame_call(server.url, file_data(upload(server.url, f"{name}.png", data), f"{name}.png"))
    assert status == "complete" and message in status_of(outputs), outputs


def test_an_upload_above_the_size_limit_is_refused(server):
    import urllib.error

    before = peak_mb(server.proc.pid)
    with pytest.raises(urllib.error.HTTPError) as caught:
        upload(server.url, "big.bin", b"\0" * (6 * 1024 * 1024))  # --max-upload-mb 5
    assert caught.value.code == 413
    assert peak_mb(server.proc.pid) - before < GROWTH_MB
    assert "Traceback" not in server.log()


def test_a_large_frame_within_the_limit_is_scaled_down_and_processed(server):
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (3000, 3000), (30, 160, 60)).save(buf, "PNG")
    before = peak_mb(server.proc.pid)
    status, outputs = frame_call(server.url, file_data(upload(server.url, "big.png", buf.getvalue()), "big.png"))
    assert status == "complete" and "Webcam: frame 1 processed" in status_of(outputs), outputs
    assert peak_mb(server.proc.pid) - before < GROWTH_MB


def test_inline_frames_must_be_base64(server):
    image = {"url": "data:image/png,<svg>not base64</svg>", "path": None, "meta": {"_type": "gradio.FileData"}}
    status, message = frame_call(server.url, image)
    assert status == "error", message
    assert "Traceback" not in server.log()


def test_anonymous_sessions_cannot_pile_up_engines(server):
    # a bank above the UI's bound is refused before any engine exists
    before = peak_mb(server.proc.pid)
    big = ["ms-tta", 2, 0.8, 1.0, 3, 65536, [], "", 1, "off"]
    for _ in range(40):
        status, outputs = call(server.url, "apply_settings", [None, "\n".join(LABELS), "", *big])
        assert status == "complete" and "Bank size (features): 65536 is out of range" in status_of(outputs), outputs
    # valid anonymous calls: each is a new session; at most MAX_SESSIONS keep an engine
    dropped_before = sum("session dropped" in line for line in server.stderr)
    for _ in range(40):
        status, outputs = call(server.url, "apply_settings", [None, "\n".join(LABELS), "", *SETTINGS])
        assert status == "complete" and status_of(outputs).startswith("Ready: 3 classes"), outputs
    dropped = sum("session dropped" in line for line in server.stderr) - dropped_before
    assert dropped >= 40 - MAX_SESSIONS, f"only {dropped} of 40 anonymous sessions were dropped"
    assert peak_mb(server.proc.pid) - before < GROWTH_MB


def test_a_dropped_session_is_told_to_press_reset(tmp_path):
    """In-process, so the sessions can be counted: the oldest idle one goes, and says so."""
    from helpers_ui import client, frame_args, launched, named, settings_args
    from helpers_video import tiny_clip

    from app.ui import build_app

    path = tmp_path / "f.png"
    path.write_bytes(small_png())
    demo = build_app(tiny_clip(), labels=LABELS, max_sessions=1, offer_demo_clip=False)
    with launched(demo) as url:
        a, b = client(url), client(url)
        named(a.predict(*settings_args(), api_name="/apply_settings"))
        named(b.predict(*settings_args(), api_name="/apply_settings"))
        out = named(a.predict(*frame_args(path), api_name="/process_frame"))
        assert out["status"].startswith("⚠️ Session expired") and "Press **Reset**" in out["status"]
        assert len(demo.mstta_context.sessions) == 1


def test_a_video_declaring_frames_above_the_limit_is_refused(server, tmp_path):
    import cv2
    import numpy as np

    path = tmp_path / "huge.avi"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 5, (5000, 4000))
    for _ in range(2):
        writer.write(np.zeros((4000, 5000, 3), np.uint8))
    writer.release()
    before = peak_mb(server.proc.pid)
    video = file_data(upload(server.url, "huge.avi", path.read_bytes()), "huge.avi")
    status, outputs = call(
        server.url, "process_video", [video, None, 1, False, False, "\n".join(LABELS), "", *SETTINGS]
    )
    assert status == "complete" and "5000x4000" in status_of(outputs) and "above the limit" in status_of(outputs), (
        outputs
    )
    assert peak_mb(server.proc.pid) - before < GROWTH_MB


def test_the_bank_bound_is_said_in_the_control(server):
    with urllib.request.urlopen(f"{server.url}config", timeout=30) as r:
        config = r.read().decode()
    assert "Bank size (features; at most 16,384 per session)" in config


def test_an_anonymous_sessions_state_is_freed_after_its_time_to_live(server):
    mine = f"ttl-{uuid.uuid4().hex}"
    status, _ = call(server.url, "apply_settings", [None, "\n".join(LABELS), "", *SETTINGS], session_hash=mine)
    assert status == "complete"
    freed = lambda: any(f"session {mine} freed" in line for line in server.stderr)
    assert not freed(), "freed as its call ended, not after its time to live"
    deadline = time.monotonic() + 30  # a watchdog: --session-ttl 10, checked every second by Gradio
    while not freed() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert freed(), "not freed after its time to live"


# ---------------------------------------------------------------------------- Gradio-level requests (issue 18)
L = "\n".join(LABELS)
REPO_FILE = str(Path(__file__).resolve().parent.parent / "app" / "cli.py")


def apply_with(
    *,
    truth=None,
    labels=L,
    template="",
    method="ms-tta",
    k=2,
    alpha=0.8,
    lam=1.0,
    q=3,
    bank=4096,
    race=(),
    model="",
    views=1,
    forget="off",
):
    return [truth, labels, template, method, k, alpha, lam, q, bank, list(race), model, views, forget]


# name -> (endpoint, data, what the client is told: "status" (a page whose status says it) or "error")
GRADIO_CASES = {
    "arity_too_few": (
        "apply_settings",
        [None, L],
        "error",
        "expected 13 input values (truth, labels, template, method, k, alpha, lam, capacity, bank, race, model, views, "
        "forget)",
    ),
    "arity_too_many": ("apply_settings", apply_with() + [1, 2], "error", "expected 13 input values"),
    "arity_none": ("process_frame", [], "error", "expected 14 input values (image, keep, labels"),
    "race_five": (
        "apply_settings",
        apply_with(race=["tda", "zero-shot", "tda+ms", "baseline"]),
        "status",
        "at most 3 race beside the method",
    ),
    "race_unknown": ("apply_settings", apply_with(race=["no-such"]), "error", "Race against"),
    "race_not_a_list": ("apply_settings", apply_with(race=[3]), "error", "Race against"),
    "k_abc": ("apply_settings", apply_with(k="abc"), "status", "k (mean-shift neighbours): 'abc' is not a number"),
    "k_float": ("apply_settings", apply_with(k=1.5), "status", "k (mean-shift neighbours): 1.5 is not a whole"),
    "k_huge_int": ("apply_settings", apply_with(k=10**400), "status", "k (mean-shift neighbours)"),
    "alpha_NaN": ("apply_settings", apply_with(alpha="NaN"), "status", "α (mean-shift weight): 'NaN' is not a finite"),
    "alpha_bool": ("apply_settings", apply_with(alpha=True), "status", "α (mean-shift weight): expected a number"),
    "lam_null": ("apply_settings", apply_with(lam=None), "status", "λ (cache weight): enter a number"),
    "lam_100": ("apply_settings", apply_with(lam=100), "status", "λ (cache weight): 100 is out of range"),
    "q_list": ("apply_settings", apply_with(q=[3]), "status", "Q (cache size per class): expected a number, got list"),
    "q_object": ("apply_settings", apply_with(q={"v": 3}), "status", "Q (cache size per class): expected a number"),
    "bank_0": ("apply_settings", apply_with(bank=0), "status", "Bank size (features): 0 is out of range"),
    "bank_minus_5": ("apply_settings", apply_with(bank=-5), "status", "Bank size (features): -5 is out of range"),
    "bank_20000": ("apply_settings", apply_with(bank=20000), "status", "Bank size (features): 20000 is out of range"),
    "labels_number": ("apply_settings", apply_with(labels=5), "status", "Labels"),
    "labels_list": ("apply_settings", apply_with(labels=["a", "b"]), "status", "Labels: only one class name"),
    "method_unknown": ("apply_settings", apply_with(method="nope"), "error", "Method"),
    "method_list": ("apply_settings", apply_with(method=["ms-tta"]), "status", "Method: expected text, got list"),
    "file_etc_passwd": (
        "apply_settings",
        apply_with(truth=file_data("/etc/passwd", "passwd")),
        "error",
        "/etc/passwd was not uploaded here",
    ),
    "file_dotdot_hostname": (
        "apply_settings",
        apply_with(truth=file_data("../../etc/hostname", "hostname")),
        "error",
        "was not uploaded here",
    ),
    "file_project_source": (
        "process_video",
        [file_data(REPO_FILE, "cli.py"), None, 1, False, False, L, "", *SETTINGS],
        "error",
        "cli.py was not uploaded here",
    ),
    "file_not_filedata": ("apply_settings", apply_with(truth={"path": 3}), "error", "a file input must be a FileData"),
    "file_a_string": ("apply_settings", apply_with(truth="/etc/passwd"), "error", "a file input must be a FileData"),
    "frame_etc_shadow": (
        "process_frame",
        [file_data("/etc/shadow", "x.png"), False, L, "", *SETTINGS],
        "error",
        "was not uploaded here",
    ),
}
HTTP_CASES = ["unknown_api_name", "bogus_event_id", "dropped_upload", "json_not_json", "data_not_a_list"]
CSV_CASES = ["truth_field_200kb", "truth_field_5kb", "truth_nul_bytes", "truth_binary"]


@pytest.mark.parametrize("name", list(GRADIO_CASES))
def test_gradio_level_bad_requests_are_one_line_and_a_clear_message(server, name):
    api, data, kind, message = GRADIO_CASES[name]
    lines, before = refused_lines(server), len(server.stderr)
    status, outputs = call(server.url, api, data)
    if kind == "status":  # reached the handler: a page whose status names the control
        assert status == "complete" and status_of(outputs).startswith("⚠️") and message in status_of(outputs), outputs
    else:  # refused before the handler: the client gets the one line as its error
        assert status == "error" and message in str(outputs.get("error")), outputs
    time.sleep(0.3)
    assert refused_lines(server) == lines + 1, f"one server line per refusal: {server.stderr[before:]}"
    assert not any("Traceback" in line or line.startswith("  File ") for line in server.stderr[before:])


def raw(url: str, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    req = urllib.request.Request(f"{url}{path}", data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def dropped_upload(url: str) -> tuple[int, str]:
    """A multipart upload announcing 1 MB, cut off after 5 KB (the client goes away)."""
    import socket

    host, port = url.split("//")[1].rstrip("/").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(
            b"POST /gradio_api/upload HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=XX"
            b'\r\nContent-Length: 1000000\r\n\r\n--XX\r\nContent-Disposition: form-data; name="files"; '
            b'filename="a.png"\r\n\r\n' + b"x" * 5000
        )
    return 0, "dropped"


@pytest.mark.parametrize("name", HTTP_CASES)
def test_http_level_bad_requests_answer_and_log_without_traceback(server, name):
    before = len(server.stderr)
    if name == "unknown_api_name":
        code, text = raw(
            server.url, "POST", "gradio_api/call/no_such_api", b'{"data": []}', {"Content-Type": "application/json"}
        )
        assert code == 404 and "no such API endpoint" in text, (code, text)
    elif name == "bogus_event_id":
        code, text = raw(server.url, "GET", "gradio_api/call/apply_settings/not-an-event")
        assert "event: error" in text or code == 404, (code, text)
    elif name == "dropped_upload":
        dropped_upload(server.url)
    elif name == "json_not_json":
        code, _ = raw(server.url, "POST", "gradio_api/call/reset", b"{not json", {"Content-Type": "application/json"})
        assert code == 422
    else:
        code, _ = raw(server.url, "POST", "gradio_api/call/reset", b'{"data": 5}', {"Content-Type": "application/json"})
        assert code == 422
    time.sleep(0.5)
    new = server.stderr[before:]
    assert not any("Traceback" in line or line.startswith("  File ") or line.startswith("ERROR") for line in new), new
    assert len([line for line in new if "Warning" not in line and "pd." not in line]) <= 1, new
    status, outputs = frame_call(server.url, file_data(upload(server.url, "ok.png", small_png()), "ok.png"))
    assert status == "complete", "the server still serves"


@pytest.mark.parametrize("name", CSV_CASES)
def test_bad_truth_files_are_one_line_never_internal_error(server, name):
    data = {
        "truth_field_200kb": b"0,10," + b"a" * 200_000 + b"\n",  # over the csv module's 131,072 limit
        "truth_field_5kb": b"0,10," + b"a" * 5_000 + b"\n",  # within it, but no class name is that long
        "truth_nul_bytes": b"0,10,red\x00circle\n",
        "truth_binary": bytes(range(256)) * 20,
    }[name]
    truth = file_data(upload(server.url, f"{name}.csv", data), f"{name}.csv")
    lines = refused_lines(server)
    status, outputs = call(server.url, "apply_settings", apply_with(truth=truth))
    text = status_of(outputs)
    assert status == "complete" and text.startswith("⚠️") and "Internal error" not in text, text
    assert "Ground truth" in text or "ground-truth" in text, text
    assert refused_lines(server) == lines + 1 or "missing from the labels" in text


# ------------------------------------------------------------------------ file data Gradio would register (issue 25)
def test_file_data_naming_a_folder_or_a_wrong_type_is_refused_before_gradio_registers_it(capfd):
    """In-process, so Gradio's temp-file sets can be read: a refused path is never registered (a
    registered folder stops Gradio's periodic cleanup for good), and the log holds no traceback."""
    from gradio.route_utils import delete_files_created_by_app
    from helpers_ui import launched
    from helpers_video import tiny_clip

    from app.ui import build_app

    demo = build_app(tiny_clip(), labels=LABELS, offer_demo_clip=False)
    with launched(demo) as url:
        uploaded = upload(url, "f.png", small_png())  # a real upload: its folder is Gradio's
        cases = {
            "folder": (file_data(str(Path(uploaded).parent), "clip.mp4"), "is a folder"),
            "extension": (file_data(uploaded, "f.png"), "not one of the accepted file types"),
        }
        for name, (data, message) in cases.items():
            status, outputs = call(url, "process_video", [data, None, 1, False, False, L, "", *SETTINGS])
            assert status == "error" and message in str(outputs.get("error")), (name, outputs)
        registered = [f for files in demo.temp_file_sets for f in files]
        assert not [f for f in registered if Path(f).is_dir()], registered
        delete_files_created_by_app(demo, age=None)  # Gradio's cleanup runs through
        assert not Path(uploaded).exists()
    err = capfd.readouterr().err
    assert "Traceback" not in err and sum("refused Bad request to process_video" in x for x in err.splitlines()) <= 2


def test_gradio_patches_name_the_major_version_they_were_written_for():
    from app.ui.gradio_patches import GRADIO_MAJOR, check_gradio
    from mstta.errors import UserError

    check_gradio()  # the installed one
    check_gradio(f"{GRADIO_MAJOR}.0.1")
    for other in (f"{GRADIO_MAJOR + 1}.0.0", f"{GRADIO_MAJOR - 1}.44.1", "dev"):
        with pytest.raises(UserError, match=f"written for gradio {GRADIO_MAJOR}.x"):
            check_gradio(other)


# ---------------------------------------------------------------------------- sessions in a burst (issue 25)
def test_sixty_sessions_in_a_burst_hold_the_bound_and_leave_nothing_once_dropped(tmp_path):
    """60 API sessions, each starting a webcam run, within seconds against max_sessions 8: at most 8
    stay live (folders, open recordings: MP4 and JSONL); a dropped session's download URL stops working; the API
    webcam runs end on the server's clock (no page timer); closing the rest leaves nothing."""
    from concurrent.futures import ThreadPoolExecutor

    from helpers_ui import launched, write_h264
    from helpers_video import tiny_clip

    from app.ui import OUTPUTS, build_app
    from app.ui.recording import downloads_root

    root = downloads_root()
    before = {p for p in root.iterdir()}
    demo = build_app(tiny_clip(), labels=LABELS, max_sessions=8, offer_demo_clip=False, webcam_end=0.5)
    ctx = demo.mstta_context

    def mine(pattern: str) -> list[Path]:
        return [p for p in root.glob(pattern) if not any(p == b or b in p.parents for b in before)]

    with launched(demo, concurrency=2) as url:
        clip = write_h264(tmp_path / "clip.mp4", n=8)
        video = file_data(upload(url, "clip.mp4", clip.read_bytes()), "clip.mp4")
        status, outputs = call(
            url, "process_video", [video, None, 1, False, False, L, "", *SETTINGS], session_hash="first"
        )
        assert status == "complete", outputs
        offered = outputs[OUTPUTS.index("downloads")]
        offered = offered.get("value") if isinstance(offered, dict) else offered  # an update: its value
        assert offered, outputs[0]
        link = f"{url}gradio_api/file={offered[0]['path']}"
        with urllib.request.urlopen(link, timeout=30) as r:
            assert r.status == 200 and r.read()

        frame = file_data(upload(url, "f.png", small_png()), "f.png")

        def open_session(i: int):
            return call(url, "process_frame", [frame, False, L, "", *SETTINGS], session_hash=f"burst-{i}")

        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(open_session, range(60)))
        assert all(s == "complete" for s, _ in answers), [a for a in answers if a[0] != "complete"][:2]
        assert len(ctx.sessions) <= 8
        assert len(mine("session-*")) <= 8 and len(mine("**/*.part*")) <= 2 * 8, (mine("session-*"), mine("**/*.part*"))
        with pytest.raises(urllib.error.HTTPError) as gone:  # "first" was dropped: its files went with it
            urllib.request.urlopen(link, timeout=30)
        assert gone.value.code in (403, 404)

        deadline = time.monotonic() + 20  # webcam_end 0.5 s, swept every second: the runs end by themselves
        while mine("**/*.part*") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not mine("**/*.part*"), "API webcam runs did not end on the server's clock"
        assert all(ui.source == "webcam-done" for ui in ctx.sessions.live())

        for ui in ctx.sessions.live():  # their pages close (or their time to live runs out)
            ctx.sessions.forget(ui.session_hash, ui)
        assert len(ctx.sessions) == 0 and not mine("session-*")


# ---------------------------------------------------------------------------- extreme aspect ratios (issue 25)
@pytest.mark.parametrize("size", [(1, 100_000), (100_000, 1), (4000, 100)])
def test_a_frame_of_an_extreme_aspect_ratio_is_refused_in_one_line_without_memory(server, size):
    width, height = size
    data = png_bomb(width, height)  # a few hundred bytes
    before, lines = peak_mb(server.proc.pid), len(server.stderr)
    status, outputs = frame_call(server.url, file_data(upload(server.url, "thin.png", data), "thin.png"))
    text = status_of(outputs) if status == "complete" else str((outputs or {}).get("error"))
    assert f"{width}x{height}" in text and "above the limit of 16:1" in text and "refused" in text, text
    assert "disk" not in text
    assert peak_mb(server.proc.pid) - before < GROWTH_MB
    assert not any("Traceback" in line for line in server.stderr[lines:])
