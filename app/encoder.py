"""Frames -> CLIP image features, with the preprocessing done as one tensor batch on the model's device.

`FrameEncoder(clip).encode(images)` matches `clip.preprocess` (resize the short side with bicubic
antialiasing, centre crop, normalise) without a PIL round trip per frame. With `views=V > 1` each
frame also gets V-1 random resized crops (with random horizontal flips) as extra views, view 0
being the plain frame; the engine then sees `[V, d]` per frame.
"""
from __future__ import annotations

import random
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from mstta.errors import UserError

OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)
CROP_SCALE = (0.35, 1.0)      # area fraction of a random view
CROP_RATIO = (3 / 4, 4 / 3)   # aspect ratio range of a random view


def preprocess_settings(clip: Any) -> dict[str, Any]:
    """Size, mean, std, interpolation and resize mode of a ClipModel's own preprocessing."""
    cfg = dict(getattr(clip.model.visual, "preprocess_cfg", None) or {})
    for t in getattr(clip.preprocess, "transforms", []):
        if type(t).__name__ == "Normalize":
            cfg.setdefault("mean", tuple(t.mean))
            cfg.setdefault("std", tuple(t.std))
    interpolation = cfg.get("interpolation")
    return {
        "size": int(clip.image_size),
        "mean": tuple(cfg.get("mean", OPENAI_MEAN)),
        "std": tuple(cfg.get("std", OPENAI_STD)),
        "interpolation": interpolation if interpolation in ("bicubic", "bilinear") else "bicubic",
        "resize_mode": cfg.get("resize_mode", "shortest"),
    }


class FrameEncoder:
    """Encodes RGB uint8 frames [H, W, 3] with a loaded ClipModel; `views` images per frame."""

    def __init__(self, clip: Any, views: int = 1, seed: int = 0):
        if isinstance(views, bool) or not isinstance(views, int) or views < 1:
            raise UserError(f"--views {views!r}: expected an integer >= 1 (1 = the frame only)")
        self.clip = clip
        self.views = views
        self.settings = preprocess_settings(clip)
        self.device = clip.device
        shape = (1, 3, 1, 1)
        self._mean = torch.tensor(self.settings["mean"], device=self.device).view(shape)
        self._std = torch.tensor(self.settings["std"], device=self.device).view(shape)
        self._rng = random.Random(seed)

    def reset(self, seed: int = 0) -> None:
        """Restart the random views from `seed` (same frames -> same views)."""
        self._rng = random.Random(seed)

    # ------------------------------------------------------------------ preprocessing
    def _resize(self, x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        mode = self.settings["interpolation"]
        return F.interpolate(x, size=size, mode=mode, antialias=True, align_corners=False)

    def _fit(self, x: torch.Tensor) -> torch.Tensor:
        """[B, 3, H, W] in [0, 1] -> [B, 3, S, S] by the model's resize mode."""
        s = self.settings["size"]
        h, w = x.shape[-2:]
        mode = self.settings["resize_mode"]
        if mode == "squash":
            return self._resize(x, (s, s))
        if mode == "longest":
            scale = s / max(h, w)
            nh, nw = max(1, round(h * scale)), max(1, round(w * scale))
            x = self._resize(x, (nh, nw))
            top, left = (s - nh) // 2, (s - nw) // 2
            return F.pad(x, (left, s - nw - left, top, s - nh - top))
        # torchvision's Resize(int): short side -> s, long side -> int(s * long / short)
        nh, nw = (s, int(s * w / h)) if h <= w else (int(s * h / w), s)
        x = self._resize(x, (nh, nw))
        top, left = int(round((nh - s) / 2.0)), int(round((nw - s) / 2.0))
        return x[..., top:top + s, left:left + s]

    def _random_view(self, x: torch.Tensor) -> torch.Tensor:
        """A random resized crop (and maybe a flip) of one frame [1, 3, H, W] -> [1, 3, S, S]."""
        h, w = x.shape[-2:]
        s = self.settings["size"]
        area = h * w
        for _ in range(10):
            target = area * self._rng.uniform(*CROP_SCALE)
            ratio = np.exp(self._rng.uniform(np.log(CROP_RATIO[0]), np.log(CROP_RATIO[1])))
            cw, ch = int(round((target * ratio) ** 0.5)), int(round((target / ratio) ** 0.5))
            if 0 < cw <= w and 0 < ch <= h:
                top, left = self._rng.randint(0, h - ch), self._rng.randint(0, w - cw)
                break
        else:
            ch, cw, top, left = h, w, 0, 0
        view = self._resize(x[..., top:top + ch, left:left + cw], (s, s))
        return view.flip(-1) if self._rng.random() < 0.5 else view

    def pixels(self, images: Sequence[np.ndarray]) -> torch.Tensor:
        """RGB uint8 frames -> normalised model input [B*V, 3, S, S] on the model's device
        (the V views of frame b are rows b*V ... b*V+V-1, view 0 first)."""
        if len(images) == 0:
            raise UserError("no frames to encode")
        out: list[torch.Tensor | None] = [None] * len(images)
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, img in enumerate(images):
            if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
                raise UserError(f"frame {i}: expected an RGB uint8 image [H, W, 3], got {img.dtype} {img.shape}")
            groups.setdefault(img.shape, []).append(i)
        for idx in groups.values():
            batch = torch.from_numpy(np.stack([images[i] for i in idx])).to(self.device)
            x = batch.permute(0, 3, 1, 2).float().div_(255.0)
            fitted = self._fit(x)
            for j, i in enumerate(idx):
                views = [fitted[j:j + 1]] + [self._random_view(x[j:j + 1]) for _ in range(self.views - 1)]
                out[i] = torch.cat(views)
        pix = torch.cat(out).clamp_(0.0, 1.0)  # type: ignore[arg-type]
        return (pix - self._mean) / self._std

    # ------------------------------------------------------------------ encoding
    def encode(self, images: Sequence[np.ndarray]) -> torch.Tensor:
        """Frames -> unit-norm features [B, d] (views == 1) or [B, V, d] (float32)."""
        feats = self.clip.encode_images(self.pixels(images))
        return feats if self.views == 1 else feats.view(len(images), self.views, -1)

    def encode_one(self, image: np.ndarray) -> torch.Tensor:
        """One frame -> [d] (views == 1) or [V, d]."""
        return self.encode([image])[0]
