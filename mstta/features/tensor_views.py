"""The views of `mstta.features.views` made from uint8 image tensors on any device (the encoder's: CUDA when present).

Same parameters, other pixel arithmetic: `ViewMaker.params` draws every box, flip, AugMix op,
value, Dirichlet weight and Beta mix from `sample_rng(seed, index)` exactly as the PIL path, and
`TensorViewMaker.make` turns them into pixels batched over all views of a sample:
- crops: PIL's own separable resize weights (Resample.c `precompute_coeffs`, bilinear, 22-bit
  fixed point), which read past the box as PIL does, applied in PIL's two passes (horizontal,
  rounded to uint8 as PIL rounds between passes, then vertical): on a GPU as two batched float64
  matmuls over all views (exact sums; float64 is slow on consumer GPUs, ~11 GFLOP a 500x375 sample
  with 63 crops), on a CPU tap by tap in int32 as PIL; the flip reverses the weights;
- AugMix: the chains of every view in one batch, step by step, grouped by op: autocontrast as
  PIL's per-channel lookup table, equalize/posterize/solarize as PIL's tables, and rotate, shear
  and translate through PIL's inverse affine maps in one `grid_sample` (bilinear, edge-clamped,
  truncated, black where the source point is outside, as PIL's Geometry.c); mixed in float32 as
  `mstta.features.views.augmix_pil`;
- view 0: the model's Resize/CenterCrop (`mstta.features.views.Geometry`, from its open_clip preprocess config)
  as PIL computes them (bicubic or bilinear weights, the same two passes), through PIL otherwise.
That exact arithmetic is the default (always on CUDA; the equivalence tests' reference). On CPU
tensors `TensorViewMaker(..., exact=False)` (extraction's workers use it) runs `mstta.features.fast_views`
instead (torch's uint8 antialiased resize with PIL's edge rows, float32 grid, lookup tables; within
the issue's tolerance and faster than PIL per view), with the AugMix chains in cache-sized chunks;
view 0 there goes through PIL's own resize (exact, one per sample).
Measured against PIL in tests/test_tensor_views.py and docs/benchmark.md ("Views on tensors").
"""

from __future__ import annotations

import logging
import math
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from ..errors import UserError
from ..threads import small_ops
from .fast_views import affine32, autocontrast_lut, equalize_lut, fast_crops, translate
from .views import ViewMaker, ViewParams, check_image_shape

log = logging.getLogger(__name__)

PRECISION_BITS = 22  # PIL's fixed-point resize weights (Resample.c: 32 - 8 - 2)
CHUNK_BYTES = 256 * 2**20  # largest intermediate of one batched crop call (views are chunked to fit)
CPU_CHUNK_BYTES = 16 * 2**20  # CPU tensors: float32 AugMix chains per call kept near the caches (measured fastest)
GEOMETRIC = ("rotate", "shear_x", "shear_y", "translate_x", "translate_y")


