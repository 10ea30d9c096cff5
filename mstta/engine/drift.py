"""The scene-cut detector (the project's design, not a published rule; docs/engine.md, "The detector"):
its state per stream (`Drift`), one sample into it on the device (`drift_step_t`, branchless, no host
read); the same cuts over a stored stream at once are `drift_scan.py`'s.

The statistic, in float64 in both paths: view 0's feature x made unit (and read through the fixed map
`detect_projection` when wider than DETECT_DIMS), u; the reference is the first W = `detect_warmup`
samples since the last reset (mean mu, population covariance C, ridge r, P = (C + r/k I)^-1, its
effective dimension m = tr(C P) = k - r/k tr P); e the EMA of rate a of every u (the first: u);
z = (e - mu)^T P (e - mu) (W - m - 2) / (W m (a/(2-a) + 1/W)) (z ~ 1 while the scene holds: the
EMA's variance a/(2-a) C plus the reference mean's C/W; W/(W - m - 2) is the inverse-Wishart bias of
a W-sample P); a CUSUM acc = max(0, acc + z - 1 - `detect_slack`) from sample W + 1 on; a cut when
acc > `detect_threshold`, and the detector starts over from the next sample.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch

from . import fused
from .host import host_view

# The detector reads features wider than this through a fixed seeded random map to this many
# dimensions (`detect_projection`): its settings were chosen at the digits model's d = 64, and at
# CLIP widths (512, 768) a 150-sample reference covariance is rank-deficient (docs/streams.md).
DETECT_DIMS = 64
DETECT_SEED = 29


def detect_projection(dim: int, device) -> torch.Tensor | None:
    """The detector's fixed map R [d, k] for d > k = DETECT_DIMS (the project's design): the Q of the
    QR of a seeded (DETECT_SEED) standard normal [d, k] in float64, times sqrt(d / k), so u -> u R
    keeps a feature's squared norm on average (Johnson-Lindenstrauss); None for d <= k (no map)."""
    if dim <= DETECT_DIMS:
        return None
    return _projection(dim).to(device, copy=True)


