"""Sinks and annotation: valid H.264 files, atomic writes, valid outputs after an interruption,
the JSONL row schema, and the annotated frame layout."""

from __future__ import annotations

import json
import os
import signal

import av
import numpy as np
import pytest
from helpers_video import read_video, scene

from app.annotate import DISAGREE_COLOR, annotate
from app.session import FrameResult, Scored
from app.sinks import JsonlSink, VideoSink, check_output, prediction_row, shield_interrupts
from app.sources import Frame
from mstta.errors import UserError


def _result(clip=("cat", "dog", "bird"), tta=("cat", "dog", "bird")) -> FrameResult:
    names = ["cat", "dog", "bird"]
    probs = [0.7, 0.2, 0.1]
    return FrameResult(
        clip_topk=[Scored(n, names.index(n), p) for n, p in zip(clip, probs)],
        tta_topk=[Scored(n, names.index(n), p) for n, p in zip(tta, probs)],
        entropy=0.8,
        cache_size=4,
        cache_capacity=9,
        bank_rows=12,
        latency_ms=3.25,
    )


def _leftovers(folder):
    return [p.name for p in folder.iterdir() if p.name.startswith(".")]


# ---------------------------------------------------------------------------- video
def test_video_sink_writes_browser_playable_h264(tmp_path):
    path = tmp_path / "sub" / "out.mp4"
    with VideoSink(path, fps=5) as sink:
        for i in range(10):
            sink.write(scene(i, 96, 64), timestamp=i * 0.2)
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        assert s.codec_context.name == "h264" and s.codec_context.pix_fmt == "yuv420p"
        assert (s.codec_context.width, s.codec_context.height) == (96, 64)
    frames, times, _ = read_video(path)
    assert len(frames) == 10
    assert times == pytest.approx([i * 0.2 for i in range(10)], abs=2e-3)
    assert _leftovers(path.parent) == []
    data = path.read_bytes()
    assert data.index(b"moov") < data.index(b"mdat")  # faststart: playable while downloading


def test_odd_sizes_are_padded_and_later_sizes_letterboxed(tmp_path):
    path = tmp_path / "odd.mp4"
    with VideoSink(path) as sink:
        sink.write(np.full((63, 95, 3), 200, np.uint8))
        sink.write(np.full((30, 30, 3), 100, np.uint8))
    frames, _, _ = read_video(path)
    assert [f.shape for f in frames] == [(64, 96, 3), (64, 96, 3)]


def test_timestamps_never_go_backwards(tmp_path):
    path = tmp_path / "t.mp4"
    with VideoSink(path) as sink:
        for t in (0.0, 0.0, 0.1, 0.05):
            sink.write(scene(0), timestamp=t)
    _, times, _ = read_video(path)
    assert len(times) == 4 and times == sorted(times) and len(set(times)) == 4


def test_no_frames_no_file(tmp_path):
    with VideoSink(tmp_path / "none.mp4"):
        pass
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_interrupted_video_is_valid_with_what_was_done(tmp_path, error):
    path = tmp_path / "int.mp4"
    with pytest.raises(error):
        with VideoSink(path, fps=10) as sink:
            for i in range(7):
                sink.write(scene(i), timestamp=i / 10)
            raise error
    frames, _, _ = read_video(path)
    assert len(frames) == 7
    assert _leftovers(tmp_path) == []


def test_file_appears_only_when_complete(tmp_path):
    path = tmp_path / "late.mp4"
    with VideoSink(path) as sink:
        sink.write(scene(0))
        assert not path.exists() and len(_leftovers(tmp_path)) == 1
    assert path.exists()


@pytest.mark.parametrize(
    "name, suffixes, match",
    [
        ("out.avi", (".mp4",), "must end in .mp4"),
        ("dir", None, "is a folder"),
    ],
)
def test_check_output_errors(tmp_path, name, suffixes, match):
    (tmp_path / "dir").mkdir()
    with pytest.raises(UserError, match=match):
        check_output(tmp_path / name, "--out", suffixes)


