"""Test-time views as the peers make them: the original image plus `V-1` seeded augmentations.

View 0 is CLIP's own preprocessing (resize + center crop) of the image. Augmented views are a
random resized crop with a random horizontal flip (`crop`, BoostAdapter), optionally followed by
AugMix-style mixing at severity 1 (`augmix`, TDA/TPT). Pixel work runs on PIL in the data-loader
workers and returns `[V, 3, S, S]` pixels in 0..255: uint8 for `crop`, float32 for `augmix` (its
mix is never rounded, as the peers mix normalised float tensors); `to_pixels` converts and
normalises on the encoder's device, so one forward encodes every view. The random stream of
sample `index` is seeded from
`(seed, index)` only, so any worker or rank produces the same views.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, is_dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch
from PIL import Image, ImageOps

from ..checks import int_in
from ..errors import UserError

AUGMENTS = ("augmix", "crop")
MAX_VIEWS = 256  # TDA / BoostAdapter: 64 views; extraction time and [N, V, d] storage
CROP_SCALE = (0.08, 1.0)  # RandomResizedCrop defaults (both peers)
CROP_RATIO = (3 / 4, 4 / 3)
MAX_ASPECT = 100  # longer side / shorter side of an image views are made of (docs/limits.md):
# view 0 resizes the shorter side to S, so its memory is S x S x aspect
FILL = (0, 0, 0)  # fill of rotate/shear/translate: PIL's default black, as TDA's augmix_ops.py
# calls rotate()/transform() without a fill colour


@dataclass(frozen=True)
class Geometry:
    """CLIP's PIL resize + crop for view 0, as open_clip's `image_transform(is_train=False)` builds it
    from a preprocess config: `shortest` (shorter side to S, centre crop), `squash` (resize to S x S)
    or `longest` (longer side to S, centre crop or pad with `fill`). Called on a PIL image."""

    size: int | tuple[int, int]
    interpolation: str = "bicubic"
    resize_mode: str = "shortest"
    fill: int = 0

    @property
    def steps(self) -> list:
        """The torchvision/open_clip transforms this geometry runs, in order."""
        from open_clip.transform import CenterCropOrPad, ResizeKeepRatio
        from torchvision import transforms as T

        mode = T.InterpolationMode.BILINEAR if self.interpolation == "bilinear" else T.InterpolationMode.BICUBIC
        size = self.size
        if self.resize_mode == "longest":
            return [ResizeKeepRatio(size, interpolation=mode, longest=1), CenterCropOrPad(size, fill=self.fill)]
        if self.resize_mode == "squash":
            return [T.Resize((size, size) if isinstance(size, int) else size, interpolation=mode)]
        pair = (size, size) if isinstance(size, int) else tuple(size)
        if pair[0] == pair[1]:
            return [T.Resize(pair[0], interpolation=mode), T.CenterCrop(pair)]
        return [ResizeKeepRatio(pair), T.CenterCrop(pair)]

    def __call__(self, img: Image.Image) -> Image.Image:
        for step in self.steps:
            img = step(img)
        return img


@dataclass(frozen=True)
class Preprocess:
    """A model's image preprocessing, read from its open_clip preprocess config
    (`open_clip.get_model_preprocess_cfg`, open_clip's `PreprocessCfg` defaults for missing keys):
    `geometry` (PIL, view 0), output `size`, `mean`, `std`. Called on a PIL image it gives the model's
    input [3, S, S] float32, as open_clip's own transform (RGB, ToTensor, Normalize)."""

    geometry: Geometry
    size: int
    mean: tuple[float, ...]
    std: tuple[float, ...]

    @classmethod
    def from_cfg(cls, cfg: Any) -> "Preprocess":
        """From a preprocess config: a dict or an open_clip `PreprocessCfg`."""
        from open_clip.transform import PreprocessCfg

        d = {**asdict(PreprocessCfg()), **(asdict(cfg) if is_dataclass(cfg) else dict(cfg))}
        size = d["size"]
        side = int(size[0] if isinstance(size, (tuple, list)) else size)
        interpolation = d.get("interpolation") or "bicubic"
        if interpolation not in ("bicubic", "bilinear"):
            raise UserError(
                f"the model's preprocessing uses {interpolation!r} interpolation; mstta makes views "
                "with bicubic or bilinear only"
            )
        geometry = Geometry(
            tuple(size) if isinstance(size, (tuple, list)) else int(size),
            interpolation,
            d.get("resize_mode") or "shortest",
            int(d.get("fill_color") or 0),
        )
        return cls(geometry, side, tuple(float(m) for m in d["mean"]), tuple(float(x) for x in d["std"]))

    @classmethod
    def of(cls, model: Any) -> "Preprocess":
        """The preprocessing of an open_clip model (`open_clip.get_model_preprocess_cfg`)."""
        import open_clip

        return cls.from_cfg(open_clip.get_model_preprocess_cfg(model))

    def __call__(self, img: Image.Image) -> torch.Tensor:
        x = self.geometry(img if img.mode == "RGB" else img.convert("RGB"))
        return to_pixels(_chw(x).unsqueeze(0), self.mean, self.std)[0]


def split_preprocess(source: Any) -> tuple[Callable, int, tuple, tuple]:
    """A model's preprocessing -> (PIL geometry, output size, mean, std). `source`: a `Preprocess`
    (`ClipModel.preprocess`), a `ClipModel` or open_clip model, or a preprocess config (dict or
    `PreprocessCfg`); read from open_clip's config, never from a transform's steps."""
    from open_clip.transform import PreprocessCfg

    if isinstance(source, Preprocess):
        pre = source
    elif isinstance(getattr(source, "preprocess", None), Preprocess):
        pre = source.preprocess
    elif hasattr(getattr(source, "model", None), "visual"):
        pre = Preprocess.of(source.model)
    elif hasattr(source, "visual"):
        pre = Preprocess.of(source)
    elif isinstance(source, (dict, PreprocessCfg)):
        pre = Preprocess.from_cfg(source)
    else:
        raise UserError(
            "the model's preprocessing is not an open_clip preprocess config; pass ClipModel.preprocess "
            "(mstta.features.views.Preprocess), an open_clip model or its preprocess config"
        )
    return pre.geometry, pre.size, pre.mean, pre.std


class ImageShapeError(UserError):
    """An image whose shape would make its views take memory out of proportion to its size."""


def check_image_shape(width: int, height: int) -> None:
    """Refuse (never downscale: the views of every accepted image stay the peers' pixels) an image
    whose longer side exceeds MAX_ASPECT times its shorter side: a 475-byte 1 x 100000 PNG would be
    resized to S x 100000 S for view 0 (gigabytes). Extraction skips such an image with this reason."""
    short, long = min(width, height), max(width, height)
    if short < 1 or long > MAX_ASPECT * short:
        raise ImageShapeError(
            f"a {width}x{height} image: aspect ratio beyond {MAX_ASPECT}:1, refused before its "
            "views are made (their memory grows with it; docs/limits.md)"
        )


def sample_rng(seed: int, index: int) -> np.random.Generator:
    """The random stream of one sample: depends on (seed, index) only."""
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, int(index)])


