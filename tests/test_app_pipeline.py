"""The headless pipeline end to end with the tiny CLIP: complete outputs, the JSONL schema, summary
numbers that agree with the log, damaged and live sources, and interruption."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers_video import (
    LABELS,
    FakeCapture,
    corrupt_mjpeg_frames,
    opener,
    read_video,
    scene,
    tiny_clip,
    write_image_folder,
    write_labels,
    write_video,
)

from app.pipeline import DemoConfig, demo_engine_config, run_pipeline, with_model_scale
from app.sources import IterableSource, LiveSource
from mstta.errors import UserError

ROW_KEYS = {
    "frame",
    "timestamp",
    "clip",
    "tta",
    "method",
    "disagree",
    "entropy",
    "cache_size",
    "bank_size",
    "latency_ms",
}


@pytest.fixture
def media(tmp_path):
    labels = write_labels(tmp_path / "labels.txt")
    video = write_video(tmp_path / "clip.avi", n=90, fps=30)
    truth = tmp_path / "truth.csv"
    truth.write_text(
        "start_frame,end_frame,label\n0,9,red circle\n10,19,green square\n20,29,blue triangle\n30,59,red circle\n",
        encoding="utf-8",
    )
    return {"labels": str(labels), "video": str(video), "truth": str(truth), "dir": tmp_path}


def _cfg(media, **kw) -> DemoConfig:
    base = dict(
        video=media["video"],
        labels=media["labels"],
        out=str(media["dir"] / "out" / "a.mp4"),
        log=str(media["dir"] / "out" / "p.jsonl"),
        model="mstta-tiny",
        pretrained="none",
    )
    return DemoConfig(**{**base, **kw})


def _rows(path) -> list[dict]:
    return [json.loads(line) for line in open(path, encoding="utf-8")]


def _switches(labels: list[str]) -> int:
    return sum(a != b for a, b in zip(labels, labels[1:]))


def test_outputs_complete_and_summary_matches_the_log(tiny_clip, media):
    cfg = _cfg(media, truth=media["truth"], topk=2)
    s = run_pipeline(cfg, clip=tiny_clip)
    rows = _rows(cfg.log)
    frames, times, _ = read_video(cfg.out)

    # default stride for 30 fps: every 6th frame; all counts consistent
    assert s["every"] == 6 and s["frames_read"] == 90
    assert s["frames_processed"] == len(rows) == len(frames) == 15
    assert s["frames_read"] == s["frames_processed"] + s["frames_skipped"] + s["frames_dropped"]
    assert (
        s["frames_received"]
        == s["frames_processed"] + s["frames_skipped"] + s["frames_dropped"] + s["frames_unreadable"]
    )
    assert [r["frame"] for r in rows] == list(range(0, 90, 6))
    assert times == pytest.approx([r["timestamp"] for r in rows], abs=2e-3)

    # JSONL schema
    for r in rows:
        assert ROW_KEYS <= set(r) and r["method"] == "ms-tta"
        for key in ("clip", "tta"):
            assert len(r[key]) == 2 and {e["label"] for e in r[key]} <= set(LABELS)
            probs = [e["prob"] for e in r[key]]
            assert probs == sorted(probs, reverse=True) and all(0 <= p <= 1 for p in probs)
        assert r["disagree"] == (r["clip"][0]["label"] != r["tta"][0]["label"])
        assert r["latency_ms"] > 0 and r["entropy"] >= 0
    assert [r["bank_size"] for r in rows] == list(range(1, 16))

    # summary numbers recomputed from the log
    clip_top = [r["clip"][0]["label"] for r in rows]
    tta_top = [r["tta"][0]["label"] for r in rows]
    assert s["agreement"] == pytest.approx(100 * np.mean([a == b for a, b in zip(clip_top, tta_top)]), abs=0.01)
    minutes = (rows[-1]["timestamp"] - rows[0]["timestamp"]) / 60
    assert s["switches_per_min_clip"] == pytest.approx(_switches(clip_top) / minutes, abs=0.01)
    assert s["switches_per_min_tta"] == pytest.approx(_switches(tta_top) / minutes, abs=0.01)
    labelled = [r for r in rows if "truth" in r]
    assert s["labelled_frames"] == len(labelled) == 10  # frames 0..59, every 6th
    assert s["accuracy_clip"] == pytest.approx(
        100 * np.mean([r["clip"][0]["label"] == r["truth"] for r in labelled]), abs=0.01
    )
    assert s["accuracy_tta"] == pytest.approx(
        100 * np.mean([r["tta"][0]["label"] == r["truth"] for r in labelled]), abs=0.01
    )
    assert s["fps"] > 0 and s["latency_ms_p50"] <= s["latency_ms_p95"]
    assert s["out"] == cfg.out and s["log"] == cfg.log and not s["interrupted"]
    assert json.loads(json.dumps(s)) == s


def test_every_and_max_frames(tiny_clip, media):
    s = run_pipeline(_cfg(media, every=1, max_frames=7, out=None), clip=tiny_clip)
    assert s["frames_processed"] == 7 and s["every"] == 1 and s["out"] is None
    assert [r["frame"] for r in _rows(media["dir"] / "out" / "p.jsonl")] == list(range(7))


def test_corrupt_frames_are_counted_not_fatal(tiny_clip, media):
    video = corrupt_mjpeg_frames(write_video(media["dir"] / "bad.avi", n=30), [3, 4, 20])
    s = run_pipeline(_cfg(media, video=str(video), every=2), clip=tiny_clip)
    assert s["frames_unreadable"] == 3 and s["frames_read"] == 27
    assert s["frames_processed"] == 13  # even indices 0..28 minus 4 and 20
    assert s["frames_read"] == s["frames_processed"] + s["frames_skipped"]
    assert s["frames_received"] == 30 == s["frames_read"] + s["frames_unreadable"]


def test_image_folder_source(tiny_clip, media):
    folder = write_image_folder(media["dir"] / "imgs", n=8, broken=[2])
    s = run_pipeline(_cfg(media, video=str(folder)), clip=tiny_clip)
    assert s["source_kind"] == "folder" and s["every"] == 1
    assert s["frames_processed"] == 7 and s["frames_unreadable"] == 1
    assert len(read_video(media["dir"] / "out" / "a.mp4")[0]) == 7


def test_live_source_drops_are_counted(tiny_clip, media):
    src = LiveSource("fake", opener(FakeCapture(60, period=0.002)), retries=0)
    s = run_pipeline(_cfg(media, video=None), clip=tiny_clip, source=src)
    assert s["source_kind"] == "stream" and s["every"] == 1
    assert s["frames_processed"] > 0
    assert s["frames_read"] == s["frames_processed"]
    # every frame the stream delivered is accounted for (issue 12: the statistics add up)
    assert s["frames_received"] == 60 == s["frames_read"] + s["frames_dropped"] + s["frames_unreadable"]
    assert len(_rows(media["dir"] / "out" / "p.jsonl")) == s["frames_processed"]


def test_interruption_leaves_valid_outputs(tiny_clip, media):
    def stop_at(frame, result):
        if frame.index == 24:
            raise KeyboardInterrupt

    s = run_pipeline(_cfg(media, every=3), clip=tiny_clip, on_frame=stop_at)
    assert s["interrupted"] and s["frames_processed"] == 9
    assert len(_rows(media["dir"] / "out" / "p.jsonl")) == 9
    assert len(read_video(media["dir"] / "out" / "a.mp4")[0]) == 9
    assert [p.name for p in (media["dir"] / "out").iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("views_on", ["cpu", "device"])
def test_views_are_made_where_views_on_says(tiny_clip, media, monkeypatch, views_on):
    """--views-on reaches the session's encoder: PIL crops (cpu) or tensor views (device; the fast
    path on a CPU), the same run otherwise."""
    import app.session as session_mod

    seen = []
    real = session_mod.FrameEncoder
    monkeypatch.setattr(session_mod, "FrameEncoder", lambda *a, **k: seen.append(real(*a, **k)) or seen[-1])
    s = run_pipeline(_cfg(media, views=3, views_on=views_on, max_frames=4), clip=tiny_clip)
    assert s["frames_processed"] == 4 and [e.views_on for e in seen] == [views_on]


def test_memory_source_and_other_methods(tiny_clip, media):
    src = IterableSource((scene(i) for i in range(10)), fps=5)
    s = run_pipeline(_cfg(media, video=None, out=None, method="tda", overrides=["k=3"]), clip=tiny_clip, source=src)
    assert s["frames_processed"] == 10 and s["method"] == "tda"


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"labels": None}, "--labels is required"),
        ({"video": None}, "give a source"),
        ({"camera": 0}, "either --video or --camera"),
        ({"views": 257}, r"--views 257: expected an integer in \[1, 256\] \(1 = the frame only\)"),
        ({"max_pixels": 0}, "--max-pixels"),
        ({"method": "nope"}, "unknown method 'nope'"),
        ({"overrides": ["nope=1"]}, "unknown key 'nope'"),
        ({"overrides": ["k=-1"]}, "bad value for 'k'"),
        ({"overrides": ["k"]}, "expected KEY=VALUE"),
        ({"bank_size": 0}, "--bank-size"),
        ({"every": 0}, "--every"),
        ({"max_frames": 0}, "--max-frames"),
        ({"topk": 0}, "--topk"),
        ({"views": 0}, "--views"),
        ({"views": 3, "views_on": "gpu"}, "--views-on gpu: choose one of auto, cpu, device"),
        ({"template": "no braces"}, "--template"),
        ({"out": "x.avi"}, "--out x.avi: must end in"),
        ({"truth": "missing.csv"}, "--truth missing.csv: no such file"),
    ],
)
def test_bad_config_fails_before_any_work(tiny_clip, media, kw, match, monkeypatch):
    """Refused before any source is opened or any text or image goes through the model."""
    import app.pipeline as pipeline_mod

    work: list[str] = []

    def spy(name, real):
        return lambda *a, **k: work.append(name) or real(*a, **k)

    monkeypatch.setattr(pipeline_mod, "open_source", spy("open_source", pipeline_mod.open_source))
    for name in ("encode_image", "encode_text"):
        monkeypatch.setattr(tiny_clip.model, name, spy(name, getattr(tiny_clip.model, name)))
    with pytest.raises(UserError, match=match):
        run_pipeline(_cfg(media, **kw), clip=tiny_clip)
    assert work == [], f"work done before the refusal: {work}"
    assert not (media["dir"] / "out" / "p.jsonl").exists()


def test_prepare_needs_neither_labels_nor_source(media):
    """The UI checks its flags with `prepare` before the model loads; it may start with neither."""
    from app.pipeline import prepare

    prep = prepare(DemoConfig(template="a photo of a {}.", overrides=["k=4"], bank_size=128))
    assert prep.labels is None and prep.truth is None and (prep.engine_cfg.k, prep.engine_cfg.bank_size) == (4, 128)
    with pytest.raises(UserError, match="--truth needs --labels"):
        prepare(DemoConfig(truth=media["truth"]))
    full = prepare(DemoConfig(labels=media["labels"], truth=media["truth"]))
    assert full.labels == LABELS and len(full.truth) == 4


def test_engine_config_layers():
    cfg = demo_engine_config(128, ["k=4", "alpha=0.5"])
    assert (cfg.bank_size, cfg.k, cfg.alpha) == (128, 4, 0.5)
    assert demo_engine_config(128, ["bank_size=64"]).bank_size == 64


def test_summary_memory_is_bounded(monkeypatch):
    import app.summary as summary_mod
    from app.session import FrameResult, Scored
    from app.sources import Frame, SourceStats

    monkeypatch.setattr(summary_mod, "LATENCY_SAMPLES", 50)
    s = summary_mod.RunSummary()
    top = [Scored("a", 0, 0.9), Scored("b", 1, 0.1)]
    for i in range(1000):
        s.update(
            Frame(i, i / 10, np.zeros((2, 2, 3), np.uint8), "x"),
            FrameResult(top, top, 0.1, 0, 0, 0, latency_ms=float(i % 100)),
        )
    out = s.finish(SourceStats(read=1000, received=1000))
    assert len(s.latencies) == 50 and 20 <= out["latency_ms_p50"] <= 80
    assert out["agreement"] == 100.0 and out["switches_per_min_clip"] == 0.0
    assert "1000 frames processed of 1000 received" in summary_mod.format_summary(out)


def test_demo_assets_match_their_labels_and_truth(monkeypatch):
    import sys
    from pathlib import Path

    monkeypatch.setattr(sys, "path", [str(Path(__file__).resolve().parent.parent / "assets"), *sys.path])
    import cv2

    from app.labels import read_labels
    from app.truth import read_truth

    assets = Path(__file__).resolve().parent.parent / "assets"
    labels = read_labels(assets / "labels.txt")
    truth = read_truth(assets / "truth.csv", labels)
    video = assets / "demo.mp4"
    assert video.stat().st_size < 4_000_000
    cap = cv2.VideoCapture(str(video))
    frames, fps = int(cap.get(cv2.CAP_PROP_FRAME_COUNT)), cap.get(cv2.CAP_PROP_FPS)
    size = (int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT)))
    cap.release()
    assert size == (384, 288) and fps == pytest.approx(24) and 30 <= frames / fps <= 60
    import av

    with av.open(str(video)) as container:  # H.264, which browsers play
        assert container.streams.video[0].codec_context.name == "h264"
    import make_assets  # the generator's class list is the labels file

    assert labels == list(make_assets.PHOTOS)
    assert truth.ranges[0][0] == 0 and truth.ranges[-1][1] == frames - 1
    assert {labels[c] for _, _, c in truth.ranges} == set(labels)


# ---------------------------------------------------------------------------- the one frame loop
def test_iter_steps_yields_each_processed_frame_inside_the_model_slot(tiny_clip, media):
    from contextlib import contextmanager

    from app.pipeline import iter_steps
    from app.session import StreamSession
    from app.truth import read_truth

    labels = LABELS
    session = StreamSession(tiny_clip, labels)
    truth = read_truth(media["truth"], labels)
    events = []

    @contextmanager
    def slot():
        events.append("acquire")
        yield
        events.append("release")

    def frames():
        for frame in IterableSource([scene(i) for i in range(40)]):
            events.append(f"frame {frame.index}")
            yield frame

    steps = []
    for step in iter_steps(frames(), session, truth=truth, max_frames=25, model_slot=slot):
        events.append("step")  # the slot is released before the step reaches the consumer
        steps.append(step)
    assert [s.processed for s in steps] == list(range(1, 26))
    assert events[:8] == ["frame 0", "acquire", "release", "step", "frame 1", "acquire", "release", "step"]
    assert events.count("acquire") == events.count("release") == 25 and "frame 25" not in events
    assert [s.truth_label for s in steps[8:12]] == ["red circle", "red circle", "green square", "green square"]
    assert steps[0].fps is None and all(s.fps and s.fps > 0 for s in steps[1:])
    assert all(s.result.clip_topk and s.result.tta_topk for s in steps)


def test_iter_steps_matches_the_headless_run(tiny_clip, media):
    """The UI's loop and run_pipeline are the same loop: same predictions frame by frame."""
    from app.pipeline import iter_steps
    from app.sampling import Sampler
    from app.session import StreamSession
    from app.sources import open_source

    cfg = _cfg(media, every=3, out=None)
    run_pipeline(cfg, clip=tiny_clip)
    logged = [(r["frame"], r["clip"][0]["label"], r["tta"][0]["label"]) for r in _rows(cfg.log)]
    session = StreamSession(
        tiny_clip, LABELS, config=with_model_scale(demo_engine_config(cfg.bank_size, []), tiny_clip, [])
    )
    with open_source(media["video"]) as src:
        ours = [(s.frame.index, s.result.clip_label, s.result.tta_label) for s in iter_steps(Sampler(3)(src), session)]
    assert ours == logged and len(ours) == 30


