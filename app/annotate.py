"""Draw one processed frame: the picture above a panel with zero-shot CLIP and the adapted method
side by side (top-k with probability bars), a red frame and a DISAGREE badge where their top-1
differ, a status line (processed fps, cache fill, bank size, the entropy of CLIP's prediction in
nats) and, when a truth file is loaded, the frame's true class with a mark per method. A run
with random weights (`--pretrained none`) gets a yellow RANDOM WEIGHTS banner across the top of the
picture, so no frame of it can pass for a real model's predictions.

`annotate(image, result)` is a pure function: it returns a new RGB uint8 image with even width
and height (what H.264 needs) and never changes its input.
"""

from __future__ import annotations

import functools

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from . import palette
from .session import FrameResult, Scored, method_title

MIN_WIDTH = 480  # narrower frames are scaled up so the panel text stays legible
BG = (22, 24, 28)
FG = (235, 235, 235)
DIM = (150, 155, 165)
CLIP_COLOR = palette.rgb(palette.CLIP)  # one palette with the page's charts (app.palette)
TTA_COLOR = palette.rgb(palette.method_color(0))
AGREE_COLOR = palette.rgb(palette.AGREE)
DISAGREE_COLOR = palette.rgb(palette.DISAGREE)
MARK_COLOR = palette.rgb(palette.MARK)  # the random-weights banner: black text on this yellow
RANDOM_WEIGHTS_MARK = "RANDOM WEIGHTS: predictions are meaningless"


def random_weights(clip: object) -> bool:
    """Whether `clip` runs on random weights (`--pretrained none`, as `mstta.features.models.load_clip` reads
    an empty or absent tag): the one test behind every RANDOM WEIGHTS mark, banner and log field."""
    tag = getattr(clip, "pretrained", None)
    return tag is None or str(tag).strip().lower() in ("", "none")


@functools.lru_cache(maxsize=16)
def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1: fixed-size bitmap font
        return ImageFont.load_default()


def _fit_text(draw: ImageDraw.ImageDraw, text: str, font, width: int) -> str:
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "…", font=font) > width:
        text = text[:-1]
    return text + "…"


def status_line(result: FrameResult, fps: float | None = None, bank_limit: int | None = None) -> str:
    """'12.5 fps  ·  cache 4/9  ·  bank 12/4096  ·  CLIP entropy 0.80 nats' (parts without data left out)."""
    parts = [
        f"{fps:.1f} fps" if fps is not None else None,
        f"cache {result.cache_size}/{result.cache_capacity}" if result.cache_capacity else None,
        f"bank {result.bank_rows}" + (f"/{bank_limit}" if bank_limit else "") if result.bank_rows else None,
        f"CLIP entropy {result.entropy:.2f} nats",
    ]
    return "  ·  ".join(p for p in parts if p)


def truth_line(result: FrameResult, truth: str) -> str:
    """'true label: cat  ·  CLIP right, MS-TTA wrong'."""

    def mark(label: str) -> str:
        return "right" if label == truth else "wrong"

    title = method_title(result.method)
    return f"true label: {truth}  ·  CLIP {mark(result.clip_label)}, {title} {mark(result.tta_label)}"


