"""The bundled digits model (`mstta-digits`, tag `bundled`) and its clip (assets/digits*): loads
offline, is open_clip's format with a learned logit scale, means something on clean held-out
digits, and the clip, labels and truth agree with each other and with assets/make_digits.py."""

from __future__ import annotations

import importlib.util
import socket
from pathlib import Path

import numpy as np
import pytest
import torch

import mstta.features.models as models
import mstta.features.weights as weights
from app.labels import read_labels
from app.truth import read_truth
from mstta.data.templates import DEFAULT_TEMPLATES
from mstta.errors import UserError
from mstta.features.models import BUNDLED_TAG, default_pretrained, load_clip

REPO = Path(__file__).resolve().parent.parent
ASSETS = REPO / "assets"
CHECKPOINT = ASSETS / "mstta-digits.pt"
VIDEO, LABELS, TRUTH = ASSETS / "digits.mp4", ASSETS / "digits_labels.txt", ASSETS / "digits_truth.csv"
CLEAN_ACCURACY_FLOOR = 80.0  # issue 17: zero-shot accuracy on the clean test split


def _make_digits():
    """assets/make_digits.py as a module (the split, the drawing and the clip's digits live there)."""
    spec = importlib.util.spec_from_file_location("make_digits", ASSETS / "make_digits.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def md():
    return _make_digits()


@pytest.fixture(scope="module")
def digits():
    return load_clip("mstta-digits", BUNDLED_TAG, device="cpu")


def test_loads_offline_with_its_default_tag(monkeypatch):
    """No probe, no connection: the default tag (and the CLIs' default `openai`) is the shipped file."""
    probed, tried = [], []
    monkeypatch.setattr(weights, "network_reachable", lambda host, port=443, timeout=0: probed.append(host) or False)

    def refuse(self, address, *args, **kwargs):
        tried.append(address)
        raise OSError("network disabled by the test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    assert default_pretrained("mstta-digits") == BUNDLED_TAG and default_pretrained("ViT-B-16") == "openai"
    a = load_clip("mstta-digits", default_pretrained("mstta-digits"), device="cpu")
    b = load_clip("mstta-digits", "openai", device="cpu")
    assert probed == [] and tried == []
    assert a.pretrained == b.pretrained == BUNDLED_TAG
    x = torch.randn(2, 3, a.image_size, a.image_size)
    assert torch.equal(a.encode_images(x), b.encode_images(x))


def test_missing_or_bad_bundled_checkpoint_is_one_line_user_error(tmp_path, monkeypatch):
    monkeypatch.setitem(models.BUNDLED_CHECKPOINTS, "mstta-digits", tmp_path / "gone.pt")
    with pytest.raises(UserError) as err:
        load_clip("mstta-digits", BUNDLED_TAG, device="cpu")
    msg = str(err.value)
    assert "\n" not in msg and "gone.pt" in msg and "make_digits.py" in msg
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    monkeypatch.setitem(models.BUNDLED_CHECKPOINTS, "mstta-digits", tmp_path / "bad.pt")
    with pytest.raises(UserError, match="could not load checkpoint .*bad.pt into mstta-digits"):
        load_clip("mstta-digits", BUNDLED_TAG, device="cpu")
    with pytest.raises(UserError, match="known: bundled"):
        load_clip("mstta-digits", "laion2b", device="cpu")


def test_checkpoint_is_open_clip_state_dict_with_learned_scale(digits):
    import open_clip

    sd = torch.load(CHECKPOINT, map_location="cpu", weights_only=True)
    fresh = open_clip.create_model("mstta-digits")  # the config registered by load_clip
    assert set(sd) == set(fresh.state_dict())
    assert all(sd[k].shape == v.shape for k, v in fresh.state_dict().items())
    assert {v.dtype for v in sd.values() if v.is_floating_point()} == {torch.float16}
    fresh.load_state_dict(sd, strict=True)
    assert 1e6 < CHECKPOINT.stat().st_size < 5e6
    scale = float(sd["logit_scale"].float().exp())
    assert digits.logit_scale == pytest.approx(scale, rel=1e-3)
    # learned: moved away from CLIP's init 1/0.07 and below CLIP's cap of 100
    assert abs(scale - 1 / 0.07) > 1.0 and scale < 100.0
    assert digits.pretrained == BUNDLED_TAG and models.weights_id(digits).startswith("file:")


def test_zero_shot_accuracy_on_the_clean_test_split(md, digits):
    """Computed here from sklearn's digits (the fixed split), drawn as the clip draws them."""
    xs, ys = md.digits_split()["test"]
    assert len(ys) > 500
    images = md.pixels(digits, [md.as_rgb(md.render(d)) for d in xs])
    acc = md.zero_shot_accuracy(digits, images, ys, list(DEFAULT_TEMPLATES))
    assert acc >= CLEAN_ACCURACY_FLOOR, acc
    chance = md.zero_shot_accuracy(digits, images, np.roll(ys, 1), list(DEFAULT_TEMPLATES))
    assert chance < 40.0  # and not by predicting everything alike


def smooth(frame: np.ndarray) -> np.ndarray:
    """A frame without its per-frame sensor noise (which H.264 does not keep pixel for pixel)."""
    import cv2

    return cv2.GaussianBlur(frame.astype(np.float32), (0, 0), 2.0)


def test_clip_labels_and_truth_agree(md):
    import av

    names = read_labels(LABELS)
    assert names == md.CLASSNAMES and len(names) == 10
    truth = read_truth(TRUTH, names)
    with av.open(str(VIDEO)) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "h264" and stream.codec_context.pix_fmt == "yuv420p"
        width, height, fps = stream.codec_context.width, stream.codec_context.height, float(stream.average_rate)
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(stream)]
    # a minute or two (issue 24), every digit on screen long enough to read
    assert width % 2 == 0 and height % 2 == 0 and 60 <= len(frames) / fps <= 150
    assert fps == md.FPS and md.SEGMENT_FRAMES / fps >= 0.4
    ranges = truth.ranges
    assert ranges[0][0] == 0 and ranges[-1][1] == len(frames) - 1
    assert all(e0 + 1 == s1 for (_, e0, _), (s1, _, _) in zip(ranges, ranges[1:]))  # every frame labelled
    assert all(e - s + 1 == md.SEGMENT_FRAMES for s, e, _ in ranges)
    _, labels = md.clip_digits(0)
    assert [c for _, _, c in ranges] == list(labels)
    scenes = md.scene_of_digits()
    assert len(scenes) == len(labels) and scenes[0] == md.LEAD_IN
    start = 0
    for scene in md.SCENES:  # each scene shows every class equally often
        part = labels[start : start + scene.digits]
        assert np.bincount(part, minlength=10).tolist() == [scene.digits // 10] * 10
        start += scene.digits
    # the opening frames are the unshifted drawing of the first digit (within H.264's error) ...
    clean = md.as_rgb(md.render(md.clip_digits(0)[0][0]))
    assert np.abs(frames[0].astype(np.float32) - clean).mean() < 4.0
    # ... and the first frames after each scene change are that scene as make_digits.py draws it
    assert len(md.SCENES) >= 3  # two scene changes after the lead-in (issue 29: recovery in sight)
    lead = md.LEAD_IN.digits * md.SEGMENT_FRAMES
    starts = np.cumsum([s.digits for s in md.SCENES])[:-1] * md.SEGMENT_FRAMES
    drawn = [x for _, x in zip(range(starts[-1] + md.SEGMENT_FRAMES), md.clip_frames(0))]
    for start in starts:
        for i, f in drawn[start : start + md.SEGMENT_FRAMES]:  # sensor noise H.264 smooths: compare blurred
            assert np.abs(smooth(frames[i]) - smooth(f)).mean() < 4.0
        before = frames[start - 1].astype(np.float32)  # a different scene's (and digit's) picture
        assert np.abs(frames[start].astype(np.float32) - before).mean() > 4.0
    shifted_first = md.as_rgb(md.render(md.clip_digits(0)[0][md.LEAD_IN.digits]))
    assert np.abs(frames[lead].astype(np.float32) - shifted_first).mean() > 8.0
    assert VIDEO.stat().st_size < 3e6


def test_clip_digits_are_held_out(md):
    """The clip draws only test-split digits: none of them equals a training image."""
    train = md.digits_split()["train"][0].reshape(-1, 64)
    shown = md.clip_digits(0)[0].reshape(-1, 64)
    assert not (shown[:, None, :] == train[None, :, :]).all(-1).any()
    assert len(np.unique(shown, axis=0)) == len(shown)  # and each is shown once
