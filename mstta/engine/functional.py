"""The paper's math as pure functions: no state, no I/O, no host synchronisation. Float32 math.

Equation numbers refer to the MS-TTA paper (§3.1 baseline, §4.1 mean shift, Algorithm 1) and to
TDA/BoostAdapter for the peers' caches. The online engine and the replay both compose these,
so the semantics are written once.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F


def normalize(x: torch.Tensor) -> torch.Tensor:
    """L2-normalise the last dimension. [..., d] -> [..., d]."""
    return F.normalize(x, dim=-1)


def clip_logits(f: torch.Tensor, text: torch.Tensor, logit_scale: float) -> torch.Tensor:
    """Zero-shot CLIP logits, Eq. (1): logit_scale * f W^T. [..., d], [C, d] -> [..., C]."""
    return logit_scale * (f @ text.T)


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Softmax entropy in nats (the cache's confidence criterion, §3.1). [..., C] -> [...]."""
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def num_selected(num_views: int, ratio: float) -> int:
    """Views kept by confidence selection: floor(ratio * V) (TDA/BoostAdapter; 6 of 64)."""
    return int(ratio * num_views)


def confident_indices(h: torch.Tensor, ratio: float) -> torch.Tensor:
    """The floor(ratio V) (at least 1) lowest-entropy views of each sample, ties to the lower view
    index (TDA's, BoostAdapter's and TPT's `select_confident_samples`; the peers' empty selection
    for V < 10 would average no view). h [..., V] -> indices [..., n]."""
    return torch.argsort(h, dim=-1, stable=True)[..., : max(1, num_selected(h.shape[-1], ratio))]


def aggregate_views(feats: torch.Tensor, logits: torch.Tensor, ratio: float):
    """TDA's confident-view aggregation (TDA utils.py `get_clip_logits`): keep the floor(ratio*V)
    (at least 1) lowest-entropy views. [N, V, d], [N, V, C] -> (f [N, d] mean feature, not
    re-normalised; logits [N, C] mean logits; H [N] entropy of the mean probabilities; probs [N, C])."""
    keep = confident_indices(entropy(logits), ratio)
    kept_logits = logits.gather(-2, keep.unsqueeze(-1).expand(*keep.shape, logits.shape[-1]))
    kept_feats = feats.gather(-2, keep.unsqueeze(-1).expand(*keep.shape, feats.shape[-1]))
    probs = torch.softmax(kept_logits, dim=-1).mean(-2)
    h = -(probs * torch.log(probs.clamp_min(1e-30))).sum(-1)
    return kept_feats.mean(-2), kept_logits.mean(-2), h, probs


def form_queries(
    x: torch.Tensor,
    text: torch.Tensor,
    logit_scale: float,
    view_mode: str,
    view_ratio: float,
    aggregate: Callable[[torch.Tensor, torch.Tensor, float], tuple[torch.Tensor, torch.Tensor]] | None = None,
):
    """Query formation (Alg. 1 line 1, Eq. 1): CLIP logits, entropy H and pseudo-label source of
    each sample. Views [N, V, d] (view 0 = the original image) -> (f [N, d], clip [N, C], H [N],
    probs [N, C]): one view or `view_mode` "original" predict from view 0 (BoostAdapter's
    `infer_ori_image`); "confident" averages the most confident views (`aggregate_views`); a
    family's name (`zero`, `mta`) combines the views as that family does: the caller passes that
    family's `aggregate(x, text, logit_scale) -> (f, clip)` (`families.view_aggregator`), a
    combination no paper reports, for the cache methods to read."""
    x = normalize(x.float())
    if x.shape[-2] > 1 and view_mode not in ("confident", "original"):
        if aggregate is None:
            raise ValueError(f"view_mode {view_mode!r} needs its family's aggregate")
        f, clip = aggregate(x, text, logit_scale)
        logp = torch.log_softmax(clip, dim=-1)
        probs = logp.exp()
        return f, clip, -(probs * logp).sum(-1), probs
    if x.shape[-2] == 1 or view_mode == "original":
        f = x[..., 0, :]
        clip = clip_logits(f, text, logit_scale)
        logp = torch.log_softmax(clip, dim=-1)
        probs = logp.exp()
        return f, clip, -(probs * logp).sum(-1), probs  # = entropy(clip), softmax(clip)
    return aggregate_views(x, clip_logits(x, text, logit_scale), view_ratio)


