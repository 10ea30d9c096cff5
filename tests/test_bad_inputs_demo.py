"""Bad inputs to `mstta-demo --headless` (issue 12, parts 1, 2, 3 and 5 for the demo).

Table-driven: every case builds its files in a fresh folder, runs `mstta-demo --headless`
in-process and asserts exit code 2, exactly one stderr line `mstta-demo: error: ...` naming the
flag or file (the case's expected text), no traceback, every file in the folder byte-identical
afterwards, and nothing new left behind (no output, no hidden temp file). Special files given as
outputs (a FIFO, a symlink to /proc/self/fd/1) are left as they were.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest
from helpers_video import write_labels, write_video
from PIL import Image

from app.cli import main

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--model", "mstta-tiny", "--pretrained", "none"]


def _media(tmp: Path) -> dict[str, str]:
    video = write_video(tmp / "in.mp4", n=12, fourcc="mp4v")
    labels = write_labels(tmp / "labels.txt")
    truth = tmp / "truth.csv"
    truth.write_text("start_frame,end_frame,label\n0,5,red circle\n6,11,green square\n", encoding="utf-8")
    (tmp / "out").mkdir()
    return {"video": str(video), "labels": str(labels), "truth": str(truth), "dir": str(tmp)}


def _base(m: dict[str, str], *extra: str) -> list[str]:
    return ["--headless", "--video", m["video"], "--labels", m["labels"], *TINY, *extra]


def _fifo(m, name="fifo.jsonl") -> str:
    path = Path(m["dir"]) / name
    os.mkfifo(path)
    return str(path)


def _link(m, name, to) -> str:
    path = Path(m["dir"]) / name
    path.symlink_to(to)
    return str(path)


def _hardlink(m, name, to) -> str:
    path = Path(m["dir"]) / name
    os.link(to, path)
    return str(path)


def _file(m, name, data: bytes | str = b"") -> str:
    path = Path(m["dir"]) / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(path)


def _bomb_folder(m) -> str:
    folder = Path(m["dir"]) / "frames"
    folder.mkdir()
    Image.new("1", (20_000, 20_000)).save(folder / "0001.png", optimize=True)  # ~50 KB, 1.2 GB as RGB
    return str(folder)


def _thin_folder(m) -> str:
    folder = Path(m["dir"]) / "thin"
    folder.mkdir()
    Image.new("L", (100_000, 1)).save(folder / "0001.png")  # a few hundred bytes; GBs once CLIP's views scale it
    return str(folder)


def _large_folder(m) -> str:
    folder = Path(m["dir"]) / "big"
    folder.mkdir()
    Image.new("RGB", (300, 200), (10, 20, 30)).save(folder / "0001.png")
    return str(folder)


def _corrupt_folder(m) -> str:
    folder = Path(m["dir"]) / "broken"
    folder.mkdir()
    for i in range(3):
        (folder / f"{i}.png").write_bytes(b"\x89PNG not really" * (i + 1))
    return str(folder)


def _labels_with(m, text: str | bytes) -> list[str]:
    return ["--headless", "--video", m["video"], "--labels", _file(m, "odd.txt", text), *TINY]


def _truth_field(n: int) -> str:
    return 'start_frame,end_frame,label\n0,5,"' + "x" * n + '"\n'


def _outputs(m) -> list[str]:
    return ["--out", m["dir"] + "/out/a.mp4", "--log", m["dir"] + "/out/p.jsonl"]


# (id, argv builder, text the one error line must contain)
Case = tuple[str, Callable[[dict], list[str]], str]
CASES: list[Case] = [
    # 1. outputs never overwrite inputs, each other, or special files
    ("out-is-video", lambda m: _base(m, "--out", m["video"]), "--out"),
    ("log-is-video", lambda m: _base(m, "--log", m["video"]), "same file as the input --video"),
    ("log-is-labels", lambda m: _base(m, "--log", m["labels"]), "same file as the input --labels"),
    ("log-is-truth", lambda m: _base(m, "--truth", m["truth"], "--log", m["truth"]), "same file as the input --truth"),
    ("out-is-log", lambda m: _base(m, "--out", m["dir"] + "/out/a.mp4", "--log", m["dir"] + "/out/a.mp4"), "--log"),
    ("out-via-dotdot", lambda m: _base(m, "--out", m["dir"] + "/out/../in.mp4"), "same file as the input --video"),
    (
        "log-hardlink-to-labels",
        lambda m: _base(m, "--log", _hardlink(m, "h.jsonl", m["labels"])),
        "same file as the input --labels",
    ),
    (
        "out-symlink-to-video",
        lambda m: _base(m, "--out", _link(m, "l.mp4", m["video"])),
        "same file as the input --video",
    ),
    ("log-symlink-to-stdout", lambda m: _base(m, "--log", _link(m, "s.jsonl", "/proc/self/fd/1")), "symbolic link"),
    ("log-fifo", lambda m: _base(m, "--log", _fifo(m)), "not a regular file"),
    ("log-dev-null", lambda m: _base(m, "--log", "/dev/null"), "not a regular file"),
    ("out-is-folder", lambda m: _base(m, "--out", m["dir"] + "/out"), "--out"),
    ("log-parent-is-file", lambda m: _base(m, "--log", _file(m, "plain.txt") + "/p.jsonl"), "is a file, not a folder"),
    ("out-wrong-suffix", lambda m: _base(m, "--out", m["dir"] + "/out/a.avi"), "--out"),
    # 2. every value bounded, no traceback
    ("bank-size-1e12", lambda m: _base(m, "--bank-size", str(10**12)), "--bank-size 1000000000000: "),
    ("bank-size-0", lambda m: _base(m, "--bank-size", "0"), "--bank-size"),
    ("set-capacity-1e10", lambda m: _base(m, "--set", f"capacity={10**10}"), "capacity"),
    ("set-neg-capacity-1e9", lambda m: _base(m, "--method", "tda", "--set", f"neg_capacity={10**9}"), "neg_capacity"),
    ("set-bank-size-1e12", lambda m: _base(m, "--set", f"bank_size={10**12}"), "bank_size"),
    ("set-ms-steps-1e9", lambda m: _base(m, "--set", f"ms_steps={10**9}"), "ms_steps"),
    ("set-lam-inf", lambda m: _base(m, "--set", "lam=.inf"), "lam"),
    ("set-beta-nan", lambda m: _base(m, "--set", "beta=.nan"), "beta"),
    ("set-unknown-key", lambda m: _base(m, "--set", "kk=3"), "kk"),
    ("set-no-equals", lambda m: _base(m, "--set", "k"), "--set"),
    # forgetting (issue 29): the choice, a raced entry's own choice, and the section's keys
    ("forget-unknown", lambda m: _base(m, "--forget", "sometimes"), "--forget"),
    ("forget-and-set-rule", lambda m: _base(m, "--forget", "detect", "--set", "forget.rule=idle"), "pass one of them"),
    ("methods-at-unknown", lambda m: _base(m, "--methods", "ms-tta@sometimes"), "after @ choose one of"),
    ("methods-at-stateless", lambda m: _base(m, "--methods", "zero-shot@recommended"), "keeps no state"),
    ("methods-at-twice", lambda m: _base(m, "--methods", "ms-tta@detect,ms-tta @ detect"), "named twice"),
    ("set-forget-horizon-0", lambda m: _base(m, "--set", "forget.horizon=0"), "forget.horizon"),
    ("set-forget-unknown-key", lambda m: _base(m, "--set", "forget.nope=1"), "nope"),
    ("views-100000", lambda m: _base(m, "--views", "100000", "--max-frames", "1"), "--views 100000"),
    ("views-0", lambda m: _base(m, "--views", "0"), "--views"),
    ("views-not-int", lambda m: _base(m, "--views", "many"), "--views"),
    ("every-0", lambda m: _base(m, "--every", "0"), "--every"),
    ("max-frames-0", lambda m: _base(m, "--max-frames", "0"), "--max-frames"),
    ("topk-0", lambda m: _base(m, "--topk", "0"), "--topk"),
    ("max-pixels-0", lambda m: _base(m, "--max-pixels", "0"), "--max-pixels 0: expected WIDTHxHEIGHT"),
    ("max-pixels-garbage", lambda m: _base(m, "--max-pixels", "huge"), "--max-pixels huge: expected WIDTHxHEIGHT"),
    ("method-unknown", lambda m: _base(m, "--method", "magic"), "magic"),
    ("precision-unknown", lambda m: _base(m, "--precision", "fp8"), "--precision"),
    ("model-unknown", lambda m: _base(m, "--model", "NoSuchNet"), "--model NoSuchNet"),
    # decompression bombs and oversized frames
    (
        "png-bomb-in-folder",
        lambda m: ["--headless", "--video", _bomb_folder(m), "--labels", m["labels"], *TINY],
        "0001.png: 400,000,000 pixels, above the limit",
    ),
    (
        "folder-image-1x100000-with-out",
        lambda m: [
            "--headless",
            "--video",
            _thin_folder(m),
            "--labels",
            m["labels"],
            "--out",
            str(Path(m["dir"]) / "o.mp4"),
            *TINY,
        ],
        "0001.png: 100000x1 is 100,000 times longer than wide, above the limit of 16:1 (refused",
    ),
    (
        "folder-image-above-max-pixels",
        lambda m: [
            "--headless",
            "--video",
            _large_folder(m),
            "--labels",
            m["labels"],
            "--max-pixels",
            "100x100",
            *TINY,
        ],
        "0001.png: 300x200 is 60,000 pixels, above the limit of 10,000",
    ),
    (
        "video-above-max-pixels",
        lambda m: _base(m, "--max-pixels", "64x64"),
        "96x64 is 6,144 pixels, above the limit of 4,096",
    ),
    # labels, truth, sources
    ("labels-missing", lambda m: ["--headless", "--video", m["video"], *TINY], "--labels"),
    (
        "labels-no-file",
        lambda m: ["--headless", "--video", m["video"], "--labels", m["dir"] + "/nope.txt", *TINY],
        "--labels",
    ),
    (
        "labels-one-class",
        lambda m: ["--headless", "--video", m["video"], "--labels", _file(m, "one.txt", "cat\n"), *TINY],
        "--labels",
    ),
    (
        "labels-binary",
        lambda m: ["--headless", "--video", m["video"], "--labels", _file(m, "bin.txt", b"\xff\xfe\x00"), *TINY],
        "--labels",
    ),
    ("truth-unknown-label", lambda m: _base(m, "--truth", _file(m, "t.csv", "0,5,unicorn\n")), "unicorn"),
    ("truth-overlap", lambda m: _base(m, "--truth", _file(m, "t.csv", "0,5,red circle\n3,8,red circle\n")), "overlap"),
    ("truth-no-file", lambda m: _base(m, "--truth", m["dir"] + "/none.csv"), "--truth"),
    (
        "video-no-file",
        lambda m: ["--headless", "--video", m["dir"] + "/none.mp4", "--labels", m["labels"], *TINY],
        "--video",
    ),
    ("video-not-a-video", lambda m: ["--headless", "--video", m["labels"], "--labels", m["labels"], *TINY], "--video"),
    ("video-bad-scheme", lambda m: ["--headless", "--video", "ftp://x/y.mp4", "--labels", m["labels"], *TINY], "ftp"),
    ("video-and-camera", lambda m: _base(m, "--camera", "0"), "--camera"),
    ("camera-negative", lambda m: ["--headless", "--camera", "-1", "--labels", m["labels"], *TINY], "--camera"),
    ("template-no-braces", lambda m: _base(m, "--template", "a photo"), "--template"),
    # issue 18: truth fields beyond the csv module's limit, and their neighbours
    ("truth-field-200kb", lambda m: _base(m, "--truth", _file(m, "t.csv", _truth_field(200_000))), "not valid CSV"),
    ("truth-field-131073", lambda m: _base(m, "--truth", _file(m, "t.csv", _truth_field(131_073))), "line 2"),
    (
        "truth-field-100kb-unknown",
        lambda m: _base(m, "--truth", _file(m, "t.csv", _truth_field(100_000))),
        "(100,000 characters)' is not in the labels file",
    ),
    (
        "truth-frame-5000-digits",
        lambda m: _base(m, "--truth", _file(m, "t.csv", "0," + "9" * 5000 + ",red circle\n")),
        "frame numbers must be integers",
    ),
    (
        "truth-frame-2e20",
        lambda m: _base(m, "--truth", _file(m, "t.csv", f"0,{2 * 10**20},red circle\n")),
        "frame numbers are at most",
    ),
    (
        "truth-dev-zero",
        lambda m: _base(m, "--truth", "/dev/zero"),
        "--truth /dev/zero: is a device, not a regular file",
    ),
    ("truth-fifo", lambda m: _base(m, "--truth", _fifo(m, "t.csv")), "FIFO"),
    ("truth-folder", lambda m: _base(m, "--truth", m["dir"] + "/out"), "is a folder"),
    (
        "truth-over-16mib",
        lambda m: _base(m, "--truth", _file(m, "t.csv", b"#" * (16 * 2**20 + 1))),
        "larger than the limit of 16,777,216 bytes",
    ),
    # labels: unbounded or blocking reads, control characters
    (
        "labels-dev-zero",
        lambda m: ["--headless", "--video", m["video"], "--labels", "/dev/zero", *TINY],
        "--labels /dev/zero: is a device, not a regular file",
    ),
    (
        "labels-fifo",
        lambda m: ["--headless", "--video", m["video"], "--labels", _fifo(m, "l.txt"), *TINY],
        "is a FIFO, not a regular file",
    ),
    ("labels-over-1mib", lambda m: _labels_with(m, b"cat\ndog\n" + b"#" * 2**20), "larger than the limit of 1,048,576"),
    (
        "labels-folder",
        lambda m: ["--headless", "--video", m["video"], "--labels", m["dir"] + "/out", *TINY],
        "is a folder",
    ),
    ("labels-nul-byte", lambda m: _labels_with(m, b"cat\nd\x00og\n"), "line 2 holds a control character (U+0000)"),
    (
        "labels-escape",
        lambda m: _labels_with(m, "cat\ndog\n\x1b[31mred\n"),
        "line 3 holds a control character (U+001B)",
    ),
    ("labels-nul-only", lambda m: _labels_with(m, b"\x00\n\x00\x00\n"), "U+0000"),
    # sources: camera indices, all-corrupt folders
    (
        "camera-1e20",
        lambda m: ["--headless", "--camera", str(10**20), "--labels", m["labels"], *TINY],
        "a camera index is an integer from 0 to 1023",
    ),
    (
        "camera-5000-digits",
        lambda m: ["--headless", "--camera", "9" * 5000, "--labels", m["labels"], *TINY],
        "--camera: invalid int value: '99999999999999999999... (5,000 characters)'",
    ),
    ("every-5000-digits", lambda m: _base(m, "--every", "7" * 5000), "--every: invalid int value"),
    ("camera-1024", lambda m: ["--headless", "--camera", "1024", "--labels", m["labels"], *TINY], "--camera 1024"),
    (
        "video-digits-huge",
        lambda m: ["--headless", "--video", "9" * 40, "--labels", m["labels"], *TINY],
        "(40 digits): a camera index",
    ),
    (
        "folder-all-corrupt",
        lambda m: ["--headless", "--video", _corrupt_folder(m), "--labels", m["labels"], *TINY],
        "none of its 3 image files could be decoded",
    ),
    (
        "folder-all-corrupt-with-outputs",
        lambda m: ["--headless", "--video", _corrupt_folder(m), "--labels", m["labels"], *TINY, *_outputs(m)],
        "none of its 3 image files could be decoded",
    ),
    # sizes and devices
    ("max-pixels-negative-sides", lambda m: _base(m, "--max-pixels=-64x-64"), "--max-pixels -64x-64: expected"),
    ("max-pixels-one-negative", lambda m: _base(m, "--max-pixels", "64x-64"), "each number >= 1"),
    ("max-pixels-zero-side", lambda m: _base(m, "--max-pixels", "0x4096"), "each number >= 1"),
    ("max-pixels-negative", lambda m: _base(m, "--max-pixels=-4096"), "each number >= 1"),
    ("device-meta", lambda m: _base(m, "--device", "meta"), "--device 'meta': use auto, cpu, cuda or cuda:N"),
    ("device-xla", lambda m: _base(m, "--device", "xla"), "--device 'xla'"),
    ("device-cuda-huge", lambda m: _base(m, "--device", "cuda:" + "9" * 30), "use auto, cpu, cuda or cuda:N"),
]


def _snapshot(folder: Path) -> dict[str, str]:
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_symlink():
            out[str(p)] = "link:" + os.readlink(p)
        elif p.is_fifo():
            out[str(p)] = "fifo"
        elif p.is_file():
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
        elif p.is_dir():
            out[str(p)] = "dir"
    return out


@pytest.mark.parametrize("name,build,expected", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_and_touches_nothing(name, build, expected, tmp_path, capsys):
    m = _media(tmp_path)
    argv = build(m)
    before = _snapshot(tmp_path)
    dev_null = os.stat("/dev/null")
    code = main(argv)
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert code == 2, (name, err)
    assert len(lines) == 1 and lines[0].startswith("mstta-demo: error: "), err
    assert expected in lines[0], lines[0]
    assert "Traceback" not in err and out == ""
    assert _snapshot(tmp_path) == before  # inputs byte-identical; no output or temp file left
    after = os.stat("/dev/null")
    assert (after.st_ino, after.st_mode) == (dev_null.st_ino, dev_null.st_mode)


def test_case_ids_are_unique():
    """Each case is reported by its id: two cases never share one."""
    assert len({c[0] for c in CASES}) == len(CASES)


# ---------------------------------------------------------------------------- part 3 and 5: interruption
def _spawn(argv: list[str], cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli", *argv],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigterm_ends_a_many_view_run_between_chunks_and_leaves_no_part_files(tmp_path):
    m = _media(tmp_path)
    # long enough that the run is still encoding when the signal comes (12 frames end in < 1 s)
    m["video"] = str(write_video(tmp_path / "long.mp4", n=400, fourcc="mp4v"))
    out_dir = tmp_path / "out"
    proc = _spawn(
        _base(
            m,
            "--views",
            "256",
            "--every",
            "1",
            "--out",
            str(out_dir / "a.mp4"),
            "--log",
            str(out_dir / "p.jsonl"),
            "--quiet",
        ),
        tmp_path,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(p.name.endswith(".part.jsonl") for p in out_dir.iterdir()):
        time.sleep(0.05)  # the run is writing (its temp files exist): now stop it
    assert any(p.name.endswith(".part.jsonl") for p in out_dir.iterdir()), "run never started writing"
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    log = out_dir / "p.jsonl"  # finalised at the signal when it holds a frame (a whole run: 400 rows)
    rows = log.read_text().splitlines() if log.exists() else []
    assert len(rows) < 400, "the signal was honoured mid-run, not after all 400 frames x 256 views"
    assert "Traceback" not in err
    leftovers = [p.name for p in out_dir.iterdir() if p.name.startswith(".")]
    assert leftovers == []  # no .part.mp4 / .part.jsonl


def test_a_killed_runs_part_files_are_swept_at_the_next_start(tmp_path):
    m = _media(tmp_path)
    out_dir = tmp_path / "out"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    stale = [out_dir / f".a.mp4.{pid}-0123abcd.part.mp4", out_dir / f".p.jsonl.{pid}-89abcdef.part.jsonl"]
    for p in stale:
        p.write_bytes(b"half")
    keep = out_dir / f".p.jsonl.{os.getpid()}-00000000.part.jsonl"  # a live process's temp file stays
    keep.write_bytes(b"live")
    code = main(
        _base(m, "--max-frames", "2", "--out", str(out_dir / "a.mp4"), "--log", str(out_dir / "p.jsonl"), "--quiet")
    )
    assert code == 0
    assert not any(p.exists() for p in stale) and keep.exists()
    assert (out_dir / "a.mp4").stat().st_size > 0 and len((out_dir / "p.jsonl").read_text().splitlines()) == 2


def test_log_dash_writes_jsonl_to_stdout_and_the_summary_to_stderr(tmp_path, capsys):
    import json

    m = _media(tmp_path)
    code = main(_base(m, "--every", "4", "--log", "-", "--quiet"))
    out, err = capsys.readouterr()
    rows = [json.loads(line) for line in out.splitlines()]  # stdout holds the JSONL rows only
    assert code == 0 and [r["frame"] for r in rows] == [0, 4, 8]
    assert "mstta-demo: 3 frames processed" in err


# ---------------------------------------------------------------------------- issue 18: outputs stay whole
_FSIZE_RUNNER = """
import resource, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))   # EFBIG, as a full disk
from app.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize(
    "outputs, flag",
    [(("--log", "p.jsonl"), "--log"), (("--out", "a.mp4"), "--out"), (("--out", "a.mp4", "--log", "p.jsonl"), None)],
)
def test_a_full_disk_leaves_no_output_under_its_final_name(outputs, flag, tmp_path):
    """Writing fails part-way (a file size limit stands in for a full disk): one line naming the
    output, exit 2, and neither a truncated file under the final name nor a temp file left."""
    m = _media(tmp_path)
    m["video"] = str(write_video(tmp_path / "long.mp4", n=200, fourcc="mp4v"))
    out_dir = tmp_path / "out"
    argv = [str(out_dir / a) if a.endswith((".jsonl", ".mp4")) else a for a in outputs]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _FSIZE_RUNNER,
            "5000",
            *_base(m, "--every", "1", "--max-frames", "40", "--quiet", *argv),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("mstta.features.models:")]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and "writing failed after" in lines[0] and "nothing was kept" in lines[0], proc.stderr
    assert flag is None or lines[0].startswith(f"mstta-demo: error: {flag} ")
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in out_dir.iterdir()) == []  # no final file, no .part file


