"""An independent per-sample reference of ZERO, written from the official code (FarinaMatteo/zero
@ c609f7c2): plain loops over lists, float64 NumPy, nothing imported from `mstta`.

Sources: `ttas/zero.py` `Zero.zero` (lines 59-98), `ttas/base.py` `confidence_filter` (lines 56-62),
`utils/tools.py` `break_sample_tie` (lines 205-209) and `greedy_break` (lines 212-218).
Documented choices shared with the engine: the entropy sort is stable (official `torch.argsort`
is not); the entropy is computed from log-softmax (official: -(p * p.log()).sum(1), equal where
finite); `eps` is fp16's epsilon (the official run's logits dtype).
"""

from __future__ import annotations

import math

import numpy as np


def unit(v):
    v = np.asarray(v, dtype=np.float64)
    return v / np.linalg.norm(v)


def softmax(z):
    m = max(z)
    e = [math.exp(v - m) for v in z]
    s = sum(e)
    return [v / s for v in e]


def entropy(z):
    m = max(z)
    lse = m + math.log(sum(math.exp(v - m) for v in z))
    return -sum(math.exp(v - lse) * (v - lse) for v in z)


def argmax(values):
    best = 0
    for i, v in enumerate(values):
        if v > values[best]:
            best = i
    return best


def break_sample_tie(ties, logit, official=True):
    """tools.py lines 205-209: `logit[~ties] = -inf`; `~t` of an int is -t-1 = index C-1-t."""
    logit = list(logit)
    C = len(logit)
    masked = [C - 1 - t for t in ties] if official else [c for c in range(C) if c not in ties]
    for c in masked:
        logit[c] = -math.inf
    return argmax(logit)


def greedy_break(ties, logits, official=True):
    """tools.py lines 212-218: the first view (rows in entropy order) whose argmax is tied."""
    for row in logits:
        pred = argmax(row)
        if pred in ties:
            return pred
    return break_sample_tie(ties, logits[0], official)


def zero(views, text, logit_scale=100.0, gamma=0.3, eps=2.0**-10, official=True):
    """One sample, views [V, d] -> (p_bar [C], the prediction argmax p_bar). zero.py lines 59-98."""
    X = [unit(v) for v in views]
    W = [unit(t) for t in text]
    l = [[float(np.dot(x, w)) for w in W] for x in X]  # line 73, unscaled
    H = [entropy([logit_scale * v for v in row]) for row in l]  # line 74 + base.py line 57
    idx = sorted(range(len(X)), key=lambda i: H[i])  # base.py line 58 (stable)
    k = int(len(X) * gamma)  # base.py line 59
    sorted_l = [l[i] for i in idx]
    p_bar = [0.0] * len(W)
    for row in sorted_l[:k]:  # lines 80-81
        for c, p in enumerate(softmax([v / eps for v in row])):
            p_bar[c] += p
    pred = argmax(p_bar)  # line 84
    ties = [pred] + [i for i in range(len(p_bar)) if i != pred and p_bar[i] == p_bar[pred]]
    if len(ties) > 1:  # lines 91-95
        p_bar[greedy_break(ties, sorted_l[k:], official)] += 1
    return p_bar, argmax(p_bar)  # run.py scores p_bar (`accuracy`: topk); first maximum on a tie