def _column(
    draw: ImageDraw.ImageDraw,
    x: int,
    y: int,
    width: int,
    line: int,
    font,
    title: str,
    items: list[Scored],
    color: tuple[int, int, int],
) -> None:
    draw.text((x, y), title, fill=color, font=font)
    pct_w = int(draw.textlength("100%", font=font)) + 4
    bar_max = max(8, width // 3)
    for rank, item in enumerate(items):
        yy = y + line * (rank + 1)
        bar = int(round(bar_max * max(0.0, min(1.0, item.prob))))
        top = yy + line // 5
        draw.rectangle([x, top, x + bar_max, yy + line - line // 5], fill=(45, 48, 56))
        if bar > 0:
            draw.rectangle([x, top, x + bar, yy + line - line // 5], fill=color if rank == 0 else DIM)
        pct = f"{item.prob * 100:.0f}%"
        draw.text((x + bar_max + 6 + pct_w - draw.textlength(pct, font=font), yy), pct, fill=FG, font=font)
        name_x = x + bar_max + pct_w + 14
        name = _fit_text(draw, item.label, font, x + width - name_x)
        draw.text((name_x, yy), name, fill=FG if rank == 0 else DIM, font=font)


def mark_height(width: int) -> int:
    """Height in pixels of the banner `draw_mark` draws on a picture `width` pixels wide."""
    return int(round(14 * max(1.0, width / MIN_WIDTH) * 1.45)) + 4


def draw_mark(draw: ImageDraw.ImageDraw, width: int, text: str) -> None:
    """A yellow banner with `text` in black across the top of the picture."""
    scale = max(1.0, width / MIN_WIDTH)
    font = _font(max(10, int(round(14 * scale))))
    draw.rectangle([0, 0, width - 1, mark_height(width) - 1], fill=MARK_COLOR)
    draw.text((max(4, int(round(8 * scale))), 2), _fit_text(draw, text, font, width - 8), fill=(0, 0, 0), font=font)


def annotate(
    image: np.ndarray,
    result: FrameResult,
    *,
    fps: float | None = None,
    bank_limit: int | None = None,
    truth: str | None = None,
    mark: str | None = None,
    min_width: int = MIN_WIDTH,
) -> np.ndarray:
    """The frame with both predictions drawn below it; RGB uint8 [H', W', 3], even sizes.

    `truth` (the frame's class from a truth file) adds a line: the true label, and whether each
    method's top-1 matches it. `mark` (e.g. `RANDOM_WEIGHTS_MARK`) is drawn as a banner across the
    top of the picture.
    """
    pic = _scaled(image, min_width)
    out_w, ph = pic.size
    scale = out_w / MIN_WIDTH
    size = max(10, int(round(14 * scale)))
    line = int(round(size * 1.45))
    pad = max(4, int(round(8 * scale)))
    k = max(len(result.clip_topk), len(result.tta_topk))
    panel_h = pad * 2 + line * (k + 2 + (truth is not None))
    total_h = ph + panel_h
    total_h += total_h % 2
    canvas = Image.new("RGB", (out_w, total_h), BG)
    canvas.paste(pic, (0, 0))
    draw = ImageDraw.Draw(canvas)
    font = _font(size)

    if result.disagree:
        _draw_border(draw, out_w, ph, scale)
    col_w = (out_w - 3 * pad) // 2
    y = ph + pad
    if mark:
        draw_mark(draw, out_w, mark)
    _column(draw, pad, y, col_w, line, font, "CLIP zero-shot", result.clip_topk, CLIP_COLOR)
    _column(draw, 2 * pad + col_w, y, col_w, line, font, method_title(result.method), result.tta_topk, TTA_COLOR)
    status = status_line(result, fps, bank_limit)
    _draw_status(draw, result, status, truth, pad, ph + pad + line * (k + 1), out_w, line, font)
    return np.asarray(canvas, dtype=np.uint8).copy()


def _scaled(image: np.ndarray, min_width: int) -> Image.Image:
    """The picture at an even width of at least `min_width`, its aspect ratio kept."""
    h, w = image.shape[:2]
    out_w = max(w, min_width)
    out_w += out_w % 2
    pic = Image.fromarray(np.ascontiguousarray(image))
    if w != out_w:
        pic = pic.resize((out_w, max(2, round(h * out_w / w))), Image.BILINEAR)
    return pic


def _draw_border(draw: ImageDraw.ImageDraw, width: int, height: int, scale: float) -> None:
    """The red frame around a picture where the two methods disagree."""
    border = max(2, int(round(4 * scale)))
    for i in range(border):
        draw.rectangle([i, i, width - 1 - i, height - 1 - i], outline=DISAGREE_COLOR)


def _draw_status(
    draw: ImageDraw.ImageDraw,
    result: FrameResult,
    status: str,
    truth: str | None,
    pad: int,
    y: int,
    width: int,
    line: int,
    font,
) -> None:
    """The status line with the agree / DISAGREE badge at its right end, then the truth line (if any)."""
    badge, color = ("DISAGREE", DISAGREE_COLOR) if result.disagree else ("agree", AGREE_COLOR)
    badge_w = int(draw.textlength(badge, font=font))
    draw.text((pad, y), _fit_text(draw, status, font, width - 3 * pad - badge_w), fill=DIM, font=font)
    draw.text((width - pad - badge_w, y), badge, fill=color, font=font)
    if truth is not None:
        draw.text(
            (pad, y + line), _fit_text(draw, truth_line(result, truth), font, width - 2 * pad), fill=FG, font=font
        )