def test_a_video_declaring_one_frame_per_million_seconds_plays_at_the_fallback_rate(tmp_path, capsys, caplog):
    """A container whose declared rate is absurd (1/1,000,000 fps) is played at 30 fps with frames in
    order (a warning says so), and the annotated video is written and reads back."""
    from fractions import Fraction

    import av
    from helpers_video import read_video, scene

    path = tmp_path / "slow.avi"
    with av.open(str(path), "w", format="avi") as c:
        s = c.add_stream("mjpeg", rate=Fraction(1, 1_000_000))
        s.width, s.height, s.pix_fmt = 96, 64, "yuvj420p"
        for i in range(8):
            for packet in s.encode(av.VideoFrame.from_ndarray(scene(i), format="rgb24")):
                c.mux(packet)
        for packet in s.encode():
            c.mux(packet)
    labels = write_labels(tmp_path / "labels.txt")
    out, log = tmp_path / "a.mp4", tmp_path / "p.jsonl"
    code = main(
        [
            "--headless",
            "--video",
            str(path),
            "--labels",
            str(labels),
            *TINY,
            "--every",
            "1",
            "--out",
            str(out),
            "--log",
            str(log),
            "--quiet",
        ]
    )
    _, err = capsys.readouterr()
    assert code == 0, err
    assert "declares no usable frame rate (1e-06 fps); playing it at 30 fps" in caplog.text and "Traceback" not in err
    import json

    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["frame"] for r in rows] == list(range(8))
    assert [r["timestamp"] for r in rows] == pytest.approx([i / 30 for i in range(8)], abs=1e-3)
    frames, times, _ = read_video(out)
    assert len(frames) == 8 and times[-1] == pytest.approx(7 / 30, abs=0.01)