# ---------------------------------------------------------------------------- jsonl
def test_prediction_row_schema():
    row = prediction_row(Frame(12, 0.4, scene(0), "x"), _result(tta=("dog", "cat", "bird")), truth="cat")
    assert row == {
        "frame": 12,
        "timestamp": 0.4,
        "clip": [{"label": "cat", "prob": 0.7}, {"label": "dog", "prob": 0.2}, {"label": "bird", "prob": 0.1}],
        "tta": [{"label": "dog", "prob": 0.7}, {"label": "cat", "prob": 0.2}, {"label": "bird", "prob": 0.1}],
        "method": "ms-tta",
        "disagree": True,
        "entropy": 0.8,
        "cache_size": 4,
        "bank_size": 12,
        "latency_ms": 3.25,
        "methods": [],
        "truth": "cat",
    }


def test_a_non_finite_number_is_logged_as_null_never_as_nan(tmp_path):
    import dataclasses
    import json
    import math

    result = dataclasses.replace(_result(tta=("dog", "cat", "bird")), entropy=math.nan, latency_ms=math.inf)
    row = prediction_row(Frame(1, 0.1, scene(0), "x"), result)
    assert row["entropy"] is None and row["latency_ms"] is None
    path = tmp_path / "p.jsonl"
    with JsonlSink(path) as sink:
        sink.write(row)
    text = path.read_text(encoding="utf-8")
    assert "NaN" not in text and "Infinity" not in text and json.loads(text)["entropy"] is None
    assert "truth" not in prediction_row(Frame(0, 0.0, scene(0), "x"), _result())


def test_jsonl_sink_atomic_and_valid_after_interrupt(tmp_path):
    path = tmp_path / "logs" / "p.jsonl"
    with pytest.raises(KeyboardInterrupt):
        with JsonlSink(path) as sink:
            for i in range(5):
                sink.write({"frame": i, "label": "café"})
            assert not path.exists()
            raise KeyboardInterrupt
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(s)["frame"] for s in lines] == list(range(5))
    assert json.loads(lines[0])["label"] == "café"
    assert _leftovers(path.parent) == []


# ---------------------------------------------------------------------------- annotate
def test_annotate_is_pure_and_even_sized():
    img = scene(0, 95, 63)
    before = img.copy()
    out = annotate(img, _result(), fps=12.5, bank_limit=4096)
    assert np.array_equal(img, before)
    assert out.dtype == np.uint8 and out.shape[0] % 2 == 0 and out.shape[1] % 2 == 0
    assert out.shape[1] == 480 and out.shape[0] > 480 * 63 / 95  # scaled up, panel below


def test_annotate_marks_disagreement():
    agree = annotate(scene(0, 480, 320), _result())
    disagree = annotate(scene(0, 480, 320), _result(tta=("dog", "cat", "bird")))
    assert tuple(disagree[0, 240]) == DISAGREE_COLOR and tuple(agree[0, 240]) != DISAGREE_COLOR
    assert agree.shape == disagree.shape


def test_annotate_keeps_large_frames_at_size():
    out = annotate(scene(0, 1280, 720), _result(), fps=None)
    assert out.shape[1] == 1280 and np.array_equal(out[:720], scene(0, 1280, 720))


def test_shield_holds_ctrl_c_until_the_block_is_done():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with shield_interrupts():
            os.kill(os.getpid(), signal.SIGINT)
            done.append("finished")
    assert done == ["finished"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_shield_delivers_sigterm_to_the_previous_handler():
    seen = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        with shield_interrupts():
            os.kill(os.getpid(), signal.SIGTERM)
            assert seen == []
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_annotate_spells_out_entropy_and_shows_the_truth():
    from app.annotate import FG, status_line, truth_line

    r = _result(tta=("dog", "cat", "bird"))
    assert status_line(r, 12.5, 4096) == "12.5 fps  ·  cache 4/9  ·  bank 12/4096  ·  CLIP entropy 0.80 nats"
    assert truth_line(r, "cat") == "true label: cat  ·  CLIP right, MS-TTA wrong"
    plain = annotate(scene(0, 480, 320), r)
    with_truth = annotate(scene(0, 480, 320), r, truth="cat")
    assert with_truth.shape[0] > plain.shape[0]  # one more line in the panel
    assert np.array_equal(with_truth[: plain.shape[0] - 40], plain[: plain.shape[0] - 40])
    extra = with_truth[plain.shape[0] - 4 :]
    assert (extra == np.array(FG, np.uint8)).all(axis=-1).any()  # text drawn on the new line