def crop_box(rng: np.random.Generator, width: int, height: int) -> tuple[int, int, int, int]:
    """RandomResizedCrop's box (left, top, w, h): scale 0.08-1, aspect 3/4-4/3, 10 tries then a center crop."""
    area = width * height
    log_ratio = (math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1]))
    for _ in range(10):
        target = area * rng.uniform(*CROP_SCALE)
        aspect = math.exp(rng.uniform(*log_ratio))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1)), w, h
    ratio = width / height
    if ratio < CROP_RATIO[0]:
        w, h = width, int(round(width / CROP_RATIO[0]))
    elif ratio > CROP_RATIO[1]:
        h, w = height, int(round(height * CROP_RATIO[1]))
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


@dataclass(frozen=True)
class ViewParams:
    """Everything random about one augmented view, drawn before any pixel work (`draw_view`), so the
    PIL path (`make_view`) and the tensor path (`mstta.features.tensor_views`) make the same view."""

    box: tuple[int, int, int, int]  # crop (left, top, w, h) in the image
    flip: bool  # horizontal flip after the resize
    chains: tuple[tuple[tuple[str, float], ...], ...] = ()  # AugMix: per chain its (op, value) steps
    weights: tuple[float, ...] = ()  # AugMix: Dirichlet chain weights (float32 values)
    mix: float = 1.0  # AugMix: Beta(1, 1) weight of the un-augmented crop

    @property
    def augmix(self) -> bool:
        return bool(self.chains)


