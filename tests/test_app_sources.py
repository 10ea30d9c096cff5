"""Sources and sampling on generated media: files (whole, truncated, with corrupt frames), image
folders, live sources (newest frame wins, drops counted, reconnect with back-off), bad inputs."""

from __future__ import annotations

import contextlib
import functools
import http.server
import logging
import socket
import threading
import time

import numpy as np
import pytest
from helpers_video import FakeCapture, corrupt_mjpeg_frames, opener, scene, truncate, write_image_folder, write_video

from app.sampling import Sampler, default_every
from app.sources import (
    Frame,
    ImageFolderSource,
    IterableSource,
    LiveSource,
    VideoFileSource,
    classify_source,
    open_source,
)
from mstta.errors import UserError

ok = contextlib.nullcontext


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------- classification
@pytest.mark.parametrize(
    "spec, kind",
    [
        (0, "camera"),
        ("2", "camera"),
        ("rtsp://cam.local/live", "stream"),
        ("HTTP://host/x.mjpg", "stream"),
        ("udp://239.0.0.1:1234", "stream"),
    ],
)
def test_classify(spec, kind):
    assert classify_source(spec)[0] == kind


def test_classify_paths(tmp_path):
    f = tmp_path / "a.avi"
    f.write_bytes(b"x")
    assert classify_source(str(f)) == ("file", str(f))
    assert classify_source(f"file://{f}") == ("file", str(f))
    assert classify_source(tmp_path) == ("folder", str(tmp_path))


@pytest.mark.parametrize(
    "spec, match",
    [
        ("/no/such/video.mp4", "no such file or folder"),
        ("ftp://host/x.mp4", "unsupported URL scheme 'ftp'"),
        ("", "empty source"),
        (-1, "camera index"),
    ],
)
def test_classify_errors(spec, match):
    with pytest.raises(UserError, match=match):
        classify_source(spec)


# ---------------------------------------------------------------------------- files
def test_video_file_yields_every_frame_in_rgb(tmp_path):
    path = write_video(tmp_path / "clip.avi", n=30, fps=30)
    with open_source(str(path)) as src:
        assert isinstance(src, VideoFileSource) and not src.live
        assert src.fps == pytest.approx(30.0)
        frames = list(src)
    assert [f.index for f in frames] == list(range(30))
    assert frames[3].timestamp == pytest.approx(3 / 30, abs=1e-3)
    img = frames[0].image
    assert img.dtype == np.uint8 and img.shape == (64, 96, 3)
    centre = img[32, 48].astype(int)  # frame 0 shows a red circle: RGB order, red channel high
    assert centre[0] > 150 and centre[2] < 100
    assert src.stats.read == 30 and src.stats.unreadable == 0 and not src.stats.ended_early


def test_mp4v_file(tmp_path):
    path = write_video(tmp_path / "clip.mp4", n=12, fourcc="mp4v")
    with open_source(path) as src:
        assert len(list(src)) == 12


def test_corrupt_frames_are_skipped_counted_and_indices_stay_aligned(tmp_path):
    path = corrupt_mjpeg_frames(write_video(tmp_path / "c.avi", n=30), [5, 6, 17])
    with open_source(path) as src:
        frames = list(src)
    assert [f.index for f in frames] == [i for i in range(30) if i not in (5, 6, 17)]
    assert src.stats.unreadable == 3 and src.stats.read == 27


def test_truncated_file_ends_cleanly(tmp_path):
    path = truncate(write_video(tmp_path / "t.avi", n=30), 0.6)
    with open_source(path) as src:
        frames = list(src)
    assert 5 < len(frames) < 30
    assert [f.index for f in frames] == list(range(len(frames)))
    assert src.stats.ended_early


@pytest.mark.parametrize(
    "content, match",
    [
        (b"this is not a video at all", "not a video OpenCV can read"),
        (b"", "not a video OpenCV can read"),
    ],
)
def test_not_a_video(tmp_path, content, match):
    f = tmp_path / "fake.mp4"
    f.write_bytes(content)
    with pytest.raises(UserError, match=match) as exc:
        open_source(f)
    assert "\n" not in str(exc.value)


def test_file_that_opens_but_never_decodes(tmp_path, monkeypatch):
    import app.sources as sources

    f = tmp_path / "opens.mp4"
    f.write_bytes(b"x")
    monkeypatch.setattr(sources.cv2, "VideoCapture", lambda path: FakeCapture(0))
    with pytest.raises(UserError, match="no frame could be decoded"):
        open_source(f)


def test_mp4_cut_before_its_index_is_not_a_video(tmp_path):
    path = truncate(write_video(tmp_path / "m.mp4", n=20, fourcc="mp4v"), 0.5)  # OpenCV puts moov at the end
    with pytest.raises(UserError, match="not a video"):
        open_source(path)