def ordered_bits(x: torch.Tensor) -> torch.Tensor:
    """float32 -> int64 with the same order (IEEE sign-magnitude bits made two's complement);
    -0.0 counts as +0.0, as float comparison does."""
    bits = (x.float() + 0.0).view(torch.int32)
    return (bits ^ ((bits >> 31) & 0x7FFFFFFF)).to(torch.int64)  # negatives: flip all but the sign


def knn_indices(sims: torch.Tensor, k: int, age: torch.Tensor | None = None) -> torch.Tensor:
    """Indices of the min(k, M) most similar columns per row, Eq. (9); ties: the older column first.

    One top-k over the key (similarity, -age) taken lexicographically (similarity bits in the high
    32 bits), so ties at the k-th place are resolved on the device with no host round trip.
    sims [N, M] (-inf marks a column a row may not use), age [M] (smaller = older; default the
    column index; non-negative, < 2^32) -> [N, min(k, M)] (-inf columns appear only where a row
    has fewer usable columns).
    """
    m = min(k, sims.shape[-1])
    if age is None:
        age = torch.arange(sims.shape[-1], device=sims.device)
    key = (ordered_bits(sims) << 32) - age.to(torch.int64)
    return key.topk(m, dim=-1).indices


def knn_indices_host_ties(sims: torch.Tensor, k: int) -> torch.Tensor:
    """`knn_indices(sims, k)` (ties: the lower column first) for large batches, in fewer passes: a
    float top-k of k+1, and the exact (similarity, older) key only for the rows whose k-th value
    equals the (k+1)-th (a tie across the boundary; none can hide behind a strictly smaller one).
    Reads one bool on the host (the replay's batches; never the online step).
    sims [N, M] -> [N, min(k, M)], the same neighbour sets."""
    m = min(k, sims.shape[-1])
    if m == sims.shape[-1]:
        return sims.topk(m, dim=-1).indices  # every column is a neighbour: no boundary to tie at
    vals, idx = sims.topk(m + 1, dim=-1)
    idx = idx[:, :m]
    tied = vals[:, m - 1] == vals[:, m]
    if bool(tied.any()):
        rows = tied.nonzero().squeeze(-1)
        idx[rows] = knn_indices(sims[rows], k)
    return idx


def mean_shift(f: torch.Tensor, neighbour_sum: torch.Tensor, m: torch.Tensor | int, alpha: float) -> torch.Tensor:
    """Single-step kNN mean shift, Eq. (10)-(11): normalise((1-a) f + a/m sum_nn f_j).

    [N, d], [N, d], m [N] or int (neighbour count, >= 1) -> [N, d] unit-norm.
    """
    if isinstance(m, torch.Tensor):
        m = m.to(f.dtype).unsqueeze(-1)
    return normalize((1.0 - alpha) * f + (alpha / m) * neighbour_sum)


