"""The view side of extraction: stream position -> the sample's views, made where `--views-on` says.

- `cpu`: data-loader workers decode with PIL and make the views with PIL (`ViewMaker`, the reference).
- `device` on a CPU: the workers make them with `TensorViewMaker(exact=False)` on CPU tensors
  (JPEG via torchvision's decoder; the fast path, within the tolerance of PIL), one process per core.
- `device` on CUDA: the workers read the files (JPEG bytes left undecoded) and draw each sample's
  parameters; the main process decodes the JPEGs (libjpeg-turbo, as PIL) and makes every view on the GPU.
`auto` is `device` on CUDA, else `cpu`. Both paths draw the same parameters from
`sample_rng(seed, index)`; an unreadable file is skipped with the same reason on every path.
"""

from __future__ import annotations

from typing import Sequence

import torch
from PIL import Image

from ..errors import UserError
from .decode import Loaded, decode, load
from .tensor_views import TensorViewMaker
from .views import ViewMaker

VIEWS_ON = ("auto", "cpu", "device")


def resolve_views_on(views_on: str, device: torch.device) -> str:
    """`--views-on` -> "cpu" or "device" (auto: device on CUDA)."""
    if views_on not in VIEWS_ON:
        raise UserError(f"--views-on {views_on}: choose one of {', '.join(VIEWS_ON)}")
    if views_on == "auto":
        return "device" if torch.device(device).type == "cuda" else "cpu"
    return views_on


def view_path(views_on: str, device: torch.device | str) -> str:
    """Which pixel arithmetic `--views-on` gives on `device`: "pil" (the reference, the peers'
    pixels), "gpu" (exact tensor views on CUDA) or "cpu-tensors" (the fast path on CPU tensors)."""
    if resolve_views_on(views_on, torch.device(device)) == "cpu":
        return "pil"
    return "gpu" if torch.device(device).type == "cuda" else "cpu-tensors"


def _reason(path, exc: Exception) -> str:
    if isinstance(exc, UserError):  # a refusal says why (e.g. `mstta.features.views.check_image_shape`)
        return f"{path} ({' '.join(str(exc).split())[:160]})"
    return f"{path} ({type(exc).__name__})"


class ViewSource(torch.utils.data.Dataset):
    """Stream position -> (position, views or (Loaded, parameters) or None, failure reason)."""

    def __init__(self, paths: Sequence, order: Sequence[int], maker: ViewMaker, where: str, device: torch.device):
        self.paths = list(paths)
        self.order = list(order)
        self.maker = maker
        self.mode = "pil" if where == "cpu" else "raw" if torch.device(device).type == "cuda" else "tensor"
        self.tensor = TensorViewMaker(maker, exact=False)  # CPU tensors: the fast path (mstta.features.fast_views)

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, pos: int):
        index = self.order[pos]
        path = self.paths[index]
        try:
            if self.mode == "pil":
                with Image.open(path) as im:
                    img = im.convert("RGB")
            else:
                item = load(path, jpeg_bytes=True)
                pixels = item.pixels if self.mode == "raw" or item.pixels is not None else decode([item], "cpu")[0]
                if isinstance(pixels, Exception):
                    raise pixels
            params = self.maker.params(*(img.size if self.mode == "pil" else item.size), index)
        except Exception as exc:  # one undecodable or refused image must never stop a long run
            return pos, None, _reason(path, exc)
        if self.mode == "pil":
            return pos, self.maker.make(img, params), ""
        if self.mode == "raw":
            return pos, (item, params), ""
        return pos, self.tensor.make(pixels, params), ""


def collate(rows):
    """Rows -> (positions, views [B, V, 3, S, S] or a list of (Loaded, parameters), failures)."""
    ok = [r for r in rows if r[1] is not None]
    failed = [(r[0], r[2]) for r in rows if r[1] is None]
    if ok and isinstance(ok[0][1], tuple):
        return [r[0] for r in ok], [r[1] for r in ok], failed
    return [r[0] for r in ok], torch.stack([r[1] for r in ok]) if ok else None, failed


def on_device(
    positions: list[int], raw: list[tuple[Loaded, list]], maker: TensorViewMaker, device: torch.device
) -> tuple[list[int], torch.Tensor | None, list[tuple[int, str]]]:
    """Decode a batch of files on `device` and make their views there -> (positions, views, failures)."""
    pixels = decode([item for item, _ in raw], device)
    keep, views, failed = [], [], []
    for pos, (item, params), img in zip(positions, raw, pixels):
        if isinstance(img, Exception):
            failed.append((pos, _reason(item.path, img)))
        else:
            keep.append(pos)
            views.append(maker.make(img, params))
    return keep, torch.stack(views) if views else None, failed
