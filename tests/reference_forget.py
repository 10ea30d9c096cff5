"""A plain per-sample reference of the cache family *with forgetting*: float64 NumPy, lists of
entries, one sample at a time, no code shared with `mstta` (only the config's values).

The rules as their sources state them (docs/engine.md, "Forgetting"):
- timeliness: RoTTA `core/utils/memory.py:104-105` score `lambda_t / (1 + exp(-age / N)) +
  lambda_u * H / ln C` (lambda_u = 1; a newcomer's age is 0), `memory.py:71-92`: the entry of
  highest score leaves only when that score is above the newcomer's; per class row here;
- idle: an entry not the cache's strongest vote (largest kernel weight) for `idle` steps since its
  insertion or last such vote leaves (DynaPrompt's LRU, adapted);
- periodic: RDumb `models/rdumb.py:50-54`: before sample t with t % every == 0, everything goes;
- detect: the project's detector (a CUSUM of the Mahalanobis gap between an EMA of the unit image
  feature and the reference of the first samples since the last reset), a reset at each cut.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from reference_loop import argmax, entropy, softmax, unit

DETECT_DIMS, DETECT_SEED = 64, 29  # docs/engine.md, "The detector": wider features go through a fixed map


def projection(dim):
    """The detector's map for dim > 64 (docs/engine.md): orthonormal columns (QR, NumPy) of a [dim, 64]
    standard normal drawn by torch's generator seeded 29, times sqrt(dim / 64); None otherwise."""
    if dim <= DETECT_DIMS:
        return None
    g = torch.Generator().manual_seed(DETECT_SEED)
    q, _ = np.linalg.qr(torch.randn(dim, DETECT_DIMS, generator=g, dtype=torch.float64).numpy())
    return q * math.sqrt(dim / DETECT_DIMS)


class Detector:
    """The scene-cut statistic in float64 (the engine keeps it in float32), written from its
    definition (docs/engine.md, "The detector"): the reference is the first W = warmup samples since
    the last reset (their mean and population covariance C, computed directly; features wider than
    64 dims read through `projection`), P = (C + r/d I)^-1
    inverted once, m = tr(C P); the EMA e of rate a of every sample (the first: itself); from sample
    W + 1 on, z = (e - mean)^T P (e - mean) (W - m - 2) / (W m (a/(2-a) + 1/W)) feeds a CUSUM
    acc = max(0, acc + z - 1 - k), and a cut is acc > threshold; then it starts over from the next sample."""

    def __init__(self, fg, dim):
        self.fg, self.dim, self.proj = fg, min(dim, DETECT_DIMS), projection(dim)
        self.start()

    def start(self):
        self.ref, self.n, self.acc = [], 0, 0.0
        self.mean, self.prec = None, None
        self.ema = np.zeros(self.dim)

    def cut(self, u):
        fg, d = self.fg, self.dim
        u = u if self.proj is None else u @ self.proj
        a, w = fg.detect_rate, fg.detect_warmup
        self.n += 1
        self.ema = u.copy() if self.n == 1 else (1 - a) * self.ema + a * u
        if self.n <= w:
            self.ref.append(u.copy())
            if self.n == w:
                ref = np.stack(self.ref)
                self.mean = ref.mean(0)
                cov = (ref - self.mean).T @ (ref - self.mean) / w
                self.prec = np.linalg.inv(cov + fg.detect_ridge / d * np.eye(d))
                self.eff = float(np.trace(cov @ self.prec))
            return False
        g = self.ema - self.mean
        z = float(g @ self.prec @ g) * max(w - self.eff - 2, 1) / (w * self.eff * (a / (2 - a) + 1 / w))
        self.acc = max(0.0, self.acc + z - 1 - fg.detect_slack)
        if self.acc > fg.detect_threshold:
            self.start()
            return True
        return False


