"""The Triton kernels of `fused` (imported only where they run: they need Triton), each one step of a
stream per program, its state read once and written once: the scene-cut detector's
(`drift.drift_step_t`) and the timeliness rule's slot choice (`forget.timeliness_slot_t`)."""

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


@triton.jit
def timeliness_kernel(
    ent_ptr,
    time_ptr,
    label_ptr,
    h_ptr,
    clock_ptr,
    const_ptr,
    slot_ptr,
    fits_ptr,
    C,
    Q,
    EMPTY: tl.constexpr,
    BLOCK_Q: tl.constexpr,
):
    """`forget.timeliness_slot_t` on stream s's class row p = label[s] of a cache's [S, C, Q] entropies
    and times: the score lt sigmoid((clock - time) / N) + H in float64, of the top scores the latest
    slot, inserted where the newcomer's lt/2 + h is lower; constants [1/N, lt, lt/2]."""
    s = tl.program_id(0)
    qs = tl.arange(0, BLOCK_Q)
    live = qs < Q
    row = (s * C + tl.load(label_ptr + s)) * Q
    ent = tl.load(ent_ptr + row + qs, mask=live, other=0.0)
    when = tl.load(time_ptr + row + qs, mask=live, other=EMPTY - 1)
    age = (tl.load(clock_ptr + s) - when).to(tl.float64) * tl.load(const_ptr)
    score = tl.sigmoid(age) * tl.load(const_ptr + 1) + ent.to(tl.float64)
    score = tl.where(live, score, -float("inf"))
    top = score == tl.max(score, axis=0)
    j = tl.argmax(tl.where(top, when, EMPTY - 1), axis=0)
    best = tl.sum(tl.where(qs == j, score, 0.0), axis=0)
    tl.store(slot_ptr + s, j.to(tl.int64))
    tl.store(fits_ptr + s, tl.load(const_ptr + 2) + tl.load(h_ptr + s).to(tl.float64) < best)


@triton.jit
def vacate_kernel(
    cut_ptr,
    time_ptr,
    bias_ptr,
    ent_ptr,
    start_ptr,
    clock_ptr,
    N,
    stride,
    HAS_ENT: tl.constexpr,
    HAS_START: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Empty the first N slots (rows) of stream s = program 0 where cut[s], block program 1: time -1,
    bias -inf, entropy +inf (a cache: `Cache.forget`); a bank's start[s] = clock[s] (`Bank.forget`)."""
    s = tl.program_id(0)
    b = tl.program_id(1)
    cut = tl.load(cut_ptr + s)
    i = b * BLOCK + tl.arange(0, BLOCK)
    m = (i < N) & cut
    tl.store(time_ptr + s * stride + i, tl.full([BLOCK], -1, tl.int64), mask=m)
    tl.store(bias_ptr + s * stride + i, tl.full([BLOCK], float("-inf"), tl.float32), mask=m)
    if HAS_ENT:
        tl.store(ent_ptr + s * stride + i, tl.full([BLOCK], float("inf"), tl.float32), mask=m)
    if HAS_START:
        tl.store(start_ptr + s, tl.load(clock_ptr + s), mask=cut & (b == 0))


@triton.jit
def expire_kernel(
    used_ptr, time_ptr, ent_ptr, bias_ptr, clock_ptr, ok_ptr, idle, N, HAS_OK: tl.constexpr, BLOCK: tl.constexpr
):
    """`Cache.expire` of stream s = program 0, block program 1: each live slot whose last use (the
    later of its mark and its insertion) is at most clock[s] - idle emptied (only where ok[s])."""
    s = tl.program_id(0)
    i = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = i < N
    at = s * N + i
    last = tl.maximum(tl.load(used_ptr + at, mask=m, other=0), tl.load(time_ptr + at, mask=m, other=0))
    gone = m & (last <= tl.load(clock_ptr + s) - idle)
    if HAS_OK:
        gone = gone & tl.load(ok_ptr + s)
    tl.store(time_ptr + at, tl.full([BLOCK], -1, tl.int64), mask=gone)
    tl.store(bias_ptr + at, tl.full([BLOCK], float("-inf"), tl.float32), mask=gone)
    tl.store(ent_ptr + at, tl.full([BLOCK], float("inf"), tl.float32), mask=gone)


@triton.jit
def mark_kernel(w_ptr, bias_ptr, used_ptr, clock_ptr, ok_ptr, N, HAS_OK: tl.constexpr, BLOCK: tl.constexpr):
    """`Cache._mark_used` of stream s = the program: the live slot (finite bias) of largest weight
    w[s] (of equal ones the first; slot 0 where none is live) marked used at clock[s] (where ok[s])."""
    s = tl.program_id(0)
    best = tl.full([], -float("inf"), tl.float32)
    at = tl.full([], 0, tl.int32)
    for b0 in range(0, N, BLOCK):
        i = b0 + tl.arange(0, BLOCK)
        m = i < N
        live = tl.load(bias_ptr + s * N + i, mask=m, other=-float("inf")) > -float("inf")
        v = tl.where(live, tl.load(w_ptr + s * N + i, mask=m, other=0.0), -float("inf"))
        top = tl.max(v, axis=0)
        j = b0 + tl.argmax(v, axis=0)
        at = tl.where(top > best, j, at)
        best = tl.maximum(top, best)
    if HAS_OK:
        tl.store(used_ptr + s * N + at, tl.load(clock_ptr + s), mask=tl.load(ok_ptr + s))
    else:
        tl.store(used_ptr + s * N + at, tl.load(clock_ptr + s))
