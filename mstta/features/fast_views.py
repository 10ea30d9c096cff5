"""The fast pixel arithmetic of `mstta.features.tensor_views` (its default on CPU tensors): within the issue's
tolerance of PIL instead of bit-exact, and faster than PIL per view on a CPU.

- crops: torch's antialiased bilinear resize of uint8 (`F.interpolate(antialias=True)`, the
  Pillow-SIMD-style integer kernel, fast on channels-last images) on each box, then the flip. It
  differs from PIL's box resize by at most 1 level inside; PIL also reads up to the filter support
  past the box, so the outermost output row/column can differ more (measured in
  tests/test_tensor_views.py, well inside the tolerance);
- translate x/y: an integer shift with black fill (the values are whole pixels: exact);
- rotate, shear x/y: PIL's inverse affine maps in one float32 `grid_sample` (bilinear, edge-clamped,
  black where the source point is outside, floor(v + 1e-4) for PIL's truncation): max 1 level.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F


def fast_crops(
    img: torch.Tensor,
    boxes: Sequence[tuple[int, int, int, int]],
    flips: Sequence[bool],
    size: int,
    tx: tuple,
    ty: tuple,
) -> torch.Tensor:
    """uint8 [3, H, W] -> uint8 [B, 3, size, size]: each box (left, top, w, h) resized (bilinear,
    antialiased), its edge rows/columns where PIL reads past the box replaced by PIL's own values from
    the taps `tx`, `ty` (`mstta.features.tensor_views.resize_taps`), then flipped where asked."""
    src = img.unsqueeze(0).contiguous(memory_format=torch.channels_last)  # the fast uint8 kernel's layout
    pixels = img.numpy().astype(np.int32)
    out = torch.empty(len(boxes), 3, size, size, dtype=torch.uint8, device=img.device)
    for i, ((left, top, w, h), flip) in enumerate(zip(boxes, flips)):
        crop = F.interpolate(
            src[:, :, top : top + h, left : left + w],
            size=(size, size),
            mode="bilinear",
            antialias=True,
            align_corners=False,
        )[0]
        _pil_edges(crop.numpy(), pixels, (tx[0][i], tx[1][i]), (ty[0][i], ty[1][i]), (left, top, w, h))
        out[i] = crop.flip(-1) if flip else crop
    return out


def _shift8(x: np.ndarray) -> np.ndarray:
    return np.minimum((x + (1 << 21)) >> 22, 255)  # PIL's rounding of its 22-bit sums (bilinear: >= 0)


def _taps_used(w: np.ndarray) -> int:
    nonzero = np.flatnonzero((w != 0).any(0))
    return int(nonzero[-1]) + 1 if len(nonzero) else 1


def _pil_edges(crop: np.ndarray, pixels: np.ndarray, tx: tuple, ty: tuple, box: tuple) -> None:
    """Overwrite, in place, the output rows/columns of `crop` [3, Sy, Sx] whose PIL filter window
    reaches past the box with PIL's two-pass integer values (Resample.c), from the view's taps."""
    (ix, wx), (iy, wy), (left, top, w, h) = tx, ty, box
    kx, ky = _taps_used(wx), _taps_used(wy)
    ix, iy = ix[:, :kx], iy[:, :ky]
    wx, wy = wx[:, :kx].astype(np.int32), wy[:, :ky].astype(np.int32)  # 255 x 2^22 sums fit in int32
    cols = np.flatnonzero(((wx != 0) & ((ix < left) | (ix >= left + w))).any(1))
    rows = np.flatnonzero(((wy != 0) & ((iy < top) | (iy >= top + h))).any(1))
    if len(rows):  # vertical pass first here (PIL: horizontal first): within 1 level, far less work
        x0, x1 = int(ix.min()), int(ix.max()) + 1
        vert = _shift8((pixels[:, iy[rows], x0:x1] * wy[rows][None, :, :, None]).sum(2))  # [3, r, x1 - x0]
        crop[:, rows] = _shift8((vert[..., ix - x0] * wx).sum(-1))
    if len(cols):
        y0, y1 = int(iy.min()), int(iy.max()) + 1
        horiz = _shift8((pixels[:, y0:y1][:, :, ix[cols]] * wx[cols]).sum(-1))  # [3, h, c]
        crop[:, :, cols] = _shift8((horiz[:, iy - y0] * wy[None, :, :, None]).sum(2))


def translate(x: torch.Tensor, dx: Sequence[int], dy: Sequence[int]) -> torch.Tensor:
    """PIL's AFFINE translate (x_in = x + dx, y_in = y + dy, whole pixels, black fill) per item."""
    out = torch.zeros_like(x)
    h, w = x.shape[-2:]
    for i, (cx, cy) in enumerate(zip(dx, dy)):
        cx, cy = int(cx), int(cy)
        if abs(cx) >= w or abs(cy) >= h:
            continue
        out[i, :, max(0, -cy) : h - max(0, cy), max(0, -cx) : w - max(0, cx)] = x[
            i, :, max(0, cy) : h + min(0, cy), max(0, cx) : w + min(0, cx)
        ]
    return out