# AugMix operations at severity 1 (TPT/TDA `augmix_ops`): level ~ U(0.1, 1), scaled to each op's range.
def _level(rng: np.random.Generator, maxval: float) -> float:
    return rng.uniform(0.1, 1.0) * maxval / 10


def _sign(rng: np.random.Generator, v: float) -> float:
    return -v if rng.uniform() > 0.5 else v


# op -> its value drawn from (rng, crop size); the draws and their order are TDA's augmix_ops.py
OP_VALUES: dict[str, Callable[[np.random.Generator, int], float]] = {
    "autocontrast": lambda rng, size: 0,
    "equalize": lambda rng, size: 0,
    "posterize": lambda rng, size: 4 - int(_level(rng, 4)),  # bits kept
    "rotate": lambda rng, size: _sign(rng, int(_level(rng, 30))),  # degrees
    "solarize": lambda rng, size: 256 - int(_level(rng, 256)),  # threshold
    "shear_x": lambda rng, size: _sign(rng, _level(rng, 0.3)),  # shear coefficient
    "shear_y": lambda rng, size: _sign(rng, _level(rng, 0.3)),
    "translate_x": lambda rng, size: _sign(rng, int(_level(rng, size / 3))),  # pixels
    "translate_y": lambda rng, size: _sign(rng, int(_level(rng, size / 3))),
}
AUGMIX_OPS = tuple(OP_VALUES)


def draw_augmix(rng: np.random.Generator, size: int, chains: int = 3) -> dict:
    """AugMix's draws for one view, in the peers' order: Dirichlet weights, Beta mix, then per chain
    its depth (1-3) and per step an op and its value -> ViewParams fields `weights`, `mix`, `chains`."""
    w = rng.dirichlet([1.0] * chains).astype(np.float32)
    m = np.float32(rng.beta(1.0, 1.0))
    steps = []
    for _ in range(chains):
        chain = []
        for _ in range(int(rng.integers(1, 4))):
            op = AUGMIX_OPS[int(rng.integers(len(AUGMIX_OPS)))]
            chain.append((op, OP_VALUES[op](rng, size)))
        steps.append(tuple(chain))
    return {"weights": tuple(float(x) for x in w), "mix": float(m), "chains": tuple(steps)}


def draw_view(rng: np.random.Generator, width: int, height: int, size: int, augment: str) -> ViewParams:
    """One augmented view's parameters from the sample's stream: crop box, flip, then AugMix's draws."""
    box = crop_box(rng, width, height)
    flip = bool(rng.random() < 0.5)
    return ViewParams(box, flip, **(draw_augmix(rng, size) if augment == "augmix" else {}))


def _affine(img: Image.Image, coeffs: tuple) -> Image.Image:
    return img.transform(img.size, Image.AFFINE, coeffs, resample=Image.BILINEAR, fillcolor=FILL)


PIL_OPS: dict[str, Callable[[Image.Image, float], Image.Image]] = {
    "autocontrast": lambda img, v: ImageOps.autocontrast(img),
    "equalize": lambda img, v: ImageOps.equalize(img),
    "posterize": lambda img, v: ImageOps.posterize(img, v),
    "rotate": lambda img, v: img.rotate(v, resample=Image.BILINEAR, fillcolor=FILL),
    "solarize": lambda img, v: ImageOps.solarize(img, v),
    "shear_x": lambda img, v: _affine(img, (1, v, 0, 0, 1, 0)),
    "shear_y": lambda img, v: _affine(img, (1, 0, 0, v, 1, 0)),
    "translate_x": lambda img, v: _affine(img, (1, 0, v, 0, 1, 0)),
    "translate_y": lambda img, v: _affine(img, (1, 0, 0, 0, 1, v)),
}


def crop_pil(img: Image.Image, p: ViewParams, size: int) -> Image.Image:
    """Random resized crop to size x size (bilinear, antialiased, PIL's box resize) + the flip."""
    left, top, w, h = p.box
    out = img.resize((size, size), Image.BILINEAR, box=(left, top, left + w, top + h))
    return out.transpose(Image.FLIP_LEFT_RIGHT) if p.flip else out


