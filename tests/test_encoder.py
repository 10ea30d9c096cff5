"""`app.encoder.FrameEncoder` follows each model's own open_clip preprocessing (size, mean/std,
interpolation, resize mode) and makes its extra views with `mstta.features.views`, exactly as the benchmark."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers_video import scene
from PIL import Image

from app.encoder import MAX_VIEWS, VIEW_CHUNK, FrameEncoder
from mstta.errors import UserError
from mstta.features.models import MODEL_CONFIG_DIR, ClipModel
from mstta.features.views import Preprocess, ViewMaker, split_preprocess, to_pixels


def _tiny_variant(tmp_path, name: str, image_size: int, **force) -> ClipModel:
    """A copy of mstta-tiny under `name` with another image size; `force` sets open_clip's
    image_mean / image_std / image_resize_mode / image_interpolation."""
    import open_clip

    cfg = json.loads((MODEL_CONFIG_DIR / "mstta-tiny.json").read_text())
    cfg["vision_cfg"]["image_size"] = image_size
    folder = tmp_path / name
    folder.mkdir()
    (folder / f"{name}.json").write_text(json.dumps(cfg))
    open_clip.add_model_config(folder)
    torch.manual_seed(0)
    model, _, preprocess = open_clip.create_model_and_transforms(name, pretrained=None, device="cpu", **force)
    model.eval()
    clip = ClipModel(
        model, Preprocess.of(model), open_clip.get_tokenizer(name), name, "none", torch.device("cpu"), "fp32"
    )
    clip.open_clip_preprocess = preprocess  # open_clip's own transform: the reference pixels
    return clip


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("configs")
    openai_like = _tiny_variant(tmp, "mstta-tiny-a", 64)
    siglip_like = _tiny_variant(
        tmp,
        "mstta-tiny-b",
        48,
        image_mean=(0.5, 0.5, 0.5),
        image_std=(0.5, 0.5, 0.5),
        image_resize_mode="squash",
        image_interpolation="bilinear",
    )
    return openai_like, siglip_like


def test_each_model_gets_its_own_preprocessing(variants):
    img = scene(4, 120, 72)  # not square: resize mode matters
    a, b = variants
    pa, pb = FrameEncoder(a).pixels([img]), FrameEncoder(b).pixels([img])
    assert pa.shape == (1, 3, 64, 64) and pb.shape == (1, 3, 48, 48)
    assert torch.allclose(pa, a.open_clip_preprocess(Image.fromarray(img)).unsqueeze(0), atol=1e-6)
    assert torch.allclose(pb, b.open_clip_preprocess(Image.fromarray(img)).unsqueeze(0), atol=1e-6)
    for clip in (a, b):  # read from the config, equal to open_clip's transform
        assert torch.equal(clip.preprocess(Image.fromarray(img)), clip.open_clip_preprocess(Image.fromarray(img)))
    # mean/std 0.5: pixel p maps to 2p - 1, so the range is [-1, 1] (OpenAI's mean/std give another range)
    assert pb.min() >= -1.0 - 1e-6 and pb.max() <= 1.0 + 1e-6
    white = np.full((72, 120, 3), 255, np.uint8)
    assert torch.allclose(FrameEncoder(b).pixels([white]), torch.ones(1, 3, 48, 48))
    assert not torch.allclose(FrameEncoder(a).pixels([white])[0, :, 0, 0], torch.ones(3))
    # squash keeps the whole frame (both edges visible); shortest-side + center crop cuts the sides
    edge = img.copy()
    edge[:, :8] = 0
    assert float(FrameEncoder(b).pixels([edge])[0, :, :, 0].mean()) == pytest.approx(-1.0, abs=0.05)
    assert float(FrameEncoder(a).pixels([edge])[0, :, :, 0].mean()) > -1.0


def test_extra_views_are_mstta_views_crops(variants):
    _, b = variants
    img = scene(2, 120, 72)
    enc = FrameEncoder(b, views=5, seed=3)
    geometry, size, mean, std = split_preprocess(b.preprocess)
    maker = ViewMaker(geometry, size, views=5, augment="crop", seed=3)
    for index in range(2):  # frame n of the stream gets views of sample index n
        ref = to_pixels(maker(Image.fromarray(img), index), mean, std)
        assert torch.allclose(enc.pixels([img]), ref, atol=1e-6)
    enc.reset()
    assert torch.allclose(enc.pixels([img]), to_pixels(maker(Image.fromarray(img), 0), mean, std), atol=1e-6)


def test_views_are_bounded_and_encoded_in_chunks(variants, monkeypatch):
    a, _ = variants
    with pytest.raises(UserError, match=rf"--views {MAX_VIEWS + 1}: expected an integer in \[1, {MAX_VIEWS}\]"):
        FrameEncoder(a, views=MAX_VIEWS + 1)
    batches = []
    real = a.encode_images
    monkeypatch.setattr(a, "encode_images", lambda pix: batches.append(len(pix)) or real(pix))
    feats = FrameEncoder(a, views=VIEW_CHUNK + 5).encode([scene(0, 80, 60)])
    assert feats.shape == (1, VIEW_CHUNK + 5, 64) and batches == [VIEW_CHUNK, 5]


def test_ctrl_c_ends_a_many_view_frame_between_chunks(variants, monkeypatch):
    """A KeyboardInterrupt (Ctrl-C, or SIGTERM through run_cli) raised while views are encoded stops
    the frame at the next chunk instead of after all of them."""
    a, _ = variants
    calls = []

    def slow(pix):
        calls.append(len(pix))
        if len(calls) == 2:
            raise KeyboardInterrupt  # what the signal handler raises between two forwards
        return torch.nn.functional.normalize(torch.ones(len(pix), 64), dim=-1)

    monkeypatch.setattr(a, "encode_images", slow)
    with pytest.raises(KeyboardInterrupt):
        FrameEncoder(a, views=4 * VIEW_CHUNK).encode([scene(0, 80, 60)])
    assert calls == [VIEW_CHUNK, VIEW_CHUNK]  # the remaining chunks never ran


@pytest.mark.parametrize("augment", ["crop", "augmix"])
def test_device_views_encode_like_pil_views(variants, augment):
    """mstta-tiny and a config with other preprocessing (48 px, squash, bilinear, mean/std 0.5): the
    features of tensor views and PIL views of the same sample agree (cosine, measured >= 0.9999)."""
    from helpers_images import smooth_image

    from mstta.features.models import load_clip
    from mstta.features.tensor_views import TensorViewMaker

    for clip in (load_clip("mstta-tiny", "none", device="cpu"), variants[1]):
        geometry, size, mean, std = split_preprocess(clip.preprocess)
        maker = ViewMaker(geometry, size, views=16, augment=augment, seed=4)
        tensor = TensorViewMaker(maker)
        for index in range(2):
            img = smooth_image(300, 200, index)
            pil = maker(img, index)
            dev = tensor(torch.from_numpy(np.array(img)).permute(2, 0, 1).contiguous(), index)
            fa = clip.encode_images(to_pixels(pil, mean, std))
            fb = clip.encode_images(to_pixels(dev, mean, std))
            cos = torch.nn.functional.cosine_similarity(fa, fb, dim=-1)
            assert cos.mean() >= 0.99 and cos.min() >= 0.98, (clip.name, augment, cos)


def test_frame_encoder_views_on(variants):
    _, b = variants
    img = scene(3, 120, 72)
    cpu = FrameEncoder(b, views=6, seed=2, views_on="cpu")
    dev = FrameEncoder(b, views=6, seed=2, views_on="device")
    assert cpu.views_on == "cpu" and dev.views_on == "device"
    assert FrameEncoder(b, views=6).views_on == "cpu" and FrameEncoder(b, views=1, views_on="device").views_on == "cpu"
    assert torch.equal(cpu.views_of([img, img]), dev.views_of([img, img]))  # crops: bit-exact
    with pytest.raises(UserError, match="--views-on gpu"):
        FrameEncoder(b, views=2, views_on="gpu")
