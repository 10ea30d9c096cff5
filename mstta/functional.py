"""The paper's math as pure functions: no state, no I/O. Shapes in each docstring; float32 math.

Equation numbers refer to the MS-TTA paper (§3.1 baseline, §4.1 mean shift, Algorithm 1) and to
TDA/BoostAdapter for the peers' caches.
"""
from __future__ import annotations

import math

import numpy as np
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


def normalized_entropy(h: torch.Tensor | float, num_classes: int) -> torch.Tensor | float:
    """TDA's negative-cache gate: entropy in nats divided by log2(C) (as TDA's code does)."""
    return h / math.log2(num_classes)


def num_selected(num_views: int, ratio: float) -> int:
    """Views kept by confidence selection: floor(ratio * V) (TDA/BoostAdapter; 6 of 64)."""
    return int(ratio * num_views)


def aggregate_views(feats: torch.Tensor, logits: torch.Tensor, ratio: float):
    """TDA's confident-view aggregation: keep the floor(ratio*V) (at least 1) lowest-entropy views.

    [V, d], [V, C] -> (f [d] mean feature, not re-normalised; logits [C] mean logits;
    h entropy of the mean probabilities; probs [C] mean probabilities).
    """
    n = max(1, num_selected(feats.shape[0], ratio))
    keep = torch.argsort(entropy(logits), stable=True)[:n]
    probs = torch.softmax(logits[keep], dim=-1).mean(0)
    h = -(probs * torch.log(probs.clamp_min(1e-30))).sum()
    return feats[keep].mean(0), logits[keep].mean(0), h, probs


def knn_indices(sims: torch.Tensor, k: int, order: torch.Tensor | None = None) -> torch.Tensor:
    """Indices of the min(k, M) most similar columns per row, Eq. (9); ties: earlier first.

    sims [N, M] (-inf marks a column a row may not use), order [M] (smaller = earlier; default
    the column index) -> [N, min(k, M)] (columns of -inf may appear where a row has fewer valid).
    """
    n_rows, m_cols = sims.shape
    m = min(k, m_cols)
    if m == m_cols:
        return torch.arange(m_cols, device=sims.device).expand(n_rows, m_cols)
    vals, idx = sims.topk(m + 1, dim=-1)
    idx = idx[:, :m]
    if n_rows == 1:  # the online case: one host round trip instead of three small ops
        v = vals[0, m - 1:].tolist()
        tied = [0] if v[0] == v[1] and math.isfinite(v[1]) else []
    else:
        tied = ((vals[:, m - 1] == vals[:, m]) & torch.isfinite(vals[:, m])).nonzero().flatten().tolist()
    if tied:  # rare: resolve a tie at the k-th place by age (earlier sample first)
        idx = idx.clone()
        age = np.arange(m_cols) if order is None else order.cpu().numpy()
        for r in tied:
            row = sims[r].cpu().numpy()
            best = np.lexsort((age, -row))[:m]
            idx[r] = torch.as_tensor(best, device=sims.device)
    return idx


def mean_shift(f: torch.Tensor, neighbour_sum: torch.Tensor, m: torch.Tensor | int, alpha: float) -> torch.Tensor:
    """Single-step kNN mean shift, Eq. (10)-(11): normalise((1-a) f + a/m sum_nn f_j).

    [N, d], [N, d], m [N] or int (neighbour count, >= 1) -> [N, d] unit-norm.
    """
    if isinstance(m, torch.Tensor):
        m = m.to(f.dtype).unsqueeze(-1)
    return normalize((1.0 - alpha) * f + (alpha / m) * neighbour_sum)


def cache_affinity(q: torch.Tensor, keys: torch.Tensor, kernel: str, beta: float) -> torch.Tensor:
    """Query-key affinity: exp(-beta (1 - q K^T)) (TDA, kernel 'exp') or q K^T ('linear', §3.1).

    [..., d], [E, d] -> [..., E].
    """
    sims = q @ keys.T
    if kernel == "exp":
        return torch.exp(-beta * (1.0 - sims))
    return sims


def negative_mask(probs: torch.Tensor, lower: float, upper: float) -> torch.Tensor:
    """TDA's negative-cache value: 1 where lower < p < upper, else 0. [..., C] -> [..., C] float."""
    return ((probs > lower) & (probs < upper)).to(probs.dtype)


def insertion_slot(entropies: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Cache rule (§3.1, Alg. 1): the slot of the highest-entropy entry (an empty slot has +inf,
    the first one wins) and whether the new entry goes in (h strictly lower). [Q], [] -> ([], [])."""
    j = entropies.argmax()
    return j, h < entropies[j]
