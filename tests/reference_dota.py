"""An independent float64 reference of DOTA, written from the authors' code (skylineeeeen/DOTA @
bc67d44): `dota.py` class `DOTA` (`__init__`, `fit`, `update`, `predict`), `run_test_dota` and
`main`, and `utils.py` `get_clip_logits_aug`, `softmax_entropy`, `avg_entropy`. Plain NumPy, the
official state layout (normalised Sigma_k, einsum delta, pinv init), one sample at a time; imports
nothing from mstta. Deliberate choices where the official code has none (stated in
docs/methods/dota.md): at least one view is kept when int(0.1 V) = 0, entropy ties go to the lower
view index (a stable sort).
"""

from __future__ import annotations

import numpy as np


def log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def logsumexp(z, axis):
    m = z.max(axis)
    return m + np.log(np.exp(z - np.expand_dims(m, axis)).sum(axis))


def half(t):
    """Round to fp16 and back (the official `.half()` tensors, held in float64)."""
    return np.asarray(t, dtype=np.float64).astype(np.float16).astype(np.float64)


class DOTA:
    """dota.py `DOTA`, as `main` builds it: `DOTA(cfg, d, C, clip_weights=full(0.001))`."""

    def __init__(self, C, d, epsilon, sigma, fp16=False):
        self.C, self.d, self.epsilon, self.fp16 = C, d, epsilon, fp16
        self.mu = np.full((C, d), 0.001)  # `main`: tensor_matrix = full(.., 0.001)
        self.c = np.ones(C)  # `__init__`: c = ones
        self.Sigma = np.stack([sigma * np.eye(d) for _ in range(C)])  # sigma * eye repeated per class
        self.overall_Sigma = self.Sigma.mean(0)
        self.Lambda = self._cast(np.linalg.pinv(self.overall_Sigma))  # pinverse(...).half()

    def _cast(self, lam):
        return half(lam) if self.fp16 else lam

    def fit(self, x, y):
        """`DOTA.fit` (streaming_update_Sigma=True): y soft labels [n, C] of x [n, d]."""
        sum_weights = y.sum(0)
        weighted_x = y.T @ x
        new_mu = (weighted_x + self.c[:, None] * self.mu) / (sum_weights[:, None] + self.c[:, None])
        new_c = self.c + sum_weights
        x_minus_mu = x[:, None, :] - self.mu[None, :, :]  # old mu
        weighted = y[:, :, None] * x_minus_mu
        delta = np.einsum("bji,bjk->jik", weighted, x_minus_mu)
        self.Sigma = (self.c[:, None, None] * self.Sigma + delta) / (self.c[:, None, None] + sum_weights[:, None, None])
        self.overall_Sigma = self.Sigma.mean(0)
        self.mu = new_mu
        self.c = new_c

    def update(self):
        """`DOTA.update`: Lambda = inverse((1 - eps) Sigmabar + eps I).half()."""
        self.Lambda = self._cast(np.linalg.inv((1 - self.epsilon) * self.overall_Sigma + self.epsilon * np.eye(self.d)))

    def predict(self, X):
        """`DOTA.predict`: M = mu^T; W = Lambda M; c = 0.5 sum(M * W, 0); X W - c."""
        if self.fp16:  # fp16 tensors; each op accumulates wide and rounds its output once
            M = half(self.mu.T)
            W = half(self.Lambda @ M)
            c = half(0.5 * half(half(M * W).sum(0)))
            return half(half(half(X) @ W) - c)
        M = self.mu.T
        W = self.Lambda @ M
        c = 0.5 * (M * W).sum(0)
        return X @ W - c


def clip_logits_aug(x, text, scale, ratio):
    """utils.py `get_clip_logits_aug` on unit features x [V, d]: (features, clip logits, entropy,
    prob_map). V > 1: argsort of the per-view entropy, the first int(0.1 V) (at least 1 here)."""
    logits = scale * x @ text.T
    if x.shape[0] > 1:
        lp = log_softmax(logits)
        ent = -(np.exp(lp) * lp).sum(1)  # softmax_entropy
        n = max(1, int(x.shape[0] * ratio))
        idx = np.argsort(ent, kind="stable")[:n]
        output = logits[idx]
        avg = logsumexp(log_softmax(output), 0) - np.log(n)  # avg_entropy
        return x[idx], output.mean(0), -(avg * np.exp(avg)).sum(), np.exp(log_softmax(output))
    lp = log_softmax(logits[0])
    return x, logits[0], -(np.exp(lp) * lp).sum(), np.exp(lp)[None]


def run(feats, text, epsilon=1e-4, sigma=0.002, eta=0.2, rho=0.005, scale=100.0, ratio=0.1, fp16=False):
    """`run_test_dota` over feats [N, V, d] (unit rows), text [C, d]: final logits, clip logits,
    entropies, one row per sample."""
    feats, text = np.asarray(feats, np.float64), np.asarray(text, np.float64)
    model = DOTA(text.shape[0], text.shape[1], epsilon, sigma, fp16)
    finals, clips, ents = [], [], []
    for x in feats:
        image_features, clip, loss, prob_map = clip_logits_aug(x, text, scale, ratio)
        dota_logits = model.predict(image_features.mean(0))
        weight = min(rho * model.c.mean() / image_features.shape[0], eta)  # torch.clamp(max=eta)
        finals.append(clip + weight * dota_logits)
        clips.append(clip)
        ents.append(loss)
        model.fit(image_features, prob_map)
        model.update()
    return np.array(finals), np.array(clips), np.array(ents)
