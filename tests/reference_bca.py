"""An independent reference of BCA as the TTABC port runs it (walawalagoose/TTABC
`ttabc/model_selection/bca.py` `BCAState`; the authors' repository is not readable here),
transcribed as a plain float64 NumPy loop (no code shared with `mstta`).

One stream of samples [N, V, d] (view 0 = the original image), the text classifier [C, d].
Returns per-sample `output` (the posterior f1 of `assign_label`, before the updates).

Where this file departs from the port, on purpose and as the engine does: an empty view selection
(V < 10 at selection_p = 0.1; the port's mean would be NaN) keeps 1 view; entropy ties keep the
lower view index (the port's `torch.argsort` leaves them unspecified). `shift`, when given, is this
file's own mean shift (the paper's Eq. 9-11 read literally), applied to xbar before the likelihood
and the centre update (the +MS rule).
"""

from __future__ import annotations

import numpy as np

DEFAULTS = dict(
    threshold1=0.05, init_count1=20000, threshold2=0.65, init_count2=1, selection_p=0.1
)  # TTABC algorithms.py ["bca"]


def softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def entropy_of_logits(z):
    """TPT `select_confident_samples`: -(softmax * log_softmax).sum."""
    logp = z - z.max() - np.log(np.exp(z - z.max()).sum())
    return float(-(np.exp(logp) * logp).sum())


class BCAState:
    """`BCAState.__init__`: mu = text centres, P = I, counts c1, c2 per class, tem = CLIP's logit scale."""

    def __init__(
        self, text, tem=100.0, threshold1=0.05, init_count1=20000, threshold2=0.65, init_count2=1, selection_p=0.1
    ):
        self.mu = np.array(text, dtype=np.float64)
        self.M = self.mu.shape[0]
        self.cluster_to_class_prob = np.eye(self.M)
        self.threshold1, self.threshold2 = threshold1, threshold2
        self.c1 = [init_count1] * self.M
        self.c2 = [init_count2] * self.M
        self.tem = tem
        self.selection_p = selection_p

    def bca_step(self, image_features, shift=None, bank=None):
        """`bca_step`: assign the label, then update the centre and the prior of the max class.
        Returns (output [C], xbar [d] the raw aggregated feature)."""
        output, xbar = self.assign_label(image_features, shift, bank)
        pred = first_argmax(output)
        prob_max = output[pred]
        if prob_max > self.threshold1:
            self.update_centers(xbar if shift is None else shift(xbar, bank), pred)
        if prob_max > self.threshold2:
            self.update_prior(output, pred)
        return output, xbar

    def assign_label(self, image_features, shift, bank):
        """P(x|u_m) = tem x mu^T; V > 1: mean over the int(p V) (>= 1) lowest-entropy views of the
        features and of the logits; the posterior = softmax(logits) @ P."""
        feats = np.asarray(image_features, dtype=np.float64)
        P_x_um = [self.tem * (f @ self.mu.T) for f in feats]
        if len(feats) > 1:
            ent = [entropy_of_logits(z) for z in P_x_um]
            order = sorted(range(len(feats)), key=lambda v: (ent[v], v))
            keep = order[: max(1, int(len(feats) * self.selection_p))]
            xbar = sum(feats[v] for v in keep) / len(keep)
            logits = sum(P_x_um[v] for v in keep) / len(keep)
        else:
            xbar, logits = feats[0], P_x_um[0]
        if shift is not None:  # +MS: the likelihood of the shifted mean feature
            logits = self.tem * (shift(xbar, bank) @ self.mu.T)
        s1 = softmax(logits)
        return s1 @ self.cluster_to_class_prob, xbar

    def update_prior(self, soft_prob, pred):
        self.cluster_to_class_prob[pred] = (self.c2[pred] * self.cluster_to_class_prob[pred] + soft_prob) / (
            self.c2[pred] + 1
        )
        self.c2[pred] = self.c2[pred] + 1

    def update_centers(self, image_feature, pred):
        mu = self.c1[pred] * self.mu[pred] + image_feature
        self.c1[pred] = self.c1[pred] + 1
        mu = mu / self.c1[pred]
        self.mu[pred] = mu / np.linalg.norm(mu)


def bca(samples, text, tem=100.0, shift=None, **params):
    """The port's loop (`test_time_adapt_eval`) over one stream: [N] posteriors [C] before updates."""
    state = BCAState(text, tem, **{**DEFAULTS, **params})
    bank, outputs = [], []
    for views in samples:
        views = np.asarray(views, dtype=np.float64)
        if views.ndim == 1:
            views = views[None]
        out, xbar = state.bca_step(views, shift, bank)
        outputs.append(out)
        bank.append(xbar)
    return np.array(outputs), state


def first_argmax(row):
    """`torch.max(output, dim=1)`'s index: the first of tied maxima."""
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