@functools.lru_cache(maxsize=8)
def _projection(dim: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(DETECT_SEED)
    q, _ = torch.linalg.qr(torch.randn(dim, DETECT_DIMS, generator=g, dtype=torch.float64))
    return q * math.sqrt(dim / DETECT_DIMS)


def detect_input(x: torch.Tensor, proj: torch.Tensor | None) -> torch.Tensor:
    """Features x [..., d] (any float dtype) -> the detector's rows [..., k] in float64: x R / |x|
    (the unit feature read through the map; |x| floored as F.normalize does)."""
    x = x.double()
    norm = x.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return (x if proj is None else x @ proj) / norm


def count_table(fg, device) -> torch.Tensor:
    """The per-sample coefficients by count n since the reset, [W + 2, 6, 1] float64, row min(n, W + 1)
    (row 0: a stream that does not step): Welford's weight 1/n on the reference's samples (0 after),
    the EMA's rate (1 at n = 1: e = u), 1 at n = 1 (inv starts over), Sherman-Morrison's 1 / beta =
    1 - 1/n (M += n/(n-1) d d^T, d = u - the new mean; +inf where no update: n = 1 and after the
    reference), the CUSUM's floor 0 and ceiling (0 up to n = W, +inf after)."""
    w_ref = fg.detect_warmup
    n = torch.arange(w_ref + 2, dtype=torch.float64)
    ref, first = (n >= 1) & (n <= w_ref), (n == 1).double()
    w = torch.where(ref, 1 / n.clamp_min(1), 0.0)
    rate = torch.full_like(n, fg.detect_rate).masked_fill_(n == 1, 1.0).masked_fill_(n == 0, 0.0)
    inv_beta = torch.where(ref & (n >= 2), 1 - w, math.inf)
    top = torch.where(n > w_ref, math.inf, 0.0)
    return torch.stack((w, rate, first, inv_beta, torch.zeros_like(n), top), -1).unsqueeze(-1).to(device)


def z_terms(fg, dim: int, device) -> torch.Tensor:
    """The constants [3, 2] of `z_scale`: with m = k - (W r / k) tr(inv) and c = a/(2-a) + 1/W, the
    rows b0, b1, floor of (W - 2 - m) / c, m = b0 + tr(inv) b1, each at least its floor."""
    w_ref, a, r = fg.detect_warmup, fg.detect_rate, fg.detect_ridge
    c, q = a / (2 - a) + 1 / w_ref, w_ref * r / dim
    return torch.tensor([[(w_ref - 2 - dim) / c, dim], [q / c, -q], [1 / c, 1e-6]], dtype=torch.float64, device=device)


def z_scale(tr_inv: torch.Tensor, terms: torch.Tensor) -> torch.Tensor:
    """The factor of g^T inv g (inv = (W C + W r/k I)^-1 = P / W) that makes z, from tr(inv) [...]:
    max(W - m - 2, 1) / (max(m, 1e-6) (a/(2-a) + 1/W)), m = tr(C P) = k - (W r / k) tr(inv)."""
    b0, b1, floor = terms.unbind(0)
    return torch.div(*torch.addcmul(b0, tr_inv.unsqueeze(-1), b1).clamp_min_(floor).unbind(-1))


@dataclass
class Drift:
    """The scene-cut detector's state per stream (the project's design), float64: the count n [S]
    (long) of samples since the last reset (0: the next sample starts the reference; it stops at
    W + 1, past the warm-up), `me` [S, 2, k]: the reference's mean and the EMA of every sample, `inv`
    [S, k, k] = (M + W r / k I)^-1, M the reference's sum of squared deviations (Welford and
    Sherman-Morrison over its W samples, then frozen), the CUSUM `acc` [S] and `scale` [S], z's
    factor `z_scale` of the current inv; constants: `start` [k, k] (inv at a reset), `table`
    (`count_table`), `terms` (`z_terms`) and `proj` [D, k] (`detect_projection`, for D > DETECT_DIMS)."""

    n: torch.Tensor
    me: torch.Tensor
    inv: torch.Tensor
    acc: torch.Tensor
    scale: torch.Tensor
    start: torch.Tensor
    table: torch.Tensor
    terms: torch.Tensor
    proj: torch.Tensor | None = None

    @classmethod
    def empty(cls, streams: int, dim: int, device, cfg) -> Drift:
        proj = detect_projection(dim, device)
        dim = min(dim, DETECT_DIMS)
        f64 = dict(device=device, dtype=torch.float64)
        start = torch.eye(dim, **f64) * (dim / (cfg.detect_warmup * cfg.detect_ridge))
        n, me = torch.zeros(streams, dtype=torch.long, device=device), torch.zeros(streams, 2, dim, **f64)
        inv = start.expand(streams, dim, dim).clone()
        acc, scale = torch.zeros(streams, **f64), torch.zeros(streams, **f64)
        return cls(n, me, inv, acc, scale, start, count_table(cfg, device), z_terms(cfg, dim, device), proj)

    def clear(self, s: int) -> None:
        self.drop_host_state()
        for t in (self.n, self.me, self.acc, self.scale):
            t[s] = 0
        self.inv[s] = self.start

    def forget(self, cut: torch.Tensor) -> None:
        """Start over where cut [S] (bool), on the device: the next sample starts the reference (its
        mean, EMA and inv are then exactly a fresh detector's: `drift_step_t`'s lerps of weight 1)."""
        self.drop_host_state()
        self.n.masked_fill_(cut, 0)
        self.acc.masked_fill_(cut, 0)

    def drop_host_state(self) -> None:
        """Forget what the host derived from the state (`watch_one`'s `Watch`): any write but its own."""
        self.__dict__.pop("_watch", None)


def drift_step_t(d: Drift, x: torch.Tensor, fg, ok=None) -> torch.Tensor:
    """One sample x [S, D] (view 0's features) into the detector, in place; -> cut [S] bool (the
    state is reset before this sample). The statistic of the module's docstring, in float64;
    Welford's mean and Sherman-Morrison's inverse over the reference's samples, frozen after
    (their coefficients are 0 there: `count_table`). `ok` [S]: the stepping streams (fg: ForgetConfig).
    Branchless: on any device, in a CUDA graph; `drift_step_host` does the same with fewer ops. On a
    CUDA device with Triton: one fused kernel (`fused`), the same values to float64 rounding."""
    d.drop_host_state()
    if fused.wanted(x.device) and (cut := fused.drift_step_fused(d, x, fg, ok)) is not None:
        return cut
    u = detect_input(x, d.proj)
    d.n.add_(1 if ok is None else ok).clamp_max_(fg.detect_warmup + 1)
    coef = d.table[d.n if ok is None else d.n * ok]  # [S, 6, 1]
    *_, inv_beta, low, top = coef.unbind(1)  # each [S, 1]
    d.inv.lerp_(d.start, coef[:, 2:3])  # n = 1: the reference starts from (W r / k I)^-1
    d.me.lerp_(u.unsqueeze(1), coef[:, :2])  # Welford's mean and the EMA (n = 1: both u)
    quad = _quad(d)  # inv before this sample's update: the same as after once the reference is complete
    _sherman_morrison(d, u, inv_beta)
    d.scale.copy_(z_scale(d.inv.diagonal(dim1=-2, dim2=-1).sum(-1), d.terms))
    acc = d.acc if ok is None else d.acc.clone()
    acc.addcmul_(quad, d.scale).sub_(1 + fg.detect_slack).clamp_(low.view(-1), top.view(-1))
    if ok is not None:
        d.acc.copy_(torch.where(ok, acc, d.acc))
    cut = d.acc > fg.detect_threshold
    d.acc.masked_fill_(cut, 0)
    d.n.masked_fill_(cut, 0)
    return cut


def _quad(d: Drift) -> torch.Tensor:
    """g^T inv g [S], g = e - mean (the EMA's distance from the reference's mean)."""
    g = torch.diff(d.me, dim=1)  # [S, 1, k]
    return torch.linalg.vecdot(g, g @ d.inv).view(-1)


def _sherman_morrison(d: Drift, u: torch.Tensor, inv_beta: torch.Tensor) -> None:
    """inv -= c (inv d)(inv d)^T, d = u - the new mean, c = 1 / (d^T inv d + 1/beta) [S, 1] (0 where
    1/beta = +inf: no update), in place: the reference's M += n/(n-1) d d^T."""
    dv = u.unsqueeze(1) - d.me[:, :1]  # [S, 1, k]
    bd = dv @ d.inv
    c = ((dv * bd).sum(-1) + inv_beta).reciprocal_()  # [S, 1]
    d.inv.baddbmm_(bd.mT, bd * c.unsqueeze(-1), alpha=-1)


def drift_step_host(d: Drift, x: torch.Tensor, fg, ok=None) -> np.ndarray:
    """`drift_step_t` where the host may read the state (on a CPU, numpy views of the count and the
    CUSUM, `host_view`; elsewhere copies) -> cut [S] on the host. One CPU stream that steps:
    `drift_step_one`. When every stream steps in one phase: past the warm-up (n >= W before the
    sample) the EMA, z and the CUSUM only (mean, inv and scale are frozen: their coefficients are 0);
    inside it (n < W) the reference's update only (the CUSUM's ceiling is 0 there, so it stays 0);
    else, or with skipped streams, `drift_step_t`. The same ops on the same values but one CPU
    stream's (`drift_step_one`, on numpy: float64 rounding)."""
    cpu, w_ref = d.n.device.type == "cpu", fg.detect_warmup
    n = host_view(d, "n") if cpu else d.n.cpu().numpy()
    if ok is not None and not bool(ok.all()):
        return drift_step_t(d, x, fg, ok).cpu().numpy()
    if cpu and len(n) == 1:
        return np.array([drift_step_one(d, x.unsqueeze(1), fg)])
    low, high = n.min(), n.max()
    if low >= w_ref:  # every stream watches
        if low == w_ref:  # a stream's first sample past the warm-up (the count stops at W + 1)
            d.n.add_(1).clamp_max_(w_ref + 1)
        return _watch_t(d, x, fg, cpu)
    if high < w_ref:  # every stream learns its reference
        _learn_t(d, x, low == 0)
        return np.zeros(len(n), dtype=bool)
    return drift_step_t(d, x, fg, ok).cpu().numpy()


def drift_step_one(d: Drift, x: torch.Tensor, fg) -> bool:
    """`drift_step_host` for one CPU stream that steps, x [1, V, D] (view 0 into the detector) ->
    whether it cuts (the state reset before this sample): the count read as a scalar; past the
    warm-up `watch_one` (the tensor ops where it has no factor), inside it `_learn_one`."""
    n, w_ref = host_view(d, "n"), fg.detect_warmup
    if n[0] >= w_ref:
        if n[0] == w_ref:  # the first sample past the warm-up (the count stops at W + 1)
            d.n.add_(1).clamp_max_(w_ref + 1)
        hit = watch_one(d, x, fg)
        return bool(_watch_t(d, x[:, 0], fg, True)[0]) if hit is None else hit
    _learn_one(d, x)
    return False


def _learn_one(d: Drift, x: torch.Tensor) -> None:
    """`_learn_t` of one CPU stream, x [1, V, D], on numpy views of the record (`host_view`): Welford's
    mean and the EMA (torch's lerp formula), Sherman-Morrison's update of inv, z's factor `z_scale`;
    `drift_step_t`'s values up to float64 rounding (tests/test_host_reads.py)."""
    d.drop_host_state()
    n = host_view(d, "n")
    n[0] += 1
    w_mean, rate, first, inv_beta = host_view(d, "table")[int(n[0]), :4, 0].tolist()
    me, inv = host_view(d, "me")[0], host_view(d, "inv")[0]
    row = x.numpy()[0, 0].astype(np.float64)
    norm = max(math.sqrt(np.dot(row, row)), 1e-12)  # as `detect_input`
    u = (row if d.proj is None else np.dot(row, host_view(d, "proj"))) / norm
    if first:  # the reference starts: inv from (W r / k I)^-1
        inv[:] = host_view(d, "start")
    for e, w in zip(me, (w_mean, rate)):
        _lerp(e, u, w)
    if inv_beta != math.inf:
        dv = u - me[0]
        bd = np.dot(dv, inv)
        inv -= np.outer(bd, bd * (1 / (np.dot(dv, bd) + inv_beta)))
    (b0, k0), (b1, k1), (f0, f1) = host_view(d, "terms").tolist()
    tr = float(np.trace(inv))
    host_view(d, "scale")[0] = max(b0 + tr * b1, f0) / max(k0 + tr * k1, f1)


def _lerp(e: np.ndarray, u: np.ndarray, w: float) -> None:
    """e = lerp(e, u, w) in place, torch's formula (from the nearer end)."""
    if w < 0.5:
        e += w * (u - e)
    else:
        e[:] = u - (u - e) * (1 - w)


def _learn_t(d: Drift, x: torch.Tensor, starts: bool) -> None:
    """Every stream inside its warm-up (n < W before the sample), by tensor ops: the reference's
    update only (the CUSUM's ceiling is 0 there, so it stays 0); `starts`: some stream's first sample."""
    d.drop_host_state()
    u = detect_input(x, d.proj)
    d.n.add_(1)
    coef = d.table[d.n]  # [S, 6, 1]
    if starts:  # a stream starts its reference: inv from (W r / k I)^-1
        d.inv.lerp_(d.start, coef[:, 2:3])
    d.me.lerp_(u.unsqueeze(1), coef[:, :2])
    _sherman_morrison(d, u, coef[:, 3])
    d.scale.copy_(z_scale(d.inv.diagonal(dim1=-2, dim2=-1).sum(-1), d.terms))


def _watch_t(d: Drift, x: torch.Tensor, fg, cpu: bool) -> np.ndarray:
    """Every stream past its warm-up, by tensor ops: the EMA, z and the CUSUM -> cut [S] on the host."""
    d.drop_host_state()
    u = detect_input(x.unsqueeze(1), d.proj)  # [S, 1, k]
    d.me.lerp_(u, d.table[-1, :2])  # the mean's weight 0, the EMA's a (count_table's last row: n > W)
    d.acc.addcmul_(_quad(d), d.scale).sub_(1 + fg.detect_slack).clamp_min_(0)
    acc = host_view(d, "acc") if cpu else d.acc.cpu().numpy()
    cut = acc > fg.detect_threshold
    if cut.any():
        hit = torch.as_tensor(cut, device=d.acc.device)
        d.acc.masked_fill_(hit, 0)
        d.n.masked_fill_(hit, 0)
    return cut


@dataclass(eq=False)
class Watch:
    """One CPU stream's detector past its warm-up as the host steps it (`watch_one`; derived from the
    `Drift` record, never saved, never copied): z in whitened coordinates, z = |h|^2 with
    h = L^T (e - mean) and L L^T = scale inv (Cholesky; the reference is frozen), so a sample costs
    three float64 dots (|x|^2, x R, y L) and a few in-place numpy ops on k floats where the tensor
    path runs about ten ops. Valid while it is the record's last writer: every other write to the
    record (the tensor steps, a reset, a restored state: `Drift.drop_host_state`) drops it, and a
    record whose tensors were replaced is not the one it holds; the next sample builds it again."""

    tensors: tuple[torch.Tensor | None, ...]  # the record's me, inv, scale, acc, proj
    proj: np.ndarray | None  # [D, k] R, a view of the record's
    white: np.ndarray  # [k, k] L
    centre: np.ndarray  # [k] L^T mean
    ema: np.ndarray  # [k] e: a view of the record's (written in place)
    h: np.ndarray  # [k]
    acc: float  # the record's CUSUM
    staged: torch.Tensor  # [1, 1, D] float64: the sample's view 0
    row: np.ndarray  # [D] a view of `staged`

    @classmethod
    def of(cls, d: Drift, dim: int) -> Watch | None:
        """The watch of stream 0's frozen reference for features of width `dim`; None where scale inv
        is not numerically positive definite (then the tensor path runs)."""
        white, info = torch.linalg.cholesky_ex(d.inv[0] * d.scale[0])
        if int(info) != 0 or not bool(torch.isfinite(white).all()):
            return None
        mean, ema = d.me[0]
        proj = None if d.proj is None else host_view(d, "proj")
        staged = torch.empty(1, 1, dim, dtype=torch.float64)
        tensors = (d.me, d.inv, d.scale, d.acc, d.proj)
        h = ((ema - mean) @ white).numpy()
        centre = (mean @ white).numpy()
        return cls(
            tensors,
            proj,
            white.numpy(),
            centre,
            host_view(d, "me")[0, 1],
            h,
            float(d.acc[0]),
            staged,
            staged.numpy()[0, 0],
        )

    def holds(self, d: Drift) -> bool:
        """Whether the record's tensors are still the ones this watch was built from."""
        t = self.tensors
        return t[0] is d.me and t[1] is d.inv and t[2] is d.scale and t[3] is d.acc and t[4] is d.proj

    def __deepcopy__(self, memo) -> None:
        return None  # a deep copy of the record (a family runner's state dict) builds its own


def watch_one(d: Drift, x: torch.Tensor, fg) -> bool | None:
    """One sample x [1, V, D] (view 0) into a one-stream CPU detector past its warm-up (n > W) ->
    whether it cuts: u = x R / |x|, the EMA e = (1 - a) e + a u (in the record), h = (1 - a) h +
    a (L^T u - L^T mean), z = |h|^2, the CUSUM acc = max(0, acc + z - 1 - slack); at a cut acc and n
    are 0. `drift_step_t`'s values up to float64 rounding (tests/test_host_reads.py). None, the
    record untouched, where scale inv has no Cholesky factor (`Watch.of`): the tensor path runs."""
    w = d.__dict__.get("_watch")
    if w is None or not w.holds(d):
        w = d.__dict__["_watch"] = Watch.of(d, x.shape[-1])
        if w is None:
            return None
    w.staged.copy_(x if x.shape[1] == 1 else x[:, :1])
    a, row = fg.detect_rate, w.row
    norm = max(math.sqrt(np.dot(row, row)), 1e-12)  # as `detect_input`
    y = row if w.proj is None else np.dot(row, w.proj)
    yw = np.dot(y, w.white)
    y *= a / norm
    w.ema *= 1 - a
    w.ema += y
    yw -= norm * w.centre
    yw *= a / norm
    w.h *= 1 - a
    w.h += yw
    w.acc = max(0.0, w.acc + float(np.dot(w.h, w.h)) - (1 + fg.detect_slack))
    cut = w.acc > fg.detect_threshold
    if cut:
        w.acc = 0.0
        host_view(d, "n")[0] = 0
    host_view(d, "acc")[0] = w.acc
    return cut
