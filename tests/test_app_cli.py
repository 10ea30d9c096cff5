"""`mstta-demo`: flags, the summary line, every bad input as one line with exit 2, and Ctrl-C in a
real process (exit 130 with valid outputs)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers_video import read_video, write_labels, write_video

from app.cli import build_parser, main, parse_args
from mstta.engine.config import DEFAULT_BANK_SIZE

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--model", "mstta-tiny", "--pretrained", "none"]
FLAGS = [
    "--video",
    "--camera",
    "--labels",
    "--template",
    "--model",
    "--pretrained",
    "--precision",
    "--device",
    "--views",
    "--views-on",
    "--method",
    "--set",
    "--bank-size",
    "--every",
    "--max-frames",
    "--headless",
    "--out",
    "--log",
    "--truth",
    "--json",
    "--topk",
    "--max-pixels",
    "--quiet",
    "--bundled-demo",
]


@pytest.fixture
def media(tmp_path):
    return {
        "video": str(write_video(tmp_path / "clip.avi", n=60)),
        "labels": str(write_labels(tmp_path / "labels.txt")),
        "dir": tmp_path,
    }


def test_help_documents_every_flag(capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for flag in FLAGS:
        assert flag in text
    defaults = parse_args(["--labels", "x"])
    assert (defaults.model, defaults.pretrained, defaults.method, defaults.bank_size, defaults.topk) == (
        "ViT-B-16",
        "openai",
        "ms-tta",
        DEFAULT_BANK_SIZE,
        3,
    )
    headless = parse_args(["--headless", "--labels", "x"])  # parsed without the UI's flags
    assert (headless.model, headless.pretrained) == ("ViT-B-16", "openai") and not hasattr(headless, "port")
    assert parse_args(["--headless", "--port", "9"]).port == 9  # a UI flag with --headless is still accepted


def test_headless_run_prints_one_summary_line(media, capsys):
    out, log = media["dir"] / "a.mp4", media["dir"] / "p.jsonl"
    rc = main(
        [
            "--video",
            media["video"],
            "--labels",
            media["labels"],
            "--headless",
            "--out",
            str(out),
            "--log",
            str(log),
            *TINY,
            "--set",
            "k=3",
            "--bank-size",
            "64",
        ]
    )
    captured = capsys.readouterr()
    assert rc == 0
    lines = captured.out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mstta-demo: 10 frames processed of 60 received")
    assert "CLIP/MS-TTA agree" in lines[0]
    assert len(read_video(out)[0]) == 10 and len(log.read_text().splitlines()) == 10


def test_json_summary(media, capsys):
    rc = main(
        [
            "--video",
            media["video"],
            "--labels",
            media["labels"],
            "--headless",
            "--json",
            "--every",
            "5",
            "--max-frames",
            "4",
            "--topk",
            "1",
            *TINY,
        ]
    )
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["frames_processed"] == 4 and summary["every"] == 5 and summary["model"] == "mstta-tiny"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bad_inputs(media) -> list[tuple[list[str], str]]:
    d: Path = media["dir"]
    (d / "empty.txt").write_text("# nothing here\n\n", encoding="utf-8")
    (d / "dup.txt").write_text("cat\ndog\n\ncat\n", encoding="utf-8")
    (d / "latin1.txt").write_bytes("café\nthé\n".encode("latin-1"))
    (d / "fake.mp4").write_text("not a video", encoding="utf-8")
    v, lab = media["video"], media["labels"]
    return [
        (["--video", str(d / "missing.mp4"), "--labels", lab, "--headless"], "no such file or folder"),
        (["--video", str(d / "fake.mp4"), "--labels", lab, "--headless"], "not a video OpenCV can read"),
        (["--video", v, "--labels", str(d / "empty.txt"), "--headless"], "no class names found"),
        (["--video", v, "--labels", str(d / "dup.txt"), "--headless"], "duplicate class name 'cat' on lines 1 and 4"),
        (["--video", v, "--labels", str(d / "latin1.txt"), "--headless"], "not UTF-8 text"),
        (["--video", v, "--labels", str(d / "nope.txt"), "--headless"], "--labels"),
        (["--camera", "97", "--labels", lab, "--headless"], "--camera 97: the camera could not be opened"),
        (["--video", f"rtsp://127.0.0.1:{_free_port()}/x", "--labels", lab, "--headless"], "could not connect"),
        (["--video", v, "--labels", lab, "--headless", "--set", "bogus=1"], "unknown key 'bogus'"),
        (["--video", v, "--labels", lab, "--headless", "--method", "magic"], "unknown method 'magic'"),
        (["--video", v, "--labels", lab, "--headless", "--out", str(d / "a.avi")], "must end in .mp4"),
        (["--video", v, "--labels", lab, "--headless", "--every", "x"], "invalid int value"),
        (["--video", v, "--labels", lab, "--headless", "--truth", str(d / "none.csv")], "no such file"),
        (["--video", v, "--labels", lab, "--headless", "--template", "no slot"], "exactly one"),
        (
            ["--video", v, "--labels", lab, "--headless", "--model", "mstta-tiny", "--pretrained", str(d / "w.pt")],
            "checkpoint file not found",
        ),
        (["--video", v, "--labels", lab, "--headless", "--model", "NoSuchNet"], "unknown architecture"),
        (["--labels", lab, "--headless"], "no source"),
        (["--video", v, "--camera", "0", "--labels", lab, "--headless"], "either --video or --camera"),
        (["--video", v, "--headless"], "--labels is required"),
        (["--video", v, "--labels", lab, "--out", str(d / "a.mp4")], "--out is for --headless runs"),
    ]


def test_every_bad_input_is_one_line_and_exit_2(media, capsys):
    for argv, match in _bad_inputs(media):
        rc = main(argv)
        err = capsys.readouterr().err.strip()
        assert rc == 2, (argv, err)
        assert err.count("\n") == 0 and err.startswith("mstta-demo: error: ") and match in err, (argv, err)


@pytest.mark.slow
def test_ctrl_c_finalises_outputs_and_exits_130(tmp_path):
    video = write_video(tmp_path / "long.avi", n=3000, size=(64, 48))
    labels = write_labels(tmp_path / "labels.txt")
    out, log = tmp_path / "o" / "a.mp4", tmp_path / "o" / "p.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app.cli",
            "--video",
            str(video),
            "--labels",
            str(labels),
            "--headless",
            "--every",
            "1",
            "--out",
            str(out),
            "--log",
            str(log),
            *TINY,
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until frames are flowing (the temp log has content)
        parts = list(log.parent.glob(".p.*")) if log.parent.exists() else []
        if parts and parts[0].stat().st_size > 0:
            break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stdout and stderr.strip().endswith("mstta-demo: interrupted")
    rows = log.read_text(encoding="utf-8").splitlines()
    assert 0 < len(rows) < 3000 and all(json.loads(r)["frame"] >= 0 for r in rows)
    assert len(read_video(out)[0]) == len(rows)
    assert sorted(p.name for p in out.parent.iterdir()) == ["a.mp4", "p.jsonl"]


def test_docs_page_documents_every_flag():
    """docs/demo.md lists every flag the parser has, the browser ones included."""
    text = (ROOT / "docs" / "demo.md").read_text(encoding="utf-8")
    flags = sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", build_parser().format_help())))
    assert len(flags) > 30
    missing = [f for f in flags if f != "--help" and f"`{f}" not in text]
    assert missing == []


# ---------------------------------------------------------------------------- names once (issue 25)
def test_the_demo_names_the_engines_default_model_extensions_and_random_weights_test_once():
    import argparse

    from app import bundled, file_sources, pipeline
    from app.annotate import random_weights
    from app.ui.serving import ui_config
    from mstta.data.common import IMAGE_EXTENSIONS
    from mstta.features.models import DEFAULT_MODEL, DEFAULT_TAG

    assert (pipeline.DemoConfig().model, pipeline.DemoConfig().pretrained) == (DEFAULT_MODEL, DEFAULT_TAG)
    assert (bundled.CLIP_DEMO.model, bundled.CLIP_DEMO.pretrained) == (DEFAULT_MODEL, DEFAULT_TAG)
    assert file_sources.IMAGE_EXTENSIONS == tuple(sorted(IMAGE_EXTENSIONS))
    for tag, random in (
        (None, True),
        ("", True),
        ("none", True),
        ("None", True),
        ("openai", False),
        ("bundled", False),
    ):
        assert random_weights(argparse.Namespace(pretrained=tag)) is random, tag
    # one args -> DemoConfig mapping: the UI's config is the headless one with the UI's own fields
    args = argparse.Namespace(
        model="mstta-tiny",
        pretrained="none",
        methods=["tda", "ms-tta"],
        every=3,
        topk=2,
        views=2,
        set=["k=4"],
        max_pixels="64x64",
        bank_size=512,
    )
    headless, (ui, _) = pipeline.config_from_args(args), ui_config(args)
    assert ui == pipeline.config_from_args(args, camera=None, out=None, log=None, progress=False)
    assert (headless.method, headless.methods, headless.max_pixels, headless.overrides) == (
        "tda",
        ["tda", "ms-tta"],
        64 * 64,
        ["k=4"],
    )