# ---------------------------------------------------------------------------- folders
def test_image_folder_natural_order_and_broken_images(tmp_path):
    folder = write_image_folder(tmp_path / "imgs", n=12, broken=[3])
    with open_source(folder) as src:
        assert isinstance(src, ImageFolderSource)
        frames = list(src)
    assert [f.index for f in frames] == [i for i in range(12) if i != 3]
    assert [f.source.rsplit("/", 1)[1] for f in frames[:4]] == ["frame1.png", "frame2.png", "frame3.png", "frame5.png"]
    assert src.stats.unreadable == 1 and src.stats.read == 11
    assert frames[0].image.shape == (60, 80, 3)


def test_empty_folder(tmp_path):
    (tmp_path / "readme.txt").write_text("x")
    with pytest.raises(UserError, match="holds no images"):
        open_source(tmp_path)


def test_iterable_source():
    with IterableSource((scene(i) for i in range(4)), fps=10) as src:
        frames = list(src)
    assert [f.timestamp for f in frames] == [0.0, 0.1, 0.2, 0.3] and src.stats.read == 4


# ---------------------------------------------------------------------------- sampling
@pytest.mark.parametrize("fps, every", [(30, 6), (29.97, 6), (25, 5), (60, 12), (5, 1), (2, 1)])
def test_default_every(fps, every):
    assert default_every(fps) == every


def test_sampler_is_deterministic_by_index():
    frames = [Frame(i, i / 30, np.zeros((2, 2, 3), np.uint8), "x") for i in range(20) if i != 12]
    sampler = Sampler(6)
    assert [f.index for f in sampler(frames)] == [0, 6, 18]
    assert sampler.skipped == 16


@pytest.mark.parametrize("every", [0, -2, 1.5, True])
def test_sampler_rejects_bad_every(every):
    with pytest.raises(UserError, match="--every"):
        Sampler(every)


# ---------------------------------------------------------------------------- live sources
def test_live_newest_frame_wins_and_drops_are_counted():
    src = LiveSource("fake", opener(FakeCapture(200, period=0.001)), retries=0)
    got = []
    with src:
        for frame in src:
            got.append(frame.index)
            time.sleep(0.01)  # a slow consumer
    assert got == sorted(got) and len(set(got)) == len(got)
    assert src.stats.dropped > 0 and src.stats.read == len(got)
    assert src.stats.received == 200 == src.stats.read + src.stats.dropped + src.stats.unreadable


def test_live_reconnects_with_backoff_then_ends(caplog):
    src = LiveSource(
        "fake", opener(FakeCapture(5, period=0.002), FakeCapture(5, period=0.002, start=100)), retries=2, backoff=0.02
    )
    with caplog.at_level(logging.WARNING, logger="app.live_source"), src:
        frames = list(src)
    assert src.stats.reconnects == 1
    assert len(frames) == src.stats.read and src.stats.read + src.stats.dropped == src.stats.received == 10
    values = [int(f.image[0, 0, 0]) for f in frames]
    assert any(v >= 100 for v in values)  # frames after the reconnect arrived
    waits = [r.args[1:3] for r in caplog.records if "reconnecting in" in r.msg]  # (delay s, attempt)
    assert waits == [(0.02, 1), (0.02, 1), (0.04, 2)], "back-off 0.02, reset by the frames after it, then doubled"
    assert any("no frames after 2 reconnect attempts" in r.getMessage() for r in caplog.records)


def test_live_that_never_sends_a_frame():
    with pytest.raises(UserError, match="no frame arrived within 0.2 s"):
        LiveSource("fake", opener(FakeCapture(0)), retries=50, backoff=0.05, connect_timeout=0.2)


def test_camera_that_cannot_open():
    with pytest.raises(UserError, match="--camera 97: the camera could not be opened"):
        open_source(97)


def test_stream_that_never_connects():
    url = f"rtsp://127.0.0.1:{_free_port()}/live"
    with pytest.raises(UserError, match="could not connect to the stream"):
        open_source(url, connect_timeout=2)


class _Server:
    """A local HTTP server for one folder that can be switched off (the stream 'drops')."""

    def __init__(self, folder):
        handler = functools.partial(_QuietHandler, directory=str(folder))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_http_stream_that_drops_ends_cleanly(tmp_path):
    write_video(tmp_path / "cam.avi", n=60)
    server = _Server(tmp_path)
    try:
        src = open_source(f"http://127.0.0.1:{server.port}/cam.avi", retries=2, backoff=0.05, connect_timeout=5)
    finally:
        server.stop()  # the server goes away: reconnects fail and the stream ends
    with src:
        assert src.live and src.kind == "stream"
        frames = list(src)
    assert frames and all(f.image.shape == (64, 96, 3) for f in frames)
    # every frame the server sent is accounted for: read + dropped + unreadable = received (60)
    assert src.stats.read == len(frames)
    assert src.stats.read + src.stats.dropped + src.stats.unreadable == src.stats.received == 60


# ---------------------------------------------------------------------------- frame size guards
def _bomb_png(path, side=20_000):
    """A 1-bit PNG declaring side x side pixels in a few tens of KB (1.2 GB once decoded to RGB)."""
    from PIL import Image

    Image.new("1", (side, side)).save(path, optimize=True)
    return path


