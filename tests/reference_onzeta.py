"""An independent reference of OnZeta: idstcv/OnZeta @ befef06d `main_online.py`, the online loop of
lines 248-279, transcribed as a plain float64 NumPy loop (no code shared with `mstta`).

One stream of features [N, d] (the official code has 1 view), the text classifier [C, d] (the
official `text_classifier` is its transpose [d, C]). Returns per-sample `combo_label` (the
prediction's scores, line 270) and `text_label` (OnLab's, line 268).

`shift`, when given, is this file's own mean shift (the paper's Eq. 9-11 read literally) applied
where the +MS rule puts it: the vision proxy's label and its gradient (lines 269, 271).
"""

from __future__ import annotations

import math

import numpy as np

DEFAULTS = dict(tau_t=0.01, tau_i=0.04, cw=0.5, cr=20.0, alpha=1.0, beta=0.8)  # main_online.py lines 24-29


def softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def normalize_columns(w):
    """F.normalize(w, dim=0): each column over max(norm, 1e-12)."""
    return w / np.maximum(np.linalg.norm(w, axis=0, keepdims=True), 1e-12)


def onzeta(feats, text, n=None, tau_t=0.01, tau_i=0.04, cw=0.5, cr=20.0, alpha=1.0, beta=0.8, shift=None):
    """Lines 252-273 for one order (`idx` = the stream order). `n`: the schedule's length (the
    official n = the dataset's size; default len(feats)); past n, beta_i stays at beta (this
    project's endless-stream rule: the official loop never passes n)."""
    feats = np.asarray(feats, dtype=np.float64)
    text_classifier = np.asarray(text, dtype=np.float64).T  # [d, C]
    N = feats.shape[0]
    n = N if n is None else n
    num_class = text_classifier.shape[1]
    w = text_classifier.copy()  # line 256
    rho = np.zeros(num_class)  # line 257
    combo_label = np.zeros((N, num_class))
    text_label = np.zeros((N, num_class))
    bank = []
    for i in range(N):  # line 258
        lr = cw / math.sqrt(i + 1)  # line 259
        rlr = cr / math.sqrt(i + 1)  # line 260
        b = beta * math.sqrt(min(i + 1, n) / n)  # line 261 (capped past n)
        x = feats[i, :]  # line 262
        tlabel = softmax(x @ text_classifier / tau_t)  # line 263
        tlabel = tlabel * np.exp(rho)  # line 264
        tlabel /= np.sum(tlabel)  # line 265
        rho -= rlr * (tlabel - alpha / num_class)  # line 266
        rho[rho < 0] = 0  # line 267
        text_label[i, :] = tlabel  # line 268
        z = x if shift is None else shift(x, bank)
        vision_label = softmax(z @ w / tau_i)  # line 269
        combo_label[i, :] = b * vision_label + (1 - b) * tlabel  # line 270
        grad = np.outer(z, vision_label - tlabel)  # line 271
        w -= (lr / tau_i) * grad  # line 272
        w = normalize_columns(w)  # line 273
        bank.append(x)
    return combo_label, text_label


def first_argmax(row):
    """The first index of the maximum (the official `topk(1)` leaves ties unspecified; this
    project takes the first)."""
    best = 0
    for j, v in enumerate(row):
        if v > row[best]:
            best = j
    return best


def mean_shift(k, alpha, steps=1):
    """The MS-TTA paper's Eq. (9)-(11) read literally: `steps` times, z <- normalise((1 - alpha) z +
    alpha / m * the sum of the m = min(k, |bank|) earlier raw features most cosine-similar to z (each
    at its own norm; ties to the earlier one)); the identity before any earlier sample."""

    def shift(f, bank):
        if not bank or alpha == 0:
            return f
        z = f
        for _ in range(steps):
            sims = [float(z @ b) / float(np.linalg.norm(b)) for b in bank]
            order = sorted(range(len(bank)), key=lambda j: (-sims[j], j))[:k]
            total = sum(bank[j] for j in order)
            z = (1 - alpha) * z + alpha / len(order) * total
            z = z / np.linalg.norm(z)
        return z

    return shift