def similarities(q: torch.Tensor, bank: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Cosine numerators q . b against unit bank rows, Eq. (9), in float32, plus an additive `bias`
    (0 = usable, -inf = not) fused into the product where the backend can.

    A float16/bfloat16 bank (`bank_dtype`) is read as stored, the query rounded to it and the
    products accumulated in float32 (CUDA: one GEMM with a float32 output; elsewhere the bank is
    widened). q [..., n, d] float32, bank [..., M, d], bias broadcastable to [..., n, M] -> [..., n, M].
    """
    if bank.dtype != torch.float32:
        q = q.to(bank.dtype)
        if not bank.is_cuda:
            q, bank = q.float(), bank.float()
    if q.dim() == 2:
        if bank.dtype == torch.float32:
            return q @ bank.T if bias is None else torch.addmm(bias, q, bank.T)
        out = torch.mm(q, bank.T, out_dtype=torch.float32)
    elif bank.dtype == torch.float32:
        return torch.bmm(q, bank.mT) if bias is None else torch.baddbmm(bias, q, bank.mT)
    else:
        out = torch.bmm(q, bank.mT, out_dtype=torch.float32)
    return out if bias is None else out + bias


def mean_shift_step(
    q: torch.Tensor,
    bank: torch.Tensor,
    norm: torch.Tensor,
    age: torch.Tensor | None,
    k: int,
    alpha: float,
    bias: torch.Tensor | None = None,
    host_ties: bool = False,
) -> torch.Tensor:
    """One mean-shift step, Eq. (9)-(11): each query moves toward its k nearest bank features by
    cosine (ties: the older first); a row with no usable bank feature stays as it is.

    The bank holds each raw feature f as its direction f/|f| (`bank`, any float dtype) and its
    norm |f| (`norm`, float32), so the similarity is one product and the neighbour sum rebuilds
    the raw features. q [..., n, d], bank [..., M, d], norm [..., M], age broadcastable to
    [..., n, M] (None: the column index), bias broadcastable to [..., n, M] (-inf = a column the
    row may not use; None: all usable and M >= 1) -> [..., n, d]. `host_ties`: see `shift_by_sims`.
    """
    return shift_by_sims(q, similarities(q, bank, bias), bank, norm, age, k, alpha, bias is not None, host_ties)


def shift_by_sims(
    q: torch.Tensor,
    sims: torch.Tensor,
    bank: torch.Tensor,
    norm: torch.Tensor,
    age: torch.Tensor | None,
    k: int,
    alpha: float,
    masked: bool = True,
    host_ties: bool = False,
) -> torch.Tensor:
    """`mean_shift_step` given its similarities `sims` [..., n, M] (-inf = a column the row may not
    use; `masked=False` promises none and M >= 1). `host_ties` (2-D, age None): the top-k of
    `knn_indices_host_ties`, for the replay's large batches, which mask their sims in place."""
    idx = knn_indices_host_ties(sims, k) if host_ties else knn_indices(sims, k, age)
    batched = bank.dim() == 3
    rows = _gather_rows(bank, idx, batched).to(q.dtype) * _gather_rows(norm.unsqueeze(-1), idx, batched)
    if not masked:  # every column usable: m = min(k, M) neighbours for every row
        return mean_shift(q, rows.sum(-2), idx.shape[-1], alpha)
    use = torch.isfinite(sims.gather(-1, idx))
    count = use.sum(-1)
    shifted = mean_shift(q, (rows * use.unsqueeze(-1)).sum(-2), count.clamp_min(1), alpha)
    return torch.where((count > 0).unsqueeze(-1), shifted, q)


def _gather_rows(table: torch.Tensor, idx: torch.Tensor, batched: bool) -> torch.Tensor:
    """table [M, e] with idx [n, m], or table [S, M, e] with idx [S, n, m] (each stream its own
    table) -> [(S,) n, m, e]."""
    if not batched:
        return table[idx]
    S, M = table.shape[:2]
    if S == 1:
        return table[0][idx]
    offset = torch.arange(S, device=idx.device).view(S, *([1] * (idx.dim() - 1))) * M
    return table.reshape(S * M, -1)[idx + offset]


def log_weight(a: float, beta: float) -> float:
    """Bias of a filled slot in the fused exp kernel: ln(a) - beta (-inf when a = 0)."""
    return math.log(a) - beta if a > 0 else float("-inf")


def cache_weights(
    q: torch.Tensor, keys: torch.Tensor, bias: torch.Tensor, beta: float, kernel: str, a: float
) -> torch.Tensor:
    """Per-entry cache weight of the cache logits, Eq. (3) and (13) (`z Z^T Y`): kernel "exp"
    (default): TDA's affinity a * exp(-beta (1 - q k)) (TDA tda_runner.py `compute_cache_logits`:
    `((-1) * (beta - beta * affinity)).exp()`, times `alpha`) = exp(beta q k + ln a - beta), fused
    as one addmm + exp with `bias` = ln a - beta on live entries and -inf elsewhere; kernel
    "linear": a * q k, the paper's literal formula (with a = 1), on live entries (finite bias).

    q [N, d], keys [E, d], bias [E] or [N, E] -> [N, E]; or per stream: q [S, d], keys [S, E, d],
    bias [S, E] -> [S, E].
    """
    if keys.dim() == 3:
        qk = q.unsqueeze(1)
        if kernel == "exp":
            return torch.exp(torch.baddbmm(bias.unsqueeze(1), qk, keys.mT, alpha=beta)).squeeze(1)
        return torch.where(torch.isfinite(bias), a * torch.bmm(qk, keys.mT).squeeze(1), 0.0)
    if kernel == "exp":
        return torch.exp(torch.addmm(bias, q, keys.T, alpha=beta))
    return torch.where(torch.isfinite(bias), a * (q @ keys.T), 0.0)


def final_logits(clip: torch.Tensor, positive: torch.Tensor, negative: torch.Tensor | None, lam: float) -> torch.Tensor:
    """Eq. (14): CLIP logits + lambda * (positive - negative cache logits); lambda weighs the whole
    cache term, so lambda = 0 gives the CLIP logits of the method's own prediction path."""
    cache = positive if negative is None else positive - negative
    return clip + lam * cache


def negative_mask(probs: torch.Tensor, lower: float, upper: float) -> torch.Tensor:
    """TDA's negative-cache value: 1 where lower < p < upper, else 0. [..., C] -> [..., C] float."""
    return ((probs > lower) & (probs < upper)).to(probs.dtype)
