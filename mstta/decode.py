"""Image files -> uint8 tensors [3, H, W] for `mstta.tensor_views`: JPEG through torchvision's
`decode_jpeg` (nvjpeg when the device is CUDA; libjpeg-turbo on the CPU, bit-exact with PIL),
everything else through PIL, with the same outcome as `Image.open(path).convert("RGB")` for bad input.

Every file is opened with PIL first (header only): an unreadable header, or one beyond PIL's
decompression-bomb bound (e.g. 20,000 x 20,000), fails there exactly as on the PIL path. Only a
baseline RGB/grey JPEG whose data ends with its end-of-image marker goes to `decode_jpeg`; CMYK,
palette, 16-bit and truncated files go through PIL (a truncated JPEG raises there, as on the PIL
path), and a JPEG that `decode_jpeg` refuses is decoded again with PIL, so it fails or decodes as PIL decides.
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from PIL import Image

JPEG_MODES = ("RGB", "L")


@dataclass
class Loaded:
    """A file read for view making: decoded pixels, or JPEG bytes still to decode on the device."""

    path: str
    pixels: torch.Tensor | None = None    # uint8 [3, H, W]
    jpeg: torch.Tensor | None = None      # uint8 [n] file bytes
    size: tuple[int, int] = (0, 0)        # (width, height) from the header


def pil_tensor(img: Image.Image) -> torch.Tensor:
    """PIL image -> uint8 [3, H, W] of its RGB conversion."""
    return torch.from_numpy(np.array(img.convert("RGB"), np.uint8)).permute(2, 0, 1).contiguous()


def complete_jpeg(data: bytes) -> bool:
    """Starts with SOI and ends with EOI (trailing zero padding allowed): not visibly truncated."""
    return data[:2] == b"\xff\xd8" and data.rstrip(b"\x00")[-2:] == b"\xff\xd9"


def load(path: str | Path, jpeg_bytes: bool) -> Loaded:
    """Read one file (raises as PIL does on bad input); JPEG bytes are kept undecoded when `jpeg_bytes`."""
    with Image.open(path) as im:                       # header: PIL's size bound and format
        if jpeg_bytes and im.format == "JPEG" and im.mode in JPEG_MODES:
            data = Path(path).read_bytes()
            if complete_jpeg(data):
                return Loaded(str(path), jpeg=torch.frombuffer(bytearray(data), dtype=torch.uint8), size=im.size)
        return Loaded(str(path), pixels=pil_tensor(im), size=im.size)


def _pil_decode(item: Loaded) -> torch.Tensor:
    with Image.open(io.BytesIO(item.jpeg.numpy().tobytes())) as im:
        return pil_tensor(im)


def decode(items: Sequence[Loaded], device: torch.device | str) -> list[torch.Tensor | Exception]:
    """Pixels of every item on `device` (JPEG bytes decoded there in one batch), or the exception
    PIL raises for an item that does not decode."""
    import warnings

    from torchvision.io import ImageReadMode, decode_jpeg

    device = torch.device(device)
    out: list[torch.Tensor | Exception | None] = [None] * len(items)
    jpegs = [i for i, it in enumerate(items) if it.jpeg is not None]
    if jpegs:
        try:
            with warnings.catch_warnings():      # torchvision 0.29 marks its decoders deprecated (TorchCodec)
                warnings.simplefilter("ignore", DeprecationWarning)
                got = decode_jpeg([items[i].jpeg for i in jpegs], mode=ImageReadMode.RGB, device=device)
        except RuntimeError:                            # one bad file fails the batch: all of it through PIL
            got = [None] * len(jpegs)
        for i, img in zip(jpegs, got):
            if img is None or tuple(img.shape[1:]) != items[i].size[::-1]:
                try:
                    img = _pil_decode(items[i])
                except Exception as exc:  # reported per file as the PIL path reports it
                    out[i] = exc
                    continue
            out[i] = img.to(device)
    for i, it in enumerate(items):
        if it.pixels is not None:
            out[i] = it.pixels.to(device, non_blocking=True)
    return out