# ---------------------------------------------------------------------------- progress
class _FakeClock:
    """A clock that advances `step` seconds each time it is read: progress timing without waiting."""

    def __init__(self, step: float):
        self.now, self.step = 1000.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def _run_cli_in_process(media, capsys, monkeypatch, frames, *extra):
    import app.progress as progress_mod
    from app.cli import main

    monkeypatch.setattr(progress_mod, "PLAIN_INTERVAL_S", 3.0)
    monkeypatch.setattr(progress_mod, "CLOCK", _FakeClock(0.5))  # read once per frame: a line every ~6 frames
    code = main(
        [
            "--headless",
            "--video",
            media["video"],
            "--labels",
            media["labels"],
            "--model",
            "mstta-tiny",
            "--pretrained",
            "none",
            "--every",
            "1",
            "--max-frames",
            str(frames),
            *extra,
        ]
    )
    out, err = capsys.readouterr()
    return code, out, err


def test_progress_lines_on_a_non_tty_stderr_and_quiet_silences_them(tiny_clip, media, capsys, monkeypatch):
    import re

    code, out, err = _run_cli_in_process(media, capsys, monkeypatch, 24)
    assert code == 0 and "24 frames processed" in out
    lines = [
        line for line in err.splitlines() if re.fullmatch(r"mstta-demo: \d+/24 frames, [\d.]+ fps, ETA \d+:\d\d", line)
    ]
    counts = [int(re.search(r"(\d+)/24", line).group(1)) for line in lines]
    assert counts == [6, 12, 18, 24], err  # one line per 3 s of the fake clock: every 6 frames of 0.5 s
    assert "\r" not in err  # no bar redraws on a non-terminal

    code, out, err = _run_cli_in_process(media, capsys, monkeypatch, 12, "--quiet")
    assert code == 0 and "12 frames processed" in out
    assert "frames," not in err and err.strip() == ""


