"""The Triton kernel of `drift_fused.drift_step_fused` (imported only where it runs: it needs Triton):
`drift.drift_step_t` of one stream per program, its state read once and written once."""

import triton
import triton.language as tl


@triton.jit
def lerp(a, b, w):
    """torch.lerp's formula: from the nearer end."""
    return tl.where(w < 0.5, a + w * (b - a), b - (b - a) * (1.0 - w))


@triton.jit
def unit_row(
    x_ptr,
    x_step,
    proj_ptr,
    proj_stride,
    proj_step,
    const_ptr,
    D,
    K,
    HAS_PROJ: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """u = x R / |x| in float64 (`drift.detect_input`) of the row at x_ptr; R where HAS_PROJ."""
    ks = tl.arange(0, BLOCK_K)
    in_k = ks < K
    if HAS_PROJ:
        num = tl.zeros([BLOCK_K], dtype=tl.float64)
        sq = tl.zeros([BLOCK_D], dtype=tl.float64)
        for d0 in range(0, D, BLOCK_D):
            ds = d0 + tl.arange(0, BLOCK_D)
            xd = tl.load(x_ptr + ds * x_step, mask=ds < D, other=0.0).to(tl.float64)
            sq += xd * xd
            at_r = proj_ptr + ds[:, None] * proj_stride + ks[None, :] * proj_step
            r = tl.load(at_r, mask=(ds[:, None] < D) & in_k[None, :], other=0.0)
            num += tl.sum(xd[:, None] * r, axis=0)
        norm = tl.sqrt(tl.sum(sq, axis=0))
    else:
        num = tl.load(x_ptr + ks * x_step, mask=in_k, other=0.0).to(tl.float64)
        norm = tl.sqrt(tl.sum(num * num, axis=0))
    return num / tl.maximum(norm, tl.load(const_ptr + 2))


@triton.jit
def sherman_morrison(inv, dv, inv_beta, terms_ptr, ks):
    """(inv - c (dv inv)^T (dv inv), z's factor of its trace): `drift._sherman_morrison` (c = 0 where
    1/beta = +inf) and `drift.z_scale`."""
    bd = tl.sum(dv[:, None] * inv, axis=0)
    c = 1.0 / (tl.sum(dv * bd, axis=0) + inv_beta)
    inv = inv - bd[:, None] * (bd * c)[None, :]
    tr = tl.sum(tl.sum(tl.where(ks[:, None] == ks[None, :], inv, 0.0), axis=1), axis=0)
    b00 = tl.load(terms_ptr)
    b01 = tl.load(terms_ptr + 1)
    b10 = tl.load(terms_ptr + 2)
    b11 = tl.load(terms_ptr + 3)
    f0 = tl.load(terms_ptr + 4)
    f1 = tl.load(terms_ptr + 5)
    return inv, tl.maximum(b00 + tr * b10, f0) / tl.maximum(b01 + tr * b11, f1)


@triton.jit
def coefficients(row_ptr):
    """A row of `drift.count_table`: the mean's weight, the EMA's rate, first, 1/beta, the CUSUM's floor and ceiling."""
    return (
        tl.load(row_ptr),
        tl.load(row_ptr + 1),
        tl.load(row_ptr + 2),
        tl.load(row_ptr + 3),
        tl.load(row_ptr + 4),
        tl.load(row_ptr + 5),
    )


@triton.jit
def drift_kernel(
    x_ptr,
    x_stride,
    x_step,
    proj_ptr,
    proj_stride,
    proj_step,
    n_ptr,
    me_ptr,
    inv_ptr,
    acc_ptr,
    scale_ptr,
    start_ptr,
    table_ptr,
    terms_ptr,
    ok_ptr,
    cut_ptr,
    const_ptr,
    D,
    K,
    TOP,
    HAS_PROJ: tl.constexpr,
    HAS_OK: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """`drift.drift_step_t` of stream s, the program's index (grid [S]): its rows read once, written once."""
    s = tl.program_id(0)
    ks = tl.arange(0, BLOCK_K)
    in_k = ks < K
    u = unit_row(
        x_ptr + s * x_stride, x_step, proj_ptr, proj_stride, proj_step, const_ptr, D, K, HAS_PROJ, BLOCK_K, BLOCK_D
    )
    step = 1  # the count and its row of coefficients (`count_table`)
    if HAS_OK:
        step = tl.load(ok_ptr + s).to(tl.int64)
    n = tl.minimum(tl.load(n_ptr + s) + step, TOP)
    w_mean, rate, first, inv_beta, low, top = coefficients(table_ptr + (n * step) * 6)
    # inv from the reset's start at n = 1; Welford's mean and the EMA
    at = ks[:, None] * K + ks[None, :]
    in_kk = in_k[:, None] & in_k[None, :]
    inv = tl.load(inv_ptr + s * K * K + at, mask=in_kk, other=0.0)
    inv = lerp(inv, tl.load(start_ptr + at, mask=in_kk, other=0.0), first)
    mean = lerp(tl.load(me_ptr + s * 2 * K + ks, mask=in_k, other=0.0), u, w_mean)
    ema = lerp(tl.load(me_ptr + s * 2 * K + K + ks, mask=in_k, other=0.0), u, rate)
    g = ema - mean  # z's quadratic form with inv before this sample's update (`_quad`)
    quad = tl.sum(g * tl.sum(g[:, None] * inv, axis=0), axis=0)
    inv, scale = sherman_morrison(inv, u - mean, inv_beta, terms_ptr, ks)
    acc = tl.load(acc_ptr + s)
    new = tl.minimum(tl.maximum(acc + quad * scale - tl.load(const_ptr), low), top)
    if HAS_OK:
        new = tl.where(step > 0, new, acc)
    cut = new > tl.load(const_ptr + 1)
    tl.store(inv_ptr + s * K * K + at, inv, mask=in_kk)
    tl.store(me_ptr + s * 2 * K + ks, mean, mask=in_k)
    tl.store(me_ptr + s * 2 * K + K + ks, ema, mask=in_k)
    tl.store(scale_ptr + s, scale)
    tl.store(acc_ptr + s, tl.where(cut, 0.0, new))
    tl.store(n_ptr + s, tl.where(cut, 0, n))
    tl.store(cut_ptr + s, cut)
