"""A plain per-sample reference of every method: the paper's text read literally, TDA's and
BoostAdapter's cache code as they write it. Lists and dicts, float64 NumPy, one sample at a
time, no fusion, no vectorisation, no code shared with `mstta` (only the config's values).

Sources: MS-TTA §3.1 (baseline cache, Eq. 3-4), §4.1 (Eq. 9-11 mean shift), Eq. (13)-(14), Alg. 1;
TDA tda_runner.py `update_cache`, `compute_cache_logits`, `run_test_tda` and utils.py
`get_clip_logits`; BoostAdapter runner.py `update_cache(fifo=...)`, `run_test_tda` (the boosted
`cur_pos_cache`) and utils.py `select_confident_samples`, `avg_entropy`.
"""

from __future__ import annotations

import copy
import math

import numpy as np


def unit(v):
    return v / np.linalg.norm(v)


def softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def entropy(p):
    return -sum(float(pi) * math.log(pi) for pi in p if pi > 0)


def argmax(values):
    best = 0
    for i, v in enumerate(values):
        if v > values[best]:
            best = i
    return best


def tda_update_cache(cache, pred, item, capacity):
    """TDA tda_runner.py `update_cache`: append while short, else replace the last (highest
    entropy) item when strictly lower; keep the list sorted by entropy (stable)."""
    if pred in cache:
        if len(cache[pred]) < capacity:
            cache[pred].append(item)
        elif item[1] < cache[pred][-1][1]:
            cache[pred][-1] = item
        cache[pred] = sorted(cache[pred], key=lambda it: it[1])
    else:
        cache[pred] = [item]


def boost_update_cache(cache, pred, item, capacity, fifo):
    """BoostAdapter runner.py `update_cache`: append; FIFO drops the oldest, else sort by entropy
    (stable) and keep the first `capacity`."""
    if pred in cache:
        cache[pred].append(item)
        if fifo:
            if len(cache[pred]) > capacity:
                cache[pred] = cache[pred][1:]
        else:
            cache[pred] = sorted(cache[pred], key=lambda it: it[1])[:capacity]
    else:
        cache[pred] = [item]


class Reference:
    """One stream through one method. `step(views)` with views [V, d] -> (final, clip) logits."""

    def __init__(self, text, method, cfg):
        self.m, self.sw, self.cfg = method, method.settings, cfg  # sw: the parts it runs (the row's switches)
        self.text = [unit(np.asarray(t, dtype=np.float64)) for t in text]
        self.bank = []  # raw features f of earlier samples, oldest first (Alg. 1's M)
        self.pos = {}  # class -> [[key, entropy], ...]
        self.neg = {}  # class -> [[key, entropy, probs], ...]

    def logits(self, f):
        return np.array([self.cfg.logit_scale * float(np.dot(f, t)) for t in self.text])

    def shift(self, f):
        """Eq. (9)-(11): z = normalise((1-a) f + a/m sum of the m = min(k, |M|) most
        cosine-similar bank features); ties: the earlier one. Repeated ms_steps times."""
        cfg = self.cfg
        if not self.bank:
            return f
        z = f
        for _ in range(cfg.ms_steps):
            sims = [float(np.dot(z, b)) / float(np.linalg.norm(b)) for b in self.bank]
            order = sorted(range(len(self.bank)), key=lambda j: (-sims[j], j))[: cfg.k]
            total = sum(self.bank[j] for j in order)
            z = unit((1 - cfg.alpha) * z + cfg.alpha / len(order) * total)
        return z

    def step(self, views):
        cfg, m, sw = self.cfg, self.m, self.sw
        views = [unit(np.asarray(v, dtype=np.float64)) for v in views]
        view_logits = [self.logits(v) for v in views]
        if len(views) == 1 or cfg.view_mode == "original":
            f, clip = views[0], view_logits[0]
            probs = softmax(clip)
        else:  # TDA utils.py get_clip_logits: the int(0.1 V) lowest-entropy views, averaged
            n = max(1, int(cfg.view_ratio * len(views)))
            ent = [entropy(softmax(z)) for z in view_logits]
            keep = sorted(range(len(views)), key=lambda i: ent[i])[:n]
            f = sum(views[i] for i in keep) / n
            clip = sum(view_logits[i] for i in keep) / n
            probs = sum(softmax(view_logits[i]) for i in keep) / n
        h = entropy(probs)
        pred = argmax(clip)
        if not sw.cache:
            return clip, clip

        boost = []
        if sw.boost:  # BoostAdapter select_confident_samples(ori_feat, ori_output, 0.1)
            ent = [entropy(softmax(z)) for z in view_logits]
            n = int(cfg.view_ratio * len(views)) if len(views) > 1 else 0
            for i in sorted(range(len(views)), key=lambda i: ent[i])[:n]:
                key = self.shift(views[i]) if m.mean_shift else views[i]
                boost.append((key, argmax(view_logits[i]), ent[i]))
        q = self.shift(f) if m.mean_shift else f
        if m.mean_shift:
            self.bank.append(f)
            if cfg.bank_size is not None and len(self.bank) > cfg.bank_size:
                self.bank.pop(0)

        tda_update_cache(self.pos, pred, [q, h], cfg.capacity)
        if sw.negative and cfg.neg_entropy_lower < h / math.log2(len(self.text)) < cfg.neg_entropy_upper:
            item = [q, h, probs]
            if sw.neg_policy == "fifo":
                boost_update_cache(self.neg, pred, item, cfg.neg_capacity, fifo=True)
            else:
                tda_update_cache(self.neg, pred, item, cfg.neg_capacity)

        pos_cache = self.pos
        if boost:  # BoostAdapter runner.py: cur_pos_cache = copy.deepcopy(pos_cache), views added
            pos_cache = copy.deepcopy(self.pos)
            for key, label, e in boost:
                boost_update_cache(pos_cache, label, [key, e], cfg.capacity + cfg.delta, fifo=False)
        pos = np.zeros(len(self.text))
        for c, items in pos_cache.items():
            for key, _ in items:
                s = float(np.dot(q, key))
                w = math.exp(-cfg.beta * (1 - s)) if cfg.kernel == "exp" else s
                pos[c] += cfg.cache_alpha * w
        neg = np.zeros(len(self.text))
        for items in self.neg.values():
            for key, _, p in items:
                w = cfg.neg_alpha * math.exp(-cfg.neg_beta * (1 - float(np.dot(q, key))))
                neg += w * ((p > cfg.neg_mask_lower) & (p < cfg.neg_mask_upper))
        return clip + cfg.lam * (pos - neg), clip  # Eq. (14)


def run(features, text, method, cfg):
    """Final and CLIP logits of a stream [N, d] or [N, V, d] -> ([N, C], [N, C]) arrays."""
    ref = Reference(np.asarray(text), method, cfg)
    feats = np.asarray(features, dtype=np.float64)
    if feats.ndim == 2:
        feats = feats[:, None, :]
    out = [ref.step(x) for x in feats]
    return np.array([o[0] for o in out]), np.array([o[1] for o in out])
