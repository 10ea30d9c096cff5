"""What a headless run says about its model: the RANDOM WEIGHTS banner on every annotated frame of
a random-weight run (read back from the MP4), and the engine's logit scale taken from the
checkpoint unless `--set logit_scale=...` gives one (issue 17)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from helpers_video import read_video, tiny_clip, write_labels, write_video

from app.annotate import MARK_COLOR, mark_height
from app.pipeline import DemoConfig, run_pipeline


@pytest.fixture
def media(tmp_path):
    return {
        "labels": str(write_labels(tmp_path / "labels.txt")),
        "video": str(write_video(tmp_path / "clip.avi", n=12, fps=30)),
        "dir": tmp_path,
    }


def _run(media, clip, name, **kw):
    cfg = DemoConfig(
        video=media["video"],
        labels=media["labels"],
        every=3,
        out=str(media["dir"] / f"{name}.mp4"),
        log=str(media["dir"] / f"{name}.jsonl"),
        **kw,
    )
    summary = run_pipeline(cfg, clip=clip)
    frames, _, _ = read_video(cfg.out)
    rows = [json.loads(line) for line in open(cfg.log, encoding="utf-8")]
    return summary, frames, rows


def _banner(frame: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the banner's right end, its left part where the text is) of an annotated frame."""
    h = mark_height(frame.shape[1])
    w = frame.shape[1]
    return frame[3 : h - 3, w - 60 : w - 8].reshape(-1, 3), frame[3 : h - 3, 8 : w // 2].reshape(-1, 3)


def test_random_weights_mark_every_frame_and_real_weights_do_not(media):
    clip = tiny_clip()
    assert clip.pretrained == "none"
    summary, frames, _ = _run(media, clip, "random")
    assert summary["random_weights"] is True and len(frames) == 4
    for frame in frames:
        plain, text = _banner(frame)
        assert np.abs(plain.mean(0) - MARK_COLOR).max() < 25  # the yellow banner, after H.264
        assert (text.max(1) < 90).sum() > 50  # with dark text on it
    trained = dataclasses.replace(clip, pretrained="a-checkpoint.pt")  # the same model, named as trained
    summary, frames, _ = _run(media, trained, "trained")
    assert summary["random_weights"] is False and len(frames) == 4
    for frame in frames:
        plain, _ = _banner(frame)
        assert np.abs(plain.mean(0) - MARK_COLOR).max() > 60  # the picture itself: no banner


def test_the_engine_uses_the_checkpoints_logit_scale_unless_set(media):
    clip = tiny_clip()
    own = float(clip.logit_scale)
    assert own == pytest.approx(1 / 0.07, rel=1e-3)  # open_clip's initial scale, not 100
    summary, _, rows = _run(media, clip, "own")
    assert summary["logit_scale"] == pytest.approx(own, abs=1e-3) and summary["logit_scale_from"] == "checkpoint"
    summary100, _, rows100 = _run(media, clip, "set", overrides=["logit_scale=100"])
    assert summary100["logit_scale"] == 100.0 and summary100["logit_scale_from"] == "--set"
    # CLIP's entropy is computed at the engine's scale: a sharper softmax at 100 than at 14.3
    assert all(a["entropy"] > b["entropy"] for a, b in zip(rows, rows100))


def test_a_checkpoint_scale_out_of_bounds_is_one_line_naming_the_fix():
    from types import SimpleNamespace

    from app.pipeline import demo_engine_config, with_model_scale
    from mstta.errors import UserError

    odd = SimpleNamespace(name="RN50", pretrained="odd.pt", logit_scale=1e9)  # above the bound of 1e6
    with pytest.raises(
        UserError,
        match=r"--model RN50 --pretrained odd.pt: the checkpoint's logit scale 1e\+09 .*"
        r"pass --set logit_scale=100",
    ):
        with_model_scale(demo_engine_config(64, []), odd, [])
    assert with_model_scale(demo_engine_config(64, ["logit_scale=50"]), odd, ["logit_scale=50"]).logit_scale == 50
