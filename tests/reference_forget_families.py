"""Plain per-sample references of DMN-ZS, DPE, BCA and OnZeta *with forgetting* (float64, lists of
entries, one sample at a time, nothing imported from `mstta`): the families' own references
(reference_dmn, reference_dpe, reference_bca, reference_onzeta) plus the rules as docs/engine.md,
"Forgetting", states them.

- timeliness on a memory (DMN, DPE): RoTTA `core/utils/memory.py:104-105`, an entry's score
  `lambda_t / (1 + exp(-age / N)) + H / ln C` (H in nats; a newcomer's age is 0), `:71-92` the
  entry of highest score leaves only when that score is above the newcomer's; per class, when the
  class is full; ties as the family's own rule (DMN: the last slot; DPE: the latest inserted).
- idle on a memory: an entry that was not the memory's largest kernel weight for `idle` steps since
  its insertion or its last such weight leaves before the step (DynaPrompt's LRU, adapted).
- timeliness on DPE's global text prototypes W_g (a cumulative average of the text and the
  evolved prototypes): before each step the prototypes' sum and count fade by g = exp(-1 / N).
- timeliness on statistics (BCA, OnZeta): before each step, the evidence beyond the prior fades by
  g = exp(-1 / N): BCA's centre sum c1 mu = n1 W + E and prior row sum c2 P = n2 e + E' keep n1 W
  and n2 e and scale E, E' by g (counts alike); OnZeta's rho, w - W and step index scale by g.
"""

from __future__ import annotations

import math

import numpy as np
import reference_bca
import reference_dmn
import reference_dpe
import reference_onzeta
import torch
import torch.nn.functional as F


class DMNForget(reference_dmn.ReferenceDMN):
    """DMN-ZS with `rule` ("timeliness" or "idle"): memory rows are lists of entries."""

    def __init__(self, text, rule, horizon=50, weight=1.0, idle=1000, **kw):
        super().__init__(text, **kw)
        self.rule, self.horizon, self.lt, self.idle = rule, horizon, weight, idle
        self.t = 0
        self.rows = [[] for _ in range(len(self.text))]  # entries {"key", "h", "t", "used"} in slot order

    def step(self, views):
        if self.rule == "idle":
            self.rows = [[e for e in row if self.t - e["used"] < self.idle] for row in self.rows]
        out = super().step(views)
        self.t += 1
        return out

    def _update(self, mean_prob, feat):
        label = int(np.argmax(mean_prob))
        h = float(-(mean_prob * np.log(mean_prob + 1e-8)).sum())
        row, new = self.rows[label], {"key": feat, "h": h, "t": self.t, "used": self.t}
        if len(row) < self.M:
            row.append(new)
            return
        if self.rule == "timeliness":
            ln_c = math.log(len(self.text))

            def score(e):
                return self.lt / (1 + math.exp(-(self.t - e["t"]) / self.horizon)) + e["h"] / ln_c

            worst = max(range(len(row)), key=lambda j: (score(row[j]), j))  # ties: the last slot
            if score(row[worst]) > self.lt * 0.5 + h / ln_c:
                row[worst] = new
        elif (np.array([e["h"] for e in row]) > h).any():
            row[max(range(len(row)), key=lambda j: (row[j]["h"], j))] = new

    def _image_pred(self, img_feat):
        self.mem[:] = 0
        for c, row in enumerate(self.rows):
            for j, e in enumerate(row):
                self.mem[c, j] = e["key"]
        out = super()._image_pred(img_feat)
        if self.rule == "idle":
            q = img_feat / np.linalg.norm(img_feat)
            entries = [e for row in self.rows for e in row]
            w = [math.exp(-self.beta * (1 - float(q @ e["key"]) / float(np.linalg.norm(e["key"])))) for e in entries]
            if entries:
                entries[int(np.argmax(w))]["used"] = self.t
        return out


def dmn(features, text, rule, **kw):
    """Scores [N, C] of a stream [N, V, d]."""
    ref = DMNForget(text, rule, **kw)
    feats = reference_dmn.unit(np.asarray(features, dtype=np.float64))
    return np.array([ref.step(x)[0] for x in feats])