def _bilinear(x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    return np.where(x < 1.0, 1.0 - x, 0.0)


def _bicubic(x: np.ndarray) -> np.ndarray:
    a, x = -0.5, np.abs(x)
    return np.where(
        x < 1.0, ((a + 2.0) * x - (a + 3.0)) * x * x + 1, np.where(x < 2.0, (((x - 5) * x + 8) * x - 4) * a, 0.0)
    )


FILTERS = {"bilinear": (_bilinear, 1.0), "bicubic": (_bicubic, 2.0)}  # PIL's filters and supports


def resize_taps(
    in_size: int, in0: np.ndarray, in1: np.ndarray, out_size: int, filt: str = "bilinear"
) -> tuple[np.ndarray, np.ndarray]:
    """PIL's resize weights of boxes [in0, in1) -> out_size pixels (Resample.c `precompute_coeffs` +
    `normalize_coeffs_8bpc`), for B boxes at once -> (source index, 22-bit fixed-point weight), both
    [B, out_size, K]; the window reaches past the box by the filter support, clipped to the image."""
    fn, base_support = FILTERS[filt]
    in0, in1 = np.asarray(in0, np.float64)[:, None], np.asarray(in1, np.float64)[:, None]
    scale = (in1 - in0) / out_size
    filterscale = np.maximum(scale, 1.0)
    support = base_support * filterscale
    k = int(math.ceil(float(support.max()))) * 2 + 1
    center = in0 + (np.arange(out_size) + 0.5) * scale  # [B, S]
    xmin = np.maximum(np.trunc(center - support + 0.5), 0).astype(np.int64)
    xmax = np.minimum(np.trunc(center + support + 0.5), in_size).astype(np.int64)
    src = xmin[..., None] + np.arange(k)  # [B, S, K]
    valid = src < xmax[..., None]
    w = np.where(valid, fn((src - center[..., None] + 0.5) / filterscale[..., None]), 0.0)
    total = w.sum(-1, keepdims=True)
    w = np.divide(w, total, out=np.zeros_like(w), where=total != 0)
    fixed = np.trunc(w * (1 << PRECISION_BITS) + np.where(w < 0, -0.5, 0.5))  # C's (int)(x +- 0.5)
    return np.where(valid, src, 0), fixed


def _dense(
    taps: tuple[np.ndarray, np.ndarray], in_size: int, flip: np.ndarray | None, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """Taps [B, S, K] -> dense fixed-point weights [B, S, in_size] on `device`, rows reversed where flipped."""
    idx, w = (torch.from_numpy(a).to(device) for a in taps)
    out = torch.zeros(*idx.shape[:2], in_size, dtype=dtype, device=device)
    out.scatter_add_(2, idx, w.to(dtype))
    if flip is not None and flip.any():
        f = torch.from_numpy(flip).to(device)
        out[f] = out[f].flip(1)
    return out


def _round8(x: torch.Tensor) -> torch.Tensor:
    """A pass's fixed-point sums -> 0..255 as PIL: (sum + 2^21) >> 22, clipped."""
    return x.add_(1 << (PRECISION_BITS - 1)).mul_(2.0**-PRECISION_BITS).floor_().clamp_(0, 255)


def two_pass(img: torch.Tensor, wx: torch.Tensor, wy: torch.Tensor) -> torch.Tensor:
    """uint8 [3, H, W] -> uint8 [B, 3, Sy, Sx] through fixed-point weights wx [B, Sx, W], wy [B, Sy, H]:
    PIL's horizontal pass, rounded to uint8, then its vertical pass (Resample.c `ImagingResampleInner`)."""
    src = img.to(wx.dtype).unsqueeze(0)  # [1, 3, H, W]
    rows = _round8(src @ wx.transpose(1, 2).unsqueeze(1))  # [B, 3, H, Sx]
    return _round8(wy.unsqueeze(1) @ rows).to(torch.uint8)  # [B, 3, Sy, Sx]


def _shift8(x: torch.Tensor) -> torch.Tensor:
    return ((x + (1 << (PRECISION_BITS - 1))) >> PRECISION_BITS).clamp_(0, 255)


def two_pass_taps(img: torch.Tensor, tx: tuple, ty: tuple, flips: np.ndarray | None) -> torch.Tensor:
    """The same two passes from the taps, view by view on the rows each needs, in int32 as PIL
    computes them (bit-exact; on a CPU ~5x faster than the dense matmuls, on a GPU a kernel per view)."""
    ix, wx, iy, wy = (torch.from_numpy(np.ascontiguousarray(a)) for a in (*tx, *ty))
    wx, wy, src = wx.int(), wy.int(), img.int()
    out = []
    for v in range(len(ix)):
        y0, y1 = int(iy[v].min()), int(iy[v].max()) + 1
        rows = _shift8((src[:, y0:y1, ix[v]] * wx[v]).sum(-1))  # [3, h, Sx]
        o = _shift8((rows[:, iy[v] - y0] * wy[v].unsqueeze(-1)).sum(2)).to(torch.uint8)  # [3, Sy, Sx]
        out.append(o.flip(-1) if flips is not None and flips[v] else o)
    return torch.stack(out)


def resample(
    img: torch.Tensor, tx: tuple, ty: tuple, flips: np.ndarray | None = None, dense: bool | None = None
) -> torch.Tensor:
    """PIL's two-pass resize of `img` by the taps (horizontal, vertical) of B views -> uint8 [B, 3, Sy, Sx];
    `dense`: as two batched float64 matmuls (None: on CUDA only; both give the same pixels)."""
    if not (img.device.type != "cpu" if dense is None else dense):
        return two_pass_taps(img, tx, ty, flips)
    dtype = torch.float64  # sums of 22-bit weights x 8-bit pixels: exact in float64 (not float32, nor TF32)
    return two_pass(
        img, _dense(tx, img.shape[2], flips, img.device, dtype), _dense(ty, img.shape[1], None, img.device, dtype)
    )


def resized_crops(
    img: torch.Tensor, boxes: Sequence[tuple[int, int, int, int]], flips: Sequence[bool], size: int
) -> torch.Tensor:
    """uint8 image [3, H, W] -> uint8 crops [B, 3, size, size]: PIL's `resize((size, size), BILINEAR,
    box)` of each box (left, top, w, h), then its horizontal flip (`mstta.features.views.crop_pil`)."""
    _, height, width = img.shape
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    return resample(
        img,
        resize_taps(width, b[:, 0], b[:, 0] + b[:, 2], size),
        resize_taps(height, b[:, 1], b[:, 1] + b[:, 3], size),
        np.asarray(flips, bool),
    )


def resized_crops_fast(
    img: torch.Tensor, boxes: Sequence[tuple[int, int, int, int]], flips: Sequence[bool], size: int
) -> torch.Tensor:
    """`resized_crops` by `mstta.features.fast_views.fast_crops` (CPU tensors): within 1 level of PIL."""
    _, height, width = img.shape
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    return fast_crops(
        img,
        boxes,
        flips,
        size,
        resize_taps(width, b[:, 0], b[:, 0] + b[:, 2], size),
        resize_taps(height, b[:, 1], b[:, 1] + b[:, 3], size),
    )


def geometry_plan(geometry, width: int, height: int) -> tuple | None:
    """A `mstta.features.views.Geometry` on a width x height image -> (filter, resized (w, h), crop (left, top,
    w, h)), the integer geometry PIL runs for torchvision's Resize + CenterCrop; None for what this
    does not cover (`longest`, non-square `shortest`, any other callable: view 0 then goes through PIL)."""
    from .views import Geometry

    if not isinstance(geometry, Geometry) or geometry.interpolation not in FILTERS:
        return None
    pair = (geometry.size, geometry.size) if isinstance(geometry.size, int) else tuple(geometry.size)
    if geometry.resize_mode == "squash":
        h, w = pair
        return geometry.interpolation, (w, h), (0, 0, w, h)
    if geometry.resize_mode != "shortest" or pair[0] != pair[1]:
        return None
    side = pair[0]
    short, long = sorted((width, height))
    new_short, new_long = side, int(side * long / short)  # torchvision's shorter-side resize
    w, h = (new_short, new_long) if width <= height else (new_long, new_short)
    return geometry.interpolation, (w, h), (int(round((w - side) / 2.0)), int(round((h - side) / 2.0)), side, side)


def resized_view0(img: torch.Tensor, plan: tuple) -> torch.Tensor:
    """View 0 by `geometry_plan`: PIL's resize of the whole image, then the centre crop -> uint8 [3, h, w]."""
    filt, (w, h), (left, top, cw, ch) = plan
    _, height, width = img.shape
    tx = tuple(a[:, left : left + cw] for a in resize_taps(width, [0], [width], w, filt))
    ty = tuple(a[:, top : top + ch] for a in resize_taps(height, [0], [height], h, filt))
    return resample(img, tx, ty)[0]


# --- AugMix ops on uint8 batches [N, 3, S, S]; `v` holds each item's value -------------------------------


def autocontrast(x: torch.Tensor, v=None) -> torch.Tensor:
    """PIL ImageOps.autocontrast (cutoff 0): per channel, lut[i] = int(i * 255/(hi-lo) - lo * 255/(hi-lo))."""
    lo = x.amin((2, 3), keepdim=True).double()
    hi = x.amax((2, 3), keepdim=True).double()
    scale = torch.full_like(lo, 255.0).div_((hi - lo).clamp_min(1))  # not 255 / t: that is 255 * (1 / t)
    out = (x.double() * scale + (-lo * scale)).trunc_().clamp_(0, 255).to(torch.uint8)
    return torch.where(hi > lo, out, x)


def equalize(x: torch.Tensor, v=None) -> torch.Tensor:
    """PIL ImageOps.equalize (torchvision's is the same table, measured bit-exact)."""
    from torchvision.transforms.v2 import functional as TF

    return TF.equalize(x)


def posterize(x: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """PIL ImageOps.posterize: keep the top `bits` bits."""
    mask = ((255 << (8 - bits.long())) & 255).to(torch.uint8)
    return x & mask.view(-1, 1, 1, 1)


def solarize(x: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """PIL ImageOps.solarize: invert every value >= threshold."""
    return torch.where(x.short() >= threshold.short().view(-1, 1, 1, 1), 255 - x, x)


def affine_coeffs(op: str, value: float, size: int) -> tuple[float, ...]:
    """The inverse map (a, b, c, d, e, f) PIL uses for a geometric op on a size x size image
    (x_in = a x + b y + c, y_in = d x + e y + f; rotate as Image.rotate builds it, about the centre)."""
    if op == "shear_x":
        return (1, value, 0, 0, 1, 0)
    if op == "shear_y":
        return (1, 0, 0, value, 1, 0)
    if op == "translate_x":
        return (1, 0, value, 0, 1, 0)
    if op == "translate_y":
        return (1, 0, 0, 0, 1, value)
    angle = -math.radians(value % 360.0)
    a, b = round(math.cos(angle), 15), round(math.sin(angle), 15)
    d, e = round(-math.sin(angle), 15), round(math.cos(angle), 15)
    cx = cy = size / 2
    return (a, b, a * -cx + b * -cy + cx, d, e, d * -cx + e * -cy + cy)


def affine(x: torch.Tensor, coeffs: torch.Tensor) -> torch.Tensor:
    """PIL's Image.transform(AFFINE, BILINEAR, fillcolor=0) for a batch: output pixel (x, y) reads the
    source point A (x + .5, y + .5); black where that point is outside the image; bilinear with the
    neighbours clamped to the edge; truncated to uint8 (Geometry.c `bilinear_filter32RGB`)."""
    n, _, h, w = x.shape
    c = coeffs.to(x.device, torch.float64).view(n, 2, 3)
    ys, xs = torch.meshgrid(
        torch.arange(h, device=x.device, dtype=torch.float64) + 0.5,
        torch.arange(w, device=x.device, dtype=torch.float64) + 0.5,
        indexing="ij",
    )
    pts = torch.stack([xs, ys, torch.ones_like(xs)], -1).view(1, h * w, 3)
    src = (pts @ c.transpose(1, 2)).view(n, h, w, 2)  # source points, pixel units
    inside = (src[..., 0] >= 0) & (src[..., 0] < w) & (src[..., 1] >= 0) & (src[..., 1] < h)
    grid = src / torch.tensor([w, h], device=x.device, dtype=torch.float64) * 2 - 1
    out = F.grid_sample(x.double(), grid, mode="bilinear", padding_mode="border", align_corners=False)
    out = out.add_(1e-6).floor_().clamp_(0, 255).to(torch.uint8)
    return out * inside.unsqueeze(1)


TENSOR_OPS = {"autocontrast": autocontrast, "equalize": equalize, "posterize": posterize, "solarize": solarize}
FAST_OPS = {**TENSOR_OPS, "autocontrast": autocontrast_lut, "equalize": equalize_lut}  # CPU tensors


def _step(x: torch.Tensor, steps: list[tuple[int, str, float]], exact: bool = True) -> tuple:
    """One chain step: `steps` = (row of x, op, value) -> (rows after the step, the rows of x they
    come from): rows grouped by op, each group's rows contiguous (no scatter), the geometric ops in
    one grid_sample (float64; `exact=False`: float32, translate as a pixel shift)."""
    size = x.shape[-1]
    groups: dict[str, list[tuple[int, float]]] = {}
    for row, op, value in steps:
        if op == "rotate" and value % 360 == 0:  # PIL's rotate(0) is a copy
            continue
        name = "affine" if op in GEOMETRIC and (exact or not op.startswith("translate")) else op
        groups.setdefault(name, []).append((row, affine_coeffs(op, value, size) if name == "affine" else value))
    parts, order = [], []
    for name, items in groups.items():
        rows = [r for r, _ in items]
        part = x.index_select(0, torch.tensor(rows, device=x.device))
        if name == "affine":
            coeffs = torch.tensor([c for _, c in items], dtype=torch.float64)
            part = affine(part, coeffs) if exact else affine32(part, coeffs)
        elif name.startswith("translate"):
            shifts, zero = [int(v) for _, v in items], [0] * len(items)
            part = translate(part, *((shifts, zero) if name == "translate_x" else (zero, shifts)))
        else:
            part = (TENSOR_OPS if exact else FAST_OPS)[name](
                part, torch.tensor([int(v) for _, v in items], device=x.device)
            )
        parts.append(part.to(x.device))
        order += rows
    done = set(order)
    rest = [r for r in range(len(x)) if r not in done]
    if rest:
        parts.append(x.index_select(0, torch.tensor(rest, device=x.device)))
    return torch.cat(parts), torch.tensor(order + rest, device=x.device)


def _apply_step(x: torch.Tensor, steps: list[tuple[int, str, float]], exact: bool = True) -> None:
    """`_step` in place."""
    y, rows = _step(x, steps, exact)
    x[rows] = y


def augmix_batch(crops: torch.Tensor, params: Sequence[ViewParams], exact: bool = True) -> torch.Tensor:
    """uint8 crops [B, 3, S, S] + their AugMix parameters -> float32 mixes [B, 3, S, S] in 0..255,
    every view's chains batched (`mstta.features.views.augmix_pil` on tensors; `exact` as `_apply_step`)."""
    chains = len(params[0].weights)
    if any(len(p.weights) != chains for p in params):
        raise ValueError("every view needs the same number of AugMix chains")
    x = crops.repeat_interleave(chains, 0)  # chain k = view * chains + chain, at row where[k]
    origin = torch.arange(len(x), device=x.device)  # the chain each row of x holds
    depth = max(len(c) for p in params for c in p.chains)
    for t in range(depth):
        where = torch.empty_like(origin).index_copy_(0, origin, torch.arange(len(x), device=x.device)).tolist()
        x, rows = _step(
            x,
            [
                (where[i * chains + j], *chain[t])
                for i, p in enumerate(params)
                for j, chain in enumerate(p.chains)
                if t < len(chain)
            ],
            exact,
        )
        origin = origin[rows]
    x = x.index_select(0, torch.argsort(origin))
    w = torch.tensor([p.weights for p in params], dtype=torch.float32, device=x.device)
    m = torch.tensor([p.mix for p in params], dtype=torch.float32, device=x.device).view(-1, 1, 1, 1)
    x = x.view(len(params), chains, *x.shape[1:])
    mix = x[:, 0].float().mul_(w[:, 0].view(-1, 1, 1, 1))  # augmix_pil's order of sums
    for j in range(1, chains):
        mix.add_(x[:, j].float().mul_(w[:, j].view(-1, 1, 1, 1)))
    return crops.float().mul_(m).add_(mix.mul_(1 - m))


def to_pil(img: torch.Tensor) -> Image.Image:
    """uint8 [3, H, W] (any device) -> PIL RGB."""
    return Image.fromarray(img.permute(1, 2, 0).cpu().numpy())


class TensorViewMaker:
    """uint8 image [3, H, W] on any device + sample index -> the views of `maker` ([V, 3, S, S] on that
    device, uint8 or float32 as `ViewMaker`), the random parameters drawn by `maker.params`."""

    def __init__(self, maker: ViewMaker, chunk: int = 64, exact: bool = True):
        self.maker = maker
        self.exact = exact  # False: `mstta.features.fast_views` on CPU tensors (exact on CUDA)
        self.chunk = chunk  # views per batched call; halved on GPU out-of-memory
        self._warned = False

    def __call__(self, img: torch.Tensor, index: int) -> torch.Tensor:
        return self.make(img, self.maker.params(img.shape[2], img.shape[1], index))

    def view0(self, img: torch.Tensor) -> torch.Tensor:
        """CLIP's own resize + center crop of the image (uint8 [3, S, S]): PIL's arithmetic on the
        tensor for a `shortest`/`squash` geometry (`geometry_plan`), else the model's transform through PIL."""
        plan = geometry_plan(self.maker.geometry, img.shape[2], img.shape[1])
        if plan is None or not self._exact(img):  # on CPU tensors PIL's own resize is the fast exact one
            return torch.from_numpy(np.array(self.maker.geometry(to_pil(img)))).permute(2, 0, 1).to(img.device)
        return resized_view0(img, plan)

    def _exact(self, img: torch.Tensor) -> bool:
        """PIL's exact arithmetic (the default, and always on CUDA) or `mstta.features.fast_views` (CPU
        tensors, exact=False)."""
        return img.device.type != "cpu" or self.exact

    def _views(self, img: torch.Tensor, params: Sequence[ViewParams]) -> torch.Tensor:
        exact = self._exact(img)
        crop = resized_crops if exact else resized_crops_fast
        crops = crop(img, [p.box for p in params], [p.flip for p in params], self.maker.size)
        return augmix_batch(crops, params, exact) if params[0].augmix else crops

    def make(self, img: torch.Tensor, params: Sequence[ViewParams]) -> torch.Tensor:
        """The views of `img` with given parameters: view 0, then the augmented ones in chunks that fit
        (a GPU out-of-memory error halves the chunk, with one warning line, and retries). On a CPU
        these are small ops: one intra-op thread (`mstta.threads.small_ops`; measured 2-3x faster
        than two threads under a competing load; extraction runs one worker per core)."""
        if img.dtype != torch.uint8 or img.ndim != 3 or img.shape[0] != 3:
            raise ValueError(f"expected a uint8 image [3, H, W], got {img.dtype} {tuple(img.shape)}")
        check_image_shape(img.shape[2], img.shape[1])
        with small_ops(img.device):
            out = [self.view0(img).to(self.maker.dtype).unsqueeze(0)]
            out += self._chunks(img, params)
        return torch.cat(out)

    def _chunks(self, img: torch.Tensor, params: Sequence[ViewParams]) -> list[torch.Tensor]:
        out = []
        per_view = 8 * (3 * img.shape[1] + img.shape[1] + img.shape[2]) * self.maker.size
        limit = len(params) if self._exact(img) else CPU_CHUNK_BYTES // (36 * self.maker.size**2)
        i = 0
        while i < len(params):
            n = max(1, min(self.chunk, CHUNK_BYTES // per_view, limit))
            try:
                out.append(self._views(img, params[i : i + n]).to(self.maker.dtype))
            except torch.cuda.OutOfMemoryError:
                if n == 1:
                    raise UserError(
                        f"out of GPU memory making one view of a {img.shape[2]}x{img.shape[1]} "
                        "image; free GPU memory or pass --views-on cpu"
                    ) from None
                self.chunk = n // 2
                torch.cuda.empty_cache()
                if not self._warned:
                    log.warning("out of GPU memory while making views: %d views per batch from now on", self.chunk)
                    self._warned = True
                continue
            i += n
        return out