def test_progress_bar_on_a_terminal(monkeypatch):
    import io

    from app.progress import Progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    stream = Tty()
    p = Progress(total=10, stream=stream)
    for i in range(1, 11):
        p.update(i, 5.0)
    p.close()
    text = stream.getvalue()
    assert "10/10" in text and "frame" in text and "\r" in text  # tqdm's bar, redrawn in place
    silent = Tty()
    q = Progress(total=10, stream=silent, enabled=False)
    q.update(5, 1.0)
    q.close()
    assert silent.getvalue() == ""


def test_tiny_clip_helper_loads_the_model_once():
    first = tiny_clip()
    hits = tiny_clip.cache_info().hits
    assert tiny_clip() is first and tiny_clip.cache_info().hits == hits + 1 and tiny_clip.cache_info().currsize == 1


def test_summary_plurals():
    from app.sources import SourceStats
    from app.summary import RunSummary, format_summary

    out = RunSummary().finish(SourceStats(read=1, received=1))
    out.update(frames_processed=1, labelled_frames=1, accuracy_clip=100.0, accuracy_tta=0.0)
    text = format_summary(out)
    assert text.startswith("1 frame processed of 1 received") and "on 1 labelled frame" in text
    out.update(frames_processed=2, labelled_frames=2)
    assert format_summary(out).startswith("2 frames processed") and "on 2 labelled frames" in format_summary(out)