def test_frame_size_guard_and_limit_parsing():
    from app.frames import MAX_PIXELS, check_frame_size, parse_max_pixels

    assert MAX_PIXELS == 4096 * 4096 and parse_max_pixels("4096x4096") == MAX_PIXELS
    assert parse_max_pixels("1000") == 1000 and parse_max_pixels("640X480") == 640 * 480
    for bad in ("0", "x", "-5", "10x", "big"):
        with pytest.raises(UserError, match="--max-pixels"):
            parse_max_pixels(bad)
    check_frame_size(4096, 4096)
    with pytest.raises(UserError, match="4097x4096 is 16,781,312 pixels, above the limit of 16,777,216"):
        check_frame_size(4097, 4096)


def test_image_bomb_is_refused_from_its_header(tmp_path):
    import resource

    from app.frames import decode_image

    bomb = _bomb_png(tmp_path / "bomb.png")
    assert bomb.stat().st_size < 200_000
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(UserError, match="bomb.png: 400,000,000 pixels, above the limit of 16,777,216"):
        decode_image(bomb)  # PIL's own guard fires first at this size
    mid = _bomb_png(tmp_path / "mid.png", side=8000)  # below PIL's guard: ours reads the header
    with pytest.raises(UserError, match="mid.png: 8000x8000 is 64,000,000 pixels, above the limit of 1,000,000"):
        decode_image(mid, limit=1_000_000)
    with pytest.raises(UserError, match="above the limit"):
        decode_image(bomb.read_bytes(), what="upload")
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 100  # never decoded (1.2 GB as RGB)
    ok = decode_image(_bomb_png(tmp_path / "small.png", side=64), limit=64 * 64)
    assert ok.shape == (64, 64, 3) and ok.dtype == np.uint8
    (tmp_path / "junk.png").write_bytes(b"not an image")
    with pytest.raises(UserError, match="not a readable image"):
        decode_image(tmp_path / "junk.png")


def test_folder_refuses_a_bomb_and_shrinks_large_images(tmp_path):
    from PIL import Image

    from app.frames import MAX_SIDE

    folder = tmp_path / "imgs"
    folder.mkdir()
    Image.fromarray(scene(0, 2000, 1000)).save(folder / "a.png")
    with open_source(str(folder)) as src:
        (frame,) = list(src)
    assert frame.image.shape == (MAX_SIDE // 2, MAX_SIDE, 3)  # scaled down at once, aspect kept
    _bomb_png(folder / "b.png")
    with open_source(str(folder)) as src, pytest.raises(UserError, match="b.png: 400,000,000 pixels, above the limit"):
        list(src)


def test_video_declared_size_is_checked_before_decoding(tmp_path):
    video = write_video(tmp_path / "v.avi", n=3, size=(96, 64))
    with pytest.raises(UserError, match=r"--video .*v.avi: 96x64 is 6,144 pixels, above the limit of 6,000"):
        open_source(str(video), max_pixels=6000)
    with open_source(str(video), max_pixels=96 * 64) as src:
        assert len(list(src)) == 3 and src.length == 3


class _DeclaredCapture(FakeCapture):
    """A stream that declares (or, undeclared, sends) frames of a given size."""

    def __init__(self, n, size, declare=True):
        super().__init__(n)
        self.size, self.declare = size, declare

    def get(self, prop):
        import cv2

        if self.declare and prop == cv2.CAP_PROP_FRAME_WIDTH:
            return float(self.size[0])
        if self.declare and prop == cv2.CAP_PROP_FRAME_HEIGHT:
            return float(self.size[1])
        return 0.0

    def read(self):
        ok, img = super().read()
        return (ok, np.zeros((self.size[1], self.size[0], 3), np.uint8)) if ok else (ok, img)


def test_live_stream_above_the_pixel_limit_is_refused_and_counted():
    with pytest.raises(UserError, match="--video big: 8000x8000 is 64,000,000 pixels, above the limit"):
        LiveSource("big", opener(_DeclaredCapture(3, (8000, 8000))), flag="--video big", retries=0)
    # a stream that does not declare its size: its first oversized frame ends it with one line
    src = LiveSource(
        "liar",
        opener(
            _DeclaredCapture(1, (40, 30), declare=False),
        ),
        flag="--video liar",
        retries=0,
        max_pixels=40 * 30,
    )
    with src:
        assert len(list(src)) == 1
    with pytest.raises(UserError, match="--video liar2: a 50x40 frame is above the limit of 1,200 pixels"):
        LiveSource(
            "liar2",
            opener(_DeclaredCapture(2, (50, 40), declare=False)),
            flag="--video liar2",
            retries=0,
            max_pixels=1200,
            connect_timeout=2,
        )


def test_large_live_frames_are_shrunk_on_arrival():
    from app.frames import MAX_SIDE

    src = LiveSource("wide", opener(_DeclaredCapture(2, (2560, 1440))), retries=0)
    with src:
        frames = list(src)
    assert frames and all(f.image.shape == (720, MAX_SIDE, 3) for f in frames)
    assert src.stats.received == 2 == src.stats.read + src.stats.dropped + src.stats.unreadable