class DPEForget(reference_dpe.ReferenceDPE):
    """DPE with `rule`; cache items are [feature, H / log2 C, inserted, last used] (predicting from view 0)."""

    def __init__(self, text, p, rule, horizon=50, weight=1.0, idle=1000, ms=None):
        super().__init__(text, p, ms=ms)
        self.rule, self.horizon, self.lt, self.idle = rule, horizon, weight, idle
        self.gamma = math.exp(-1 / horizon)
        self.t = 0

    def update_cache(self, pred, item):
        item = [*item, self.t, self.t]
        row = self.pos_cache.setdefault(pred, [])
        if len(row) < self.p["capacity"]:
            row.append(item)
        elif self.rule == "timeliness":
            C = self.clip_weights.shape[1]
            per_nat = math.log2(C) / math.log(C)  # H / ln C = (H / log2 C) log2 C / ln C

            def score(e):
                return self.lt / (1 + math.exp(-(self.t - e[2]) / self.horizon)) + e[1] * per_nat

            worst = max(row, key=lambda e: (score(e), e[2]))  # ties: the latest inserted
            if score(worst) > self.lt * 0.5 + item[1] * per_nat:
                row.pop(next(i for i, e in enumerate(row) if e is worst))
                row.append(item)
        elif item[1] < row[-1][1]:
            row[-1] = item
        self.pos_cache[pred] = sorted(row, key=lambda e: e[1])

    def step(self, views):
        if self.rule == "timeliness":  # W_g = (W + sum of n prototypes) / (n + 1): the sum and n fade
            n, g = self.num_avg, self.gamma
            self.clip_weights_global = (
                self.clip_weights + g * ((n + 1) * self.clip_weights_global - self.clip_weights)
            ) / (g * n + 1)
            self.num_avg = g * n
        if self.rule == "idle":
            for c in list(self.pos_cache):
                self.pos_cache[c] = [e for e in self.pos_cache[c] if self.t - e[3] < self.idle]
                if not self.pos_cache[c]:
                    del self.pos_cache[c]
        images = F.normalize(
            torch.as_tensor(np.asarray(views), dtype=torch.float64).reshape(-1, len(self.clip_weights)), dim=-1
        )
        q = self.shift(images[0:1])[0]  # the prediction's cache query (the bank before this sample)
        out = super().step(views)
        if self.rule == "idle":
            entries = [e for c in sorted(self.pos_cache) for e in self.pos_cache[c]]
            w = [math.exp(-self.p["beta"] * (1 - float(q @ F.normalize(e[0][0], dim=0)))) for e in entries]
            entries[int(np.argmax(w))][3] = self.t
        self.t += 1
        return out


def bca(samples, text, tem, gamma, shift=None, **params):
    """reference_bca's loop with the evidence fading before each step: posteriors [N, C]."""
    state = reference_bca.BCAState(text, tem, **{**reference_bca.DEFAULTS, **params})
    p = {**reference_bca.DEFAULTS, **params}
    n1, n2 = p["init_count1"], p["init_count2"]
    W = np.array(text, dtype=np.float64)
    bank, outputs = [], []
    for views in samples:
        for c in range(state.M):
            if state.c1[c] > n1:
                s = n1 * W[c] + gamma * (state.c1[c] * state.mu[c] - n1 * W[c])
                state.mu[c] = s / np.linalg.norm(s)
                state.c1[c] = n1 + gamma * (state.c1[c] - n1)
            if state.c2[c] > n2:
                e = np.eye(state.M)[c]
                c2 = n2 + gamma * (state.c2[c] - n2)
                state.cluster_to_class_prob[c] = (
                    n2 * e + gamma * (state.c2[c] * state.cluster_to_class_prob[c] - n2 * e)
                ) / c2
                state.c2[c] = c2
        views = np.asarray(views, dtype=np.float64)
        out, xbar = state.bca_step(views if views.ndim == 2 else views[None], shift, bank)
        outputs.append(out)
        bank.append(xbar)
    return np.array(outputs)


def onzeta(feats, text, gamma, n, tau_t=0.01, tau_i=0.04, cw=0.5, cr=20.0, alpha=1.0, beta=0.8, shift=None):
    """reference_onzeta's loop (main_online.py lines 252-273) with what it learnt fading before each
    step: rho, w - W and the step count i scale by gamma. Combo labels [N, C]."""
    feats = np.asarray(feats, dtype=np.float64)
    W = np.asarray(text, dtype=np.float64).T  # [d, C]
    C = W.shape[1]
    w, rho, i = W.copy(), np.zeros(C), 0.0
    out, bank = [], []
    for x in feats:
        rho = gamma * rho
        w = reference_onzeta.normalize_columns(W + gamma * (w - W))
        i = gamma * i
        lr, rlr, b = cw / math.sqrt(i + 1), cr / math.sqrt(i + 1), beta * math.sqrt(min(i + 1, n) / n)
        tl = reference_onzeta.softmax(x @ W / tau_t) * np.exp(rho)
        tl /= tl.sum()
        rho = np.maximum(rho - rlr * (tl - alpha / C), 0)
        z = x if shift is None else shift(x, bank)
        v = reference_onzeta.softmax(z @ w / tau_i)
        out.append(b * v + (1 - b) * tl)
        w = reference_onzeta.normalize_columns(w - (lr / tau_i) * np.outer(z, v - tl))
        i += 1
        bank.append(x)
    return np.array(out)
