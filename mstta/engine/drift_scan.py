"""The scene-cut detector's cuts over a stored stream at once (for `forget.stream_cuts`, the replay's
resets): the statistic of `drift.py` batched, the CUSUM as a scan, a segment stepped by the engine's
own step (`exact_cut`) where the scan comes near the threshold (docs/engine.md, "Replay")."""

from __future__ import annotations

import functools

import torch

from .drift import Drift, detect_projection, drift_step_host, drift_step_t, z_scale, z_terms

# The replay's scan (`segment_cut`) computes the statistic batched, the engine one sample at a time
# (Sherman-Morrison): the same float64 math in another order. Where the scan's CUSUM comes within
# GUARD * (threshold + the CUSUM's summed terms) of the threshold, the segment is stepped by
# the engine's own step (`exact_cut`; the measured gaps: benchmarks/detector_scan.py).
GUARD = 1e-9
SCAN_ROWS = 4096  # the scan's largest window (rows per batched step: bounded memory on any stream)
DETECT_ROWS = 4096  # rows of the features read into float64 at a time (`detect_rows`: 16 MB at d = 512)
# The scan's first window after the warm-up (`cusum_windows`), doubling up to SCAN_ROWS. On a CPU 64:
# a cut soon after the warm-up wastes few rows. On a GPU every window is SCAN_ROWS: an op costs its
# launch whatever its rows, so the fewer windows the better (docs/engine.md, "Replay").
FIRST_ROWS = 64
EMA_BLOCK = 32  # the EMA's blocks inside a window (a [32, 32] Toeplitz matrix, then the blocks' ends)


