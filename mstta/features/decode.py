"""Image files -> uint8 tensors [3, H, W] for `mstta.features.tensor_views`: JPEG through
torchvision's `decode_jpeg` on the CPU (libjpeg-turbo, bit-exact with PIL), then moved to the
device; everything else through PIL, with the same outcome as `Image.open(path).convert("RGB")`
for bad input. nvjpeg (`decode_jpeg(device='cuda')`) is not used: on an H100 its pixels fell
outside PIL's tolerance (docs/gpu.md), so views made from them would not be PIL's views.

Every file is opened with PIL first (header only): an unreadable header, or one beyond PIL's
decompression-bomb bound (e.g. 20,000 x 20,000), fails there exactly as on the PIL path. Only a
baseline RGB/grey JPEG whose data ends with its end-of-image marker goes to `decode_jpeg`; CMYK,
palette, 16-bit and truncated files go through PIL (a truncated JPEG raises there, as on the PIL
path), and a JPEG that `decode_jpeg` refuses is decoded again with PIL, so it fails or decodes as PIL decides.
libjpeg's own warnings ("Corrupt JPEG data: 2 extraneous bytes before marker 0xda"), which the
decoder prints straight to the process's stderr, are captured while it runs and logged at debug
level: the PIL path is silent on such files, and so is this one.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import logging
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from PIL import Image

log = logging.getLogger(__name__)

JPEG_MODES = ("RGB", "L")
CHATTER_BYTES = 4096  # the decoder's captured stderr kept for the debug log


def _flush_c_stdio() -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).fflush(None)


@contextlib.contextmanager
def native_stderr_to_log(what: str):
    """Run a block with file descriptor 2 pointed at a temp file (C code printing to stderr, such as
    libjpeg's warnings, writes there), then restore it and log what was written at debug level.
    Python's own sys.stderr is flushed first, so nothing of ours is lost or reordered."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no usable stderr: nothing to silence
        yield
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            _flush_c_stdio()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            chatter = sink.read(CHATTER_BYTES).decode("utf-8", "replace").strip()
            if chatter:
                log.debug("%s: %s", what, " | ".join(chatter.splitlines()))


@dataclass
class Loaded:
    """A file read for view making: decoded pixels, or JPEG bytes still to decode on the device."""

    path: str
    pixels: torch.Tensor | None = None  # uint8 [3, H, W]
    jpeg: torch.Tensor | None = None  # uint8 [n] file bytes
    size: tuple[int, int] = (0, 0)  # (width, height) from the header


def pil_tensor(img: Image.Image) -> torch.Tensor:
    """PIL image -> uint8 [3, H, W] of its RGB conversion."""
    return torch.from_numpy(np.array(img.convert("RGB"), np.uint8)).permute(2, 0, 1).contiguous()


def complete_jpeg(data: bytes) -> bool:
    """Starts with SOI and ends with EOI (trailing zero padding allowed): not visibly truncated."""
    return data[:2] == b"\xff\xd8" and data.rstrip(b"\x00")[-2:] == b"\xff\xd9"


def load(path: str | Path, jpeg_bytes: bool) -> Loaded:
    """Read one file (raises as PIL does on bad input); JPEG bytes are kept undecoded when `jpeg_bytes`."""
    with Image.open(path) as im:  # header: PIL's size bound and format
        if jpeg_bytes and im.format == "JPEG" and im.mode in JPEG_MODES:
            data = Path(path).read_bytes()
            if complete_jpeg(data):
                return Loaded(str(path), jpeg=torch.frombuffer(bytearray(data), dtype=torch.uint8), size=im.size)
        return Loaded(str(path), pixels=pil_tensor(im), size=im.size)


def _pil_decode(item: Loaded) -> torch.Tensor:
    with Image.open(io.BytesIO(item.jpeg.numpy().tobytes())) as im:
        return pil_tensor(im)


def decode(items: Sequence[Loaded], device: torch.device | str) -> list[torch.Tensor | Exception]:
    """Pixels of every item on `device` (JPEG bytes decoded on the CPU in one batch, as PIL decodes them,
    then moved there), or the exception PIL raises for an item that does not decode."""
    import warnings

    from torchvision.io import ImageReadMode, decode_jpeg

    device = torch.device(device)
    out: list[torch.Tensor | Exception | None] = [None] * len(items)
    jpegs = [i for i, it in enumerate(items) if it.jpeg is not None]
    if jpegs:
        try:
            with warnings.catch_warnings(), native_stderr_to_log("JPEG decoder"):
                warnings.simplefilter("ignore", DeprecationWarning)  # torchvision 0.29 deprecates its decoders
                got = decode_jpeg([items[i].jpeg for i in jpegs], mode=ImageReadMode.RGB, device="cpu")
        except RuntimeError:  # one bad file fails the batch: all of it through PIL
            got = [None] * len(jpegs)
        for i, img in zip(jpegs, got):
            if img is None or tuple(img.shape[1:]) != items[i].size[::-1]:
                try:
                    img = _pil_decode(items[i])
                except Exception as exc:  # reported per file as the PIL path reports it
                    out[i] = exc
                    continue
            out[i] = img.to(device, non_blocking=True)
    for i, it in enumerate(items):
        if it.pixels is not None:
            out[i] = it.pixels.to(device, non_blocking=True)
    return out
