"""BoostAdapter's throw-away boosted cache, per sample: built on the host from the positive cache's
slots of the classes the boosting views touch (BoostAdapter runner.py `cur_pos_cache =
copy.deepcopy(pos_cache)`), one stream at a time. The one part of the step that does not batch
over streams nor avoid the host (the copies are per sample and per class)."""

from __future__ import annotations

import numpy as np
import torch

from . import functional as Fn
from .cache import Cache
from .cache_rules import EMPTY_TIME, entropy_slot


def select_views(x: torch.Tensor, text: torch.Tensor, logit_scale: float, ratio: float):
    """BoostAdapter's regional bootstrapping (runner.py `select_confident_samples(ori_feat,
    ori_output, 0.1)`): per stream the floor(ratio*V) lowest-entropy views (original included),
    each with its own pseudo-label and entropy. x [S, V, d] -> (views [S, n, d], labels [S][n],
    entropies [S][n]) on the host, or None when there are none."""
    n = Fn.num_selected(x.shape[1], ratio)
    if x.shape[1] < 2 or n == 0:
        return None
    x = Fn.normalize(x.float())
    view_logits = Fn.clip_logits(x, text, logit_scale)
    ent = Fn.entropy(view_logits)
    sel = torch.argsort(ent, dim=-1, stable=True)[:, :n]
    views = x.gather(1, sel.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
    labels = view_logits.gather(1, sel.unsqueeze(-1).expand(-1, -1, view_logits.shape[-1])).argmax(-1)
    return views, labels.tolist(), ent.gather(1, sel).tolist()


def boosted_logits(
    q: torch.Tensor,
    pos: torch.Tensor,
    cache: Cache,
    keys: torch.Tensor,
    labels,
    ents,
    streams,
    delta: int,
    beta: float,
    kernel: str,
    a: float,
) -> torch.Tensor:
    """Positive logits [S, C] where each stream in `streams` reads a throw-away copy of its cache
    with capacity Q + delta holding its boosting views too (`update_cache(..., shot_capacity +
    delta)`); only the classes the views touch change."""
    pos = pos.clone()
    for s in streams:
        for c in sorted(set(labels[s])):
            pos[s, c] = _class_logit(q[s : s + 1], cache, s, c, keys[s], labels[s], ents[s], delta, beta, kernel, a)
    return pos


def _class_logit(q, cache: Cache, s: int, c: int, keys, labels, ents, delta, beta, kernel, a):
    """One class of one stream's boosted copy: its Q slots plus delta empty ones receive the views
    labelled c, in view order, by the lowest-entropy rule; the logit sums the live slots."""
    Q = cache.ent.shape[2]
    row_ent = np.concatenate([cache.ent[s, c].cpu().numpy().astype(np.float64), np.full(delta, np.inf)])
    row_time = np.concatenate([cache.time[s, c].cpu().numpy(), np.full(delta, EMPTY_TIME)])
    row_keys: list[torch.Tensor | None] = [cache.keys[s, c * Q + j] for j in range(Q)] + [None] * delta
    for i, (key, lab, h) in enumerate(zip(keys, labels, ents)):
        if lab != c:
            continue
        j = entropy_slot(row_ent, row_time, h)
        if j >= 0:  # the views come after every cached entry, in view order (appended)
            row_ent[j], row_time[j], row_keys[j] = h, np.iinfo(np.int64).max - len(ents) + i, key
    live = [row_keys[j] for j in range(Q + delta) if np.isfinite(row_ent[j])]
    if not live:
        return torch.zeros((), device=q.device)
    bias = torch.full((len(live),), Fn.log_weight(a, beta), device=q.device)
    return Fn.cache_weights(q, torch.stack(live), bias, beta, kernel, a).sum()