def affine32(x: torch.Tensor, coeffs: torch.Tensor) -> torch.Tensor:
    """`mstta.features.tensor_views.affine` (PIL's Image.transform AFFINE, BILINEAR, black fill) in float32:
    source point A (x + .5, y + .5), black outside the image, bilinear edge-clamped, truncated; PIL's
    pixel-space map rewritten in grid_sample's normalised coordinates (u = 2 (x + .5) / w - 1)."""
    n, _, h, w = x.shape
    a, b, c, d, e, f = (v.to(x.device, torch.float32).view(n, 1, 1) for v in coeffs.to(torch.float64).unbind(1))
    u = (torch.arange(w, device=x.device, dtype=torch.float32).view(1, 1, w) + 0.5) * (2 / w) - 1
    v = (torch.arange(h, device=x.device, dtype=torch.float32).view(1, h, 1) + 0.5) * (2 / h) - 1
    grid = torch.empty(n, h, w, 2, device=x.device)
    torch.add(a * u, b * (h / w) * v + (a + b * (h / w) + 2 * c / w - 1), out=grid[..., 0])
    torch.add(d * (w / h) * u, e * v + (d * (w / h) + e + 2 * f / h - 1), out=grid[..., 1])
    inside = grid.abs().amax(-1) < 1  # source point inside the image
    out = F.grid_sample(x.float(), grid, mode="bilinear", padding_mode="border", align_corners=False)
    return out.add_(1e-4).floor_().clamp_(0, 255).to(torch.uint8).mul_(inside.unsqueeze(1))


def _apply_luts(x: torch.Tensor, luts: np.ndarray) -> torch.Tensor:
    """uint8 [n, 3, S, S] (CPU) through per-image, per-channel tables luts [n, 3, 256]."""
    a = x.numpy()
    out = np.empty_like(a)
    for i in range(a.shape[0]):
        for c in range(a.shape[1]):
            np.take(luts[i, c], a[i, c], out=out[i, c])
    return torch.from_numpy(out)


def autocontrast_lut(x: torch.Tensor, v=None) -> torch.Tensor:
    """PIL ImageOps.autocontrast (cutoff 0) by its own per-channel table, float64 as PIL computes it."""
    a = x.numpy().reshape(*x.shape[:2], -1)
    lo, hi = a.min(-1).astype(np.float64)[..., None], a.max(-1).astype(np.float64)[..., None]
    scale = 255.0 / np.maximum(hi - lo, 1)
    lut = np.clip(np.trunc(np.arange(256) * scale - lo * scale), 0, 255)
    return _apply_luts(x, np.where(hi > lo, lut, np.arange(256)).astype(np.uint8))


def equalize_lut(x: torch.Tensor, v=None) -> torch.Tensor:
    """PIL ImageOps.equalize by its own per-channel table: lut[i] = (step // 2 + sum(h[:i])) // step."""
    a = x.numpy()
    n, ch = a.shape[:2]
    hist = np.stack([np.bincount(a[i, c].ravel(), minlength=256) for i in range(n) for c in range(ch)])
    last = hist[np.arange(len(hist)), 255 - np.argmax(hist[:, ::-1] > 0, 1)]
    step = ((hist.sum(1) - last) // 255)[:, None]
    before = np.cumsum(hist, 1) - hist
    lut = np.clip((step // 2 + before) // np.maximum(step, 1), 0, 255)
    identity = (step == 0) | ((hist > 0).sum(1, keepdims=True) <= 1)
    return _apply_luts(x, np.where(identity, np.arange(256), lut).astype(np.uint8).reshape(n, ch, 256))
