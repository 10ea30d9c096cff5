"""Frame size guards and image decoding: nothing larger than a pixel limit is ever decoded whole.

    check_frame_size(width, height, limit)      # one-line UserError above the limit
    image = decode_image(path_or_bytes, limit)  # RGB uint8 [H, W, 3], refused from its header
    image = shrink(image)                       # large frames scaled down right after decoding

A 48 KB 1-bit PNG can declare 20,000 x 20,000 pixels (1.2 GB once decoded to RGB): the size is
read from the file's header (PIL opens lazily) and refused before any pixel is decoded. A frame
more than 16 times longer than wide is refused too (a 475-byte 1 x 100,000 PNG: CLIP's views
scale its shorter side up to the model's size, GBs). Video
containers declare their frame size too (`sources.VideoFileSource`, `sources.LiveSource`). The
UI calls the same functions for uploaded frames.
"""

from __future__ import annotations

import io
import os
import re
import warnings
from pathlib import Path

import numpy as np

from mstta.errors import UserError

MAX_PIXELS = 4096 * 4096  # default --max-pixels: a 4096 x 4096 frame
MAX_SIDE = 1280  # frames with a longer side are scaled down right after decoding
MAX_ASPECT = 16  # longer side / shorter side: beyond, a frame is refused (CLIP's views resize the
# shorter side to the model's size, so a 1 x 100,000 frame would become GBs)


def parse_max_pixels(text: str | int) -> int:
    """`--max-pixels`: '4096x4096' or a pixel count such as 16777216 -> pixels (>= 1; each side >= 1)."""
    raw = str(text).strip().lower()
    try:
        sides = [int(part) for part in raw.split("x", 1)] if len(raw) <= 40 else [0]
    except ValueError:
        sides = [0]
    if any(side < 1 for side in sides):
        shown = str(text) if len(str(text)) <= 40 else f"{str(text)[:20]}..."
        raise UserError(
            f"--max-pixels {shown}: expected WIDTHxHEIGHT (e.g. 4096x4096) or a pixel count, each number >= 1"
        )
    return sides[0] * sides[-1] if len(sides) == 2 else sides[0]


def check_frame_size(width: int, height: int, limit: int = MAX_PIXELS, what: str = "frame") -> None:
    """Refuse a frame of `width` x `height` above `limit` pixels, of no size, or more than
    `MAX_ASPECT` times longer than wide (or wider than long) with one line; nothing is downscaled."""
    if width < 1 or height < 1:
        raise UserError(f"{what}: has no pixels ({width}x{height})")
    if max(width, height) > MAX_ASPECT * min(width, height):
        raise UserError(
            f"{what}: {width}x{height} is {max(width, height) / min(width, height):,.0f} times longer "
            f"than wide, above the limit of {MAX_ASPECT}:1 (refused, not resized); crop it"
        )
    if width * height > limit:
        raise UserError(
            f"{what}: {width}x{height} is {width * height:,} pixels, above the limit of {limit:,}; "
            "scale it down or raise --max-pixels"
        )


def decode_image(data: str | os.PathLike | bytes, limit: int = MAX_PIXELS, what: str | None = None) -> np.ndarray:
    """An image file (path or bytes) -> RGB uint8 [H, W, 3], refused from its header when above `limit`."""
    from PIL import Image, UnidentifiedImageError

    what = what or (str(data) if not isinstance(data, bytes) else "image")
    source = io.BytesIO(data) if isinstance(data, bytes) else Path(data)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(source) as img:  # reads the header only
                check_frame_size(img.width, img.height, limit, what)
                img.draft("RGB", (img.width, img.height))
                rgb = img.convert("RGB")
    except UserError:
        raise
    except Image.DecompressionBombError as exc:  # PIL's own guard (2 x MAX_IMAGE_PIXELS) fired first
        found = re.search(r"\((\d+) pixels\)", str(exc))
        size = f"{int(found.group(1)):,} pixels" if found else "its size"
        raise UserError(f"{what}: {size}, above the limit of {limit:,}; scale it down or raise --max-pixels") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise UserError(f"{what}: not a readable image ({exc.__class__.__name__})") from None
    return np.asarray(rgb, dtype=np.uint8)


def shrink(image: np.ndarray, max_side: int = MAX_SIDE) -> np.ndarray:
    """Scale a frame down (area interpolation) so its longer side is at most `max_side`; smaller frames pass as is."""
    h, w = image.shape[:2]
    if max(h, w) <= max_side:
        return image
    import cv2

    scale = max_side / max(h, w)
    return cv2.resize(image, (max(1, round(w * scale)), max(1, round(h * scale))), interpolation=cv2.INTER_AREA)
