"""Frames -> CLIP image features, preprocessed exactly as the benchmark preprocesses its images.

`FrameEncoder(clip).encode(images)` runs the model's own open_clip transform (its image size,
mean/std, interpolation and resize mode, e.g. 0.5/0.5 for a SigLIP model) through
`mstta.features.views.ViewMaker`: view 0 is the plain frame, and with `views=V > 1` the V-1 extra views
are the random resized crops with flips of `mstta.features.views.crop_view` (BoostAdapter's views,
paper Sec. 4.1), seeded per frame so a replayed stream gets the same views. The engine then sees
`[V, d]` per frame. Views are encoded in chunks of `VIEW_CHUNK`, so Ctrl-C and SIGTERM end a
many-view frame between chunks. `views_on`: where extra views are made, as `mstta-bench extract
--views-on`: `device` makes them from the frame tensor on the model's device
(`mstta.features.tensor_views`, the same parameters), `cpu` with PIL; `auto` (default) is device on CUDA.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
from PIL import Image

from mstta.checks import int_in
from mstta.errors import UserError
from mstta.features.extract_views import resolve_views_on
from mstta.features.tensor_views import TensorViewMaker
from mstta.features.views import MAX_VIEWS, ViewMaker, split_preprocess, to_pixels

__all__ = ["MAX_VIEWS", "VIEW_CHUNK", "FrameEncoder", "check_views"]
VIEW_CHUNK = 32  # views per encoder forward


def check_views(views: Any) -> int:
    """`--views` as an integer in 1..MAX_VIEWS (one-line UserError otherwise)."""
    return int_in(views, "--views", 1, MAX_VIEWS, " (1 = the frame only)")


class FrameEncoder:
    """Encodes RGB uint8 frames [H, W, 3] with a loaded ClipModel; `views` images per frame."""

    def __init__(self, clip: Any, views: int = 1, seed: int = 0, views_on: str = "auto"):
        self.clip = clip
        self.views = check_views(views)
        geometry, size, self.mean, self.std = split_preprocess(clip.preprocess)
        self.size = size
        self.maker = ViewMaker(geometry, size, views=self.views, augment="crop", seed=seed)
        self.device = clip.device
        self.views_on = resolve_views_on(views_on, self.device) if self.views > 1 else "cpu"
        self._count = 0  # frames encoded since the last reset: the views' random stream
        self._tensor: TensorViewMaker | None = None

    def reset(self, seed: int | None = None) -> None:
        """Restart the random views (from `seed` if given): the same frames get the same views again."""
        if seed is not None and seed != self.maker.seed:
            self.maker = ViewMaker(self.maker.geometry, self.size, views=self.views, augment="crop", seed=seed)
        self._count = 0

    # ------------------------------------------------------------------ preprocessing
    def views_of(self, images: Sequence[np.ndarray]) -> torch.Tensor:
        """RGB uint8 frames -> uint8 views [B*V, 3, S, S] (frame b's views at rows b*V..b*V+V-1, view 0 first)."""
        if len(images) == 0:
            raise UserError("no frames to encode")
        out = []
        for i, img in enumerate(images):
            if not isinstance(img, np.ndarray) or img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
                raise UserError(
                    f"frame {i}: expected an RGB uint8 image [H, W, 3], got "
                    f"{getattr(img, 'dtype', type(img).__name__)} {getattr(img, 'shape', '')}"
                )
            if self.views_on == "device":
                frame = torch.from_numpy(np.ascontiguousarray(img)).to(self.device).permute(2, 0, 1)
                if self._tensor is None or self._tensor.maker is not self.maker:
                    self._tensor = TensorViewMaker(self.maker)
                out.append(self._tensor(frame.contiguous(), self._count))
            else:
                out.append(self.maker(Image.fromarray(np.ascontiguousarray(img)), self._count))
            self._count += 1
        return torch.cat(out)

    def pixels(self, images: Sequence[np.ndarray]) -> torch.Tensor:
        """RGB uint8 frames -> normalised model input [B*V, 3, S, S] (float32) on the model's device."""
        return to_pixels(self.views_of(images), self.mean, self.std, self.device)

    # ------------------------------------------------------------------ encoding
    def encode(self, images: Sequence[np.ndarray]) -> torch.Tensor:
        """Frames -> unit-norm features [B, d] (views == 1) or [B, V, d] (float32)."""
        views = self.views_of(images)
        feats = torch.cat(
            [
                self.clip.encode_images(to_pixels(chunk, self.mean, self.std, self.device))
                for chunk in views.split(VIEW_CHUNK)
            ]
        )
        return feats if self.views == 1 else feats.view(len(images), self.views, -1)

    def encode_one(self, image: np.ndarray) -> torch.Tensor:
        """One frame -> [d] (views == 1) or [V, d]."""
        return self.encode([image])[0]
