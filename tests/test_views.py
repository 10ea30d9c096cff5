"""Test-time views: view 0 = CLIP preprocessing, seeded augmented views, batched encoding."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from mstta.errors import UserError
from mstta.features.views import (
    AUGMENTS,
    OP_VALUES,
    PIL_OPS,
    ViewMaker,
    augmix,
    crop_box,
    crop_view,
    sample_rng,
    split_preprocess,
    to_pixels,
)


def _image(w=50, h=37, seed=0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8))


def _open_clip_transform(tiny_clip, which):
    """open_clip's own eval transform (the reference pixels) and the config it is built from."""
    import open_clip
    from open_clip.transform import PreprocessCfg

    cfg = (
        PreprocessCfg(**open_clip.get_model_preprocess_cfg(tiny_clip.model))
        if which == "tiny"
        else PreprocessCfg(size=224)
    )
    return open_clip.transform.image_transform_v2(cfg, is_train=False), cfg


@pytest.mark.parametrize("which", ["tiny", "vit-b-16"])
def test_view0_equals_clip_preprocessing(tiny_clip, which):
    pre, cfg = _open_clip_transform(tiny_clip, which)
    geometry, size, mean, std = split_preprocess(tiny_clip if which == "tiny" else cfg)
    for img in (_image(300, 211), _image(90, 300, 1).convert("L")):
        views = ViewMaker(geometry, size, views=3, augment="augmix", seed=1)(img.convert("RGB"), 0)
        assert torch.equal(to_pixels(views[:1], mean, std)[0], pre(img))
    if which == "tiny":
        assert torch.equal(tiny_clip.preprocess(img), pre(img))  # ClipModel.preprocess is open_clip's


@pytest.mark.parametrize("augment", AUGMENTS)
def test_views_shape_and_determinism(tiny_clip, augment):
    geometry, size, _, _ = split_preprocess(tiny_clip.preprocess)
    make = ViewMaker(geometry, size, views=8, augment=augment, seed=1)
    img = _image()
    a = make(img, 5)
    assert a.shape == (8, 3, size, size)
    assert a.dtype == (torch.float32 if augment == "augmix" else torch.uint8)  # AugMix is mixed in float
    assert torch.equal(a, make(img, 5))  # same (seed, index): same views
    assert not torch.equal(a[1:], make(img, 6)[1:])  # another sample index: other views
    other_seed = ViewMaker(geometry, size, views=8, augment=augment, seed=2)(img, 5)
    assert torch.equal(a[0], other_seed[0]) and not torch.equal(a[1:], other_seed[1:])
    assert len({v.numpy().tobytes() for v in a}) == 8  # every view differs


def test_single_view_is_the_original_only(tiny_clip):
    geometry, size, _, _ = split_preprocess(tiny_clip.preprocess)
    assert ViewMaker(geometry, size, views=1)(_image(), 0).shape == (1, 3, size, size)


@pytest.mark.parametrize(
    "views, augment, expected",
    [
        (0, "crop", "--views 0: expected an integer in \\[1, 256\\]"),
        (257, "crop", "--views 257: expected an integer in \\[1, 256\\]"),
        (2, "cutout", "--augment cutout"),
    ],
)
def test_bad_view_settings(tiny_clip, views, augment, expected):
    geometry, size, _, _ = split_preprocess(tiny_clip.preprocess)
    with pytest.raises(UserError, match=expected):
        ViewMaker(geometry, size, views=views, augment=augment)


@settings(max_examples=60, deadline=None, database=None)
@given(w=st.integers(1, 2000), h=st.integers(1, 2000), seed=st.integers(0, 2**31))
def test_crop_box_inside_image(w, h, seed):
    left, top, cw, ch = crop_box(sample_rng(seed, 0), w, h)
    assert 0 <= left and 0 <= top and cw >= 1 and ch >= 1 and left + cw <= w and top + ch <= h


def test_crop_and_augmix_outputs():
    rng = sample_rng(1, 0)
    crop = crop_view(_image(120, 80), rng, 32)
    assert crop.size == (32, 32) and crop.mode == "RGB"
    mixed = augmix(crop, rng)
    assert mixed.shape == (32, 32, 3) and mixed.dtype == np.float32
    assert 0 <= mixed.min() and mixed.max() <= 255


def test_augmix_mixes_in_float_unrounded():
    """The peers mix normalised float tensors (TDA datasets/utils.py `augmix`): no rounding to uint8."""
    rng = sample_rng(7, 3)
    mixed = augmix(crop_view(_image(120, 80, seed=4), rng, 32), rng)
    assert not np.array_equal(mixed, np.rint(mixed))


@pytest.mark.parametrize("op", ["rotate", "shear_x", "translate_y"])
def test_geometric_ops_fill_black_as_the_peers(op):
    """TDA's augmix_ops.py calls rotate()/transform() without a fill colour: PIL fills 0 (black)."""
    white = Image.new("RGB", (64, 64), (255, 255, 255))
    for seed in range(20):  # some draw moves the image far enough to uncover a corner
        out = np.asarray(PIL_OPS[op](white, OP_VALUES[op](sample_rng(seed, 0), 64)))
        if (out < 255).any():
            assert (out == 0).all(axis=-1).any()  # pure black pixels, never grey 128
            assert not (np.abs(out.astype(int) - 128) < 2).all(axis=-1).any()
            return
    pytest.fail(f"{op} never uncovered a border in 20 draws")


def test_to_pixels_matches_totensor_normalize():
    u8 = torch.randint(0, 256, (2, 3, 4, 4), dtype=torch.uint8)
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    want = (u8.float() / 255 - torch.tensor(mean).view(3, 1, 1)) / torch.tensor(std).view(3, 1, 1)
    got = to_pixels(u8, mean, std, dtype=torch.bfloat16)
    assert got.dtype == torch.bfloat16 and torch.allclose(got.float(), want, atol=2e-2)
    assert torch.allclose(to_pixels(u8, mean, std), want, atol=1e-6)


def test_one_forward_for_all_views_equals_one_by_one(tiny_clip):
    geometry, size, mean, std = split_preprocess(tiny_clip.preprocess)
    views = ViewMaker(geometry, size, views=6, augment="augmix", seed=3)(_image(), 0)
    pixels = to_pixels(views, mean, std)
    batched = tiny_clip.encode_images(pixels)
    single = torch.cat([tiny_clip.encode_images(pixels[i : i + 1]) for i in range(6)])
    assert batched.shape == (6, 64) and torch.allclose(batched, single, atol=1e-5)


@pytest.mark.parametrize("augment", AUGMENTS)
def test_views_from_drawn_parameters_equal_the_seeded_views(tiny_clip, augment):
    """`ViewMaker.params` draws every random choice first; `make` with them is `ViewMaker(img, index)`."""
    geometry, size, _, _ = split_preprocess(tiny_clip.preprocess)
    maker = ViewMaker(geometry, size, views=6, augment=augment, seed=2)
    img = _image(90, 70)
    params = maker.params(90, 70, 4)
    assert len(params) == 5 and all(p.augmix == (augment == "augmix") for p in params)
    assert torch.equal(maker.make(img, params), maker(img, 4))
    assert maker.params(90, 70, 4) == params and maker.params(90, 70, 5) != params
