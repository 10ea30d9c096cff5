"""Shared by the view tests (tests/test_tensor_views.py, test_extract_views.py, test_extract.py,
test_encoder.py): photo-like random images and the pixel figures views are compared by."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from mstta.features.views import Geometry

GEOMETRY = Geometry(224)  # ViT-B/16's view 0 (open_clip's default preprocess config: bicubic, shortest)


def smooth_image(w: int = 500, h: int = 375, seed: int = 0) -> Image.Image:
    """Random colours, blurred a little: like a photo, edges and flat parts both."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, size=(h // 4 + 1, w // 4 + 1, 3), dtype=np.uint8)
    big = np.asarray(Image.fromarray(small).resize((w, h), Image.BICUBIC), np.int16)
    return Image.fromarray(np.clip(big + rng.integers(-12, 13, size=big.shape), 0, 255).astype(np.uint8))


def as_tensor(img: Image.Image) -> torch.Tensor:
    """PIL RGB -> uint8 [3, H, W]."""
    return torch.from_numpy(np.array(img)).permute(2, 0, 1).contiguous()


def figures(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float, float]:
    """(mean |diff|, fraction within 2 levels, max |diff|)."""
    d = (a.double() - b.double()).abs()
    return d.mean().item(), (d <= 2).double().mean().item(), d.max().item()


def within_tolerance(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The issue's tolerance: mean |diff| <= 0.5 level, >= 99.5% of pixels within 2 levels."""
    mean, within2, _ = figures(a, b)
    return mean <= 0.5 and within2 >= 0.995