class ForgetReference:
    """One stream of a cache-family method (no boosting) with `cfg.forget`. `step(views)` -> (final,
    clip, cut)."""

    def __init__(self, text, method, cfg):
        self.m, self.sw, self.cfg, self.fg = method, method.settings, cfg, cfg.forget  # sw: the row's switches
        self.text = [unit(np.asarray(t, dtype=np.float64)) for t in text]
        self.t = 0
        self.detector = Detector(self.fg, len(self.text[0]))
        self.clear()

    def clear(self):
        self.bank = []  # raw features of earlier samples since the last reset, oldest first
        self.pos = []  # entries {"c", "key", "h", "t", "used"}
        self.neg = []  # the same with "p"

    def shift(self, f):
        cfg = self.cfg
        z = f
        if not self.bank:
            return f
        for _ in range(cfg.ms_steps):
            sims = [float(np.dot(z, b)) / float(np.linalg.norm(b)) for b in self.bank]
            order = sorted(range(len(self.bank)), key=lambda j: (-sims[j], j))[: cfg.k]
            z = unit((1 - cfg.alpha) * z + cfg.alpha / len(order) * sum(self.bank[j] for j in order))
        return z

    def admit(self, cache, item, capacity):
        """Per class row: room -> in; else the rule's worst entry leaves if worse than the newcomer."""
        row = [e for e in cache if e["c"] == item["c"]]
        if len(row) < capacity:
            cache.append(item)
            return
        if self.fg.rule == "timeliness":
            lt, n, ln_c = self.fg.weight, self.fg.steps, math.log(len(self.text))

            def score(e):
                return lt / (1 + math.exp(-(self.t - e["t"]) / n)) + e["h"] / ln_c

            new = lt * 0.5 + item["h"] / ln_c
        else:

            def score(e):
                return e["h"]

            new = item["h"]
        worst = max(row, key=lambda e: (score(e), e["t"]))
        if score(worst) > new:
            cache[next(i for i, e in enumerate(cache) if e is worst)] = item

    def step(self, views):
        cfg, m, sw, fg = self.cfg, self.m, self.sw, self.fg
        views = [unit(np.asarray(v, dtype=np.float64)) for v in views]
        cut = fg.rule == "periodic" and self.t > 0 and self.t % fg.every == 0
        if cut:
            self.detector.start()
        if fg.detect and self.detector.cut(views[0]):
            cut = True
        if cut:
            self.clear()
        if fg.rule == "idle":
            self.pos = [e for e in self.pos if self.t - e["used"] < fg.idle]
            self.neg = [e for e in self.neg if self.t - e["used"] < fg.idle]
        clip = np.array([cfg.logit_scale * float(np.dot(views[0], t)) for t in self.text])
        probs = softmax(clip)
        h, pred, f = entropy(probs), argmax(clip), views[0]
        if not sw.cache:
            self.t += 1
            return clip, clip, cut
        q = self.shift(f) if m.mean_shift else f
        if m.mean_shift:
            self.bank.append(f)
            if cfg.bank_size is not None and len(self.bank) > cfg.bank_size:
                self.bank.pop(0)
        new = {"c": pred, "key": q, "h": h, "t": self.t, "used": self.t}
        self.admit(self.pos, new, cfg.capacity)
        if sw.negative and cfg.neg_entropy_lower < h / math.log2(len(self.text)) < cfg.neg_entropy_upper:
            self.admit(self.neg, {**new, "p": probs}, cfg.neg_capacity)
        pos = np.zeros(len(self.text))
        pw = []
        for e in self.pos:
            s = float(np.dot(q, e["key"]))
            w = cfg.cache_alpha * (math.exp(-cfg.beta * (1 - s)) if cfg.kernel == "exp" else s)
            pos[e["c"]] += w
            pw.append(w)
        neg = np.zeros(len(self.text))
        nw = []
        for e in self.neg:
            w = cfg.neg_alpha * math.exp(-cfg.neg_beta * (1 - float(np.dot(q, e["key"]))))
            neg += w * ((e["p"] > cfg.neg_mask_lower) & (e["p"] < cfg.neg_mask_upper))
            nw.append(w)
        for cache, ws in ((self.pos, pw), (self.neg, nw)):
            if ws:
                cache[int(np.argmax(ws))]["used"] = self.t
        self.t += 1
        return clip + cfg.lam * (pos - neg), clip, cut


def run(features, text, method, cfg):
    """Final logits [N, C] and cuts [N] of a stream [N, d] or [N, V, d]."""
    ref = ForgetReference(np.asarray(text), method, cfg)
    feats = np.asarray(features, dtype=np.float64)
    if feats.ndim == 2:
        feats = feats[:, None, :]
    out = [ref.step(x) for x in feats]
    return np.array([o[0] for o in out]), np.array([o[2] for o in out])