def ema_rows(prev: torch.Tensor, u: torch.Tensor, a: float) -> torch.Tensor:
    """e_t = (1 - a) e_{t-1} + a u_t for rows u [m, k] (m <= SCAN_ROWS) from e_{-1} = prev [k] -> [m, k]
    (float64), at once: blocks of EMA_BLOCK rows by a Toeplitz matrix, then each block's start from the
    ends before (`_ema_terms`)."""
    m, k = u.shape
    local_t, head, hops, hop_in, _ = _ema_terms(a, u.device)
    nb = -(-m // EMA_BLOCK)
    x = u if m == nb * EMA_BLOCK else torch.nn.functional.pad(u, (0, 0, 0, nb * EMA_BLOCK - m))
    local = local_t @ x.view(nb, EMA_BLOCK, k)  # each block from zero
    ends = torch.addmm(hop_in[:nb] * prev, hops[:nb, :nb], local[:, -1])  # each block's end
    before = torch.cat((prev.unsqueeze(0), ends[:-1])).unsqueeze(1)  # each block's start
    return local.addcmul_(head, before).view(nb * EMA_BLOCK, k)[:m]


@functools.lru_cache(maxsize=16)
def _ema_terms(a: float, device: torch.device) -> tuple[torch.Tensor, ...]:
    """The EMA's constants for rate a (float64, built once per rate and device; never written): a block's
    Toeplitz a (1 - a)^(i - j) [b, b] (b = EMA_BLOCK), (1 - a)^(i + 1) [b, 1], over the blocks the
    Toeplitz of hop = (1 - a)^b, hop^(i - j) [B, B], and hop^(i + 1) [B, 1] (B = SCAN_ROWS / b); and
    a (1 - a)^(SCAN_ROWS - 1 - t) [SCAN_ROWS], the weights of the rows in the EMA after them."""
    lam, b = 1 - a, EMA_BLOCK
    i = torch.arange(b, device=device, dtype=torch.float64)
    j = torch.arange(-(-SCAN_ROWS // b), device=device, dtype=torch.float64)
    hop = lam**b
    local_t = a * torch.tril(lam ** (i[:, None] - i).clamp_min(0))
    hops = torch.tril(hop ** (j[:, None] - j).clamp_min(0))
    weights = a * lam ** torch.arange(SCAN_ROWS - 1, -1, -1, device=device, dtype=torch.float64)
    return local_t, lam ** (i + 1)[:, None], hops, hop ** (j + 1)[:, None], weights


def _reference(u: torch.Tensor, fg) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The reference of the first W detector rows of u [n, k] -> (mean [k], inv [k, k], the EMA after
    its W rows: (1 - a)^m e + sum_t a (1 - a)^(m-1-t) u_t over each m rows), in windows of SCAN_ROWS (sums
    shifted by the first row)."""
    w_ref, first, a = fg.detect_warmup, u[0], fg.detect_rate
    s1, s2, ema = torch.zeros_like(first), first.new_zeros(len(first), len(first)), first
    weights = _ema_terms(a, u.device)[-1]
    for p in range(0, w_ref, SCAN_ROWS):
        rows = u[p : min(p + SCAN_ROWS, w_ref)]
        c = rows - first
        s1, s2 = s1 + c.sum(0), torch.addmm(s2, c.T, c)
        ema = torch.addmv(ema * (1 - a) ** len(rows), rows.T, weights[len(weights) - len(rows) :])
    m = torch.addr(s2, s1, s1, alpha=-1 / w_ref)  # W C
    m.diagonal().add_(w_ref * fg.detect_ridge / len(first))
    return first + s1 / w_ref, torch.linalg.inv_ex(m)[0], ema  # positive definite (ridge > 0): no check to wait on


def exact_cut(x: torch.Tensor, fg) -> int | None:
    """The first cut of a segment x [n, D] whose detector starts empty, sample after sample by the
    engine's own step on that device (a CPU's `drift_step_host`, else `drift_step_t`; a fresh `Drift`
    equals one after a reset) -> its row, None if none."""
    d = Drift.empty(1, x.shape[-1], x.device, fg)
    step = drift_step_host if x.device.type == "cpu" else drift_step_t
    for t in range(len(x)):
        if bool(step(d, x[t : t + 1], fg)[0]):
            return t
    return None


def cusum_windows(u: torch.Tensor, fg):
    """The CUSUM of a segment of detector rows u [n, k] (`detect_input`; the detector starts empty at
    row 0, and n > W) as if it never cut, window after window after the warm-up (`first_rows`, doubling
    up to SCAN_ROWS), each at once: the EMA (`ema_rows`), z, and the CUSUM as a scan, S_t = C_t -
    min(0, min_{j<=t} C_j), C the running sum from the window's start value -> (its first row, S [m],
    the summed |terms| [m])."""
    mean, inv, ema = _reference(u, fg)
    inv = inv * z_scale(inv.diagonal().sum(), z_terms(fg, inv.shape[-1], u.device))  # z = g^T inv g
    acc, size, c = torch.zeros((), dtype=torch.float64, device=u.device), 0.0, 1 + fg.detect_slack
    p, rows = fg.detect_warmup, first_rows(u.device)
    while p < len(u):
        e = ema_rows(ema, u[p : p + rows], fg.detect_rate)
        ema, g = e[-1], e - mean
        z = (g @ inv).mul_(g).sum(-1)
        run = torch.cumsum(z - c, 0).add_(acc)
        s = run - torch.cummin(run, 0).values.clamp_max_(0)
        sizes = torch.cumsum(z + c, 0).add_(size)
        yield p, s, sizes
        acc, size, p, rows = s[-1], sizes[-1], p + len(s), min(2 * rows, SCAN_ROWS)


def first_rows(device: torch.device) -> int:
    """The scan's first window on `device`: FIRST_ROWS on a CPU, SCAN_ROWS on any other."""
    return FIRST_ROWS if device.type == "cpu" else SCAN_ROWS


def segment_cut(x: torch.Tensor, u: torch.Tensor, fg, guard: float = GUARD) -> tuple[int | None, bool]:
    """The first cut the engine's detector makes on a segment x [n, D] (view 0's features; u [n, k]
    their `detect_input` rows) that it starts empty, by `cusum_windows`; where the scan's S comes within
    guard * (threshold + the summed terms) of the threshold at or before its first cut, the segment
    is stepped by `exact_cut` -> (the cut's row or None, whether it was stepped). A window whose S
    stays below threshold - guard * (threshold + its last summed terms) (the terms only grow) has
    neither, by one comparison."""
    thr = fg.detect_threshold
    if len(x) <= fg.detect_warmup:
        return None, False
    for p, s, sizes in cusum_windows(u, fg):
        if bool(s.max() + guard * sizes[-1] < thr - guard * thr):
            continue
        hit = s > thr
        last = int(hit.int().argmax()) if bool(hit.any()) else len(s) - 1
        if bool(((s[: last + 1] - thr).abs() <= guard * (thr + sizes[: last + 1])).any()):
            return exact_cut(x, fg), True
        if bool(hit[last]):
            return p + last, False
    return None, False


def detect_rows(x: torch.Tensor) -> torch.Tensor:
    """`detect_input` of a whole stream's view-0 features x [N, D] -> [N, k] float64, DETECT_ROWS rows
    at a time, each block read into one reused float64 buffer (exact: what `detect_input` casts to)."""
    proj = detect_projection(x.shape[-1], x.device)
    proj_t = None if proj is None else proj.T.contiguous()
    u = torch.empty(len(x), x.shape[-1] if proj is None else proj.shape[-1], dtype=torch.float64, device=x.device)
    buf = torch.empty(min(DETECT_ROWS, len(x)), x.shape[-1], dtype=torch.float64, device=x.device)
    for p in range(0, len(x), DETECT_ROWS):
        block = buf[: min(DETECT_ROWS, len(x) - p)].copy_(x[p : p + DETECT_ROWS])
        block_rows(block, proj_t, u[p : p + len(block)])
    return u


def block_rows(block: torch.Tensor, proj_t: torch.Tensor | None, out: torch.Tensor) -> torch.Tensor:
    """`detect_input` of a float64 block [m, D] into out [m, k], from R^T (`proj_t`, None: no map): the
    product taken as R^T x^T, the same sums in another order (a third faster on this project's CPU)."""
    rows = block if proj_t is None else torch.mm(proj_t, block.T).T
    return torch.div(rows, block.norm(dim=-1, keepdim=True).clamp_min_(1e-12), out=out)