def augmix_pil(img: Image.Image, p: ViewParams) -> np.ndarray:
    """AugMix of a crop with drawn parameters: chains of ops, weighted by `weights`, blended with the
    input by `mix` (kdiAAA/TDA datasets/utils.py `augmix`, ops from datasets/augmix_ops.py).

    The mix is computed in float32 and returned unrounded: the weights sum to 1, so mixing 0..255
    pixels and normalising afterwards equals the peers' mixing of normalised tensors. -> [S, S, 3] float32.
    """
    mix = np.zeros((img.size[1], img.size[0], 3), np.float32)
    for w, chain in zip(p.weights, p.chains):
        x = img
        for op, value in chain:
            x = PIL_OPS[op](x, value)
        mix += np.float32(w) * np.asarray(x, np.float32)
    m = np.float32(p.mix)
    return m * np.asarray(img, np.float32) + (1 - m) * mix


def crop_view(img: Image.Image, rng: np.random.Generator, size: int) -> Image.Image:
    """Random resized crop to size x size (bilinear, antialiased) + random horizontal flip."""
    return crop_pil(img, draw_view(rng, *img.size, size, "crop"), size)


def augmix(img: Image.Image, rng: np.random.Generator, chains: int = 3) -> np.ndarray:
    """AugMix of `img` with parameters drawn from `rng` (`draw_augmix`, `augmix_pil`) -> [S, S, 3] float32."""
    return augmix_pil(img, ViewParams((0, 0, *img.size), False, **draw_augmix(rng, img.size[0], chains)))


def _chw(arr: np.ndarray | Image.Image, dtype=np.uint8) -> torch.Tensor:
    return torch.from_numpy(np.array(arr, dtype, copy=True)).permute(2, 0, 1)


@dataclass(frozen=True)
class ViewMaker:
    """PIL RGB image + sample index -> views [V, 3, S, S] in 0..255 (float32 with `augmix`, else
    uint8); view 0 is the un-augmented original."""

    geometry: Callable  # CLIP's PIL resize + center crop
    size: int
    views: int = 1
    augment: str = "augmix"
    seed: int = 1

    def __post_init__(self) -> None:
        int_in(self.views, "--views", 1, MAX_VIEWS, " (1 = the original image only)")
        if self.views > 1 and self.augment not in AUGMENTS:
            raise UserError(f"--augment {self.augment}: choose one of {', '.join(AUGMENTS)}")

    @property
    def dtype(self) -> torch.dtype:
        """float32 when AugMix views are mixed in (never rounded), else uint8."""
        return torch.float32 if self.views > 1 and self.augment == "augmix" else torch.uint8

    def params(self, width: int, height: int, index: int) -> list[ViewParams]:
        """The V-1 augmented views' parameters of sample `index` (an image of width x height), drawn
        from `sample_rng(seed, index)` in the order the views are made (`check_image_shape` first)."""
        check_image_shape(width, height)
        if self.views == 1:
            return []
        rng = sample_rng(self.seed, index)
        return [draw_view(rng, width, height, self.size, self.augment) for _ in range(self.views - 1)]

    def __call__(self, img: Image.Image, index: int) -> torch.Tensor:
        return self.make(img, self.params(*img.size, index))

    def make(self, img: Image.Image, params: Sequence[ViewParams]) -> torch.Tensor:
        """The views of `img` with given parameters, made with PIL (the reference path)."""
        check_image_shape(*img.size)
        dtype = np.float32 if self.dtype == torch.float32 else np.uint8
        out = [_chw(self.geometry(img), dtype)]
        for p in params:
            crop = crop_pil(img, p, self.size)
            out.append(_chw(augmix_pil(crop, p) if p.augmix else crop, dtype))
        return torch.stack(out)


def to_pixels(
    views: torch.Tensor,
    mean: Sequence[float],
    std: Sequence[float],
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Pixels in 0..255 [..., 3, S, S] (uint8 or float) -> normalised float pixels on `device`
    (= ToTensor + Normalize)."""
    x = views.to(device, non_blocking=True).float().div_(255)
    m = torch.tensor(mean, device=x.device).view(3, 1, 1)
    s = torch.tensor(std, device=x.device).view(3, 1, 1)
    return x.sub_(m).div_(s).to(dtype)
