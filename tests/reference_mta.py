"""An independent per-sample reference of MTA, written from the official code (MaxZanella/MTA
@ cafafdfa): plain loops, float64 NumPy, nothing imported from `mstta`.

Source: `mta.py` `gaussian_kernel` (lines 4-7) and `solve_mta` (lines 10-87); defaults from
`main.py` lines 346-347 (lambda_q 4, lambda_y 0.2). Documented fallbacks shared with the engine
(the official code gives NaN there): k = int(0.3 (V-1)) is at least 1; 2 h^2 is at least
1e-6; a mode whose weights all vanish stays; V = 1 returns view 0.
"""

from __future__ import annotations

import math

import numpy as np

H2_FLOOR = 1e-6


def unit(v):
    v = np.asarray(v, dtype=np.float64)
    return v / np.linalg.norm(v)


def softmax(z):
    m = max(z)
    e = [math.exp(v - m) for v in z]
    s = sum(e)
    return np.array([v / s for v in e])


def gaussian_kernel(mu, h, X):
    """mta.py lines 4-7: exp(-||x - mu||^2 / (2 h^2)), per view."""
    return np.array([math.exp(-(float(np.linalg.norm(x - mu)) ** 2) / max(2 * hi**2, H2_FLOOR)) for x, hi in zip(X, h)])


def mta(views, text, logit_scale=100.0, lambda_y=0.2, lambda_q=4.0, max_iter=5, th=1e-6, temperature=1.0, ratio=0.3):
    """One sample, views [V, d] -> the logits logit_scale * mode W^T [C] (mta.py line 86)."""
    X = [unit(v) for v in views]
    W = [unit(t) for t in text]
    N = len(X)
    mode = X[0]  # lines 39-40
    if N > 1:
        k = max(1, int(ratio * (N - 1)))  # line 27 (+ the k >= 1 fallback)
        h = []
        for i in range(N):  # lines 25-30
            d = sorted(float(np.linalg.norm(X[i] - X[j])) for j in range(N))
            h.append(math.sqrt(0.5 * sum(v**2 for v in d[1 : k + 1]) / k))
        P = [softmax([logit_scale * float(np.dot(x, w)) / temperature for w in W]) for x in X]
        A = [[float(np.dot(P[i], P[j])) for j in range(N)] for i in range(N)]  # line 33
        y = np.full(N, 1.0 / N)  # line 36
        for _ in range(max_iter):  # lines 46-84
            density = gaussian_kernel(mode, h, X)  # line 52
            for _ in range(max_iter):  # lines 56-63
                old_y = y
                Ay = np.array([sum(A[i][j] * y[j] for j in range(N)) for i in range(N)])
                y = softmax(list(1 / lambda_y * (density + lambda_q * Ay)))
                if np.linalg.norm(old_y - y) < th:
                    break
            for _ in range(max_iter):  # lines 71-80
                old_mode = mode
                wd = gaussian_kernel(mode, h, X) * y
                if wd.sum() > 0:
                    mode = sum(w * x for w, x in zip(wd, X)) / wd.sum()
                    mode = mode / np.linalg.norm(mode)
                if np.linalg.norm(old_mode - mode) < th:
                    break
    return np.array([logit_scale * float(np.dot(mode, w)) for w in W])
