"""The field table's metrics: pure functions over per-sample arrays (numpy), each defined in
docs/field.md. Percentages everywhere (accuracy, ECE, AUROC, FPR are in 0..100; NLL in nats).

Labels follow the feature-file convention: `labels[i] = -1` marks a sample of no known class (an
open stream's unknowns); accuracy, ECE and NLL are over the known samples only. `probs` [N, C]
are a method's probabilities (`ReplayResult.probs`, `replay(..., keep_probs=True)`): the softmax
of the logits for the cache family, each other family's own (`mstta.engine.families.<family>`).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..checks import int_in
from ..errors import UserError

ECE_BINS = 20  # equal-width confidence bins (TTA-VLM reports 20; 15 is the other common choice)
MAX_ECE_BINS = 10_000
NLL_FLOOR = 1e-12  # a probability of the true class below this counts as this (NLL <= 27.6 nats)
TPR_AT = 0.95  # FPR is read where this share of the known samples is accepted
WORST_SHARE = 0.10  # the worst 10% of stream orders


def _known(labels: np.ndarray) -> np.ndarray:
    return np.asarray(labels) >= 0


def accuracy(pred: np.ndarray, labels: np.ndarray) -> float:
    """Top-1 accuracy (%) over the known samples (labels >= 0); nan when there are none."""
    known = _known(labels)
    if not known.any():
        return math.nan
    return float((np.asarray(pred)[known] == np.asarray(labels)[known]).mean() * 100)


def ece(probs: np.ndarray, labels: np.ndarray, bins: int = ECE_BINS) -> float:
    """Expected calibration error (%) over the known samples: confidence = max probability,
    `bins` equal-width bins on [0, 1] (a confidence of exactly 1 in the last), ECE = sum over bins
    of (share of samples) x |accuracy - mean confidence|."""
    int_in(bins, "--ece-bins", 1, MAX_ECE_BINS, ", e.g. 20")
    known = _known(labels)
    if not known.any():
        return math.nan
    p = np.asarray(probs, dtype=np.float64)[known]
    conf, correct = p.max(1), (p.argmax(1) == np.asarray(labels)[known])
    which = np.minimum((conf * bins).astype(np.int64), bins - 1)
    gap = np.abs(np.bincount(which, correct, bins) - np.bincount(which, conf, bins))
    return float(gap.sum() / len(conf) * 100)


def nll(probs: np.ndarray, labels: np.ndarray) -> float:
    """Mean negative log-likelihood (nats) of the true class over the known samples, each
    probability floored at NLL_FLOOR (a method's probabilities may hold exact zeros)."""
    known = _known(labels)
    if not known.any():
        return math.nan
    p = np.asarray(probs, dtype=np.float64)[known]
    true = p[np.arange(len(p)), np.asarray(labels)[known]]
    return float(-np.log(np.maximum(true, NLL_FLOOR)).mean())


def max_prob(probs: np.ndarray) -> np.ndarray:
    """The open-set score of each sample: its largest probability [N]."""
    return np.asarray(probs, dtype=np.float64).max(1)


def auroc(scores: np.ndarray, unknown: np.ndarray) -> float:
    """Area under the ROC curve (%) of telling known samples (positives) from unknown ones by
    `scores` (higher = more likely known): the Mann-Whitney statistic, ties counted one half;
    nan without both kinds."""
    s, u = np.asarray(scores, dtype=np.float64), np.asarray(unknown, dtype=bool)
    n_pos, n_neg = int((~u).sum()), int(u.sum())
    if n_pos == 0 or n_neg == 0:
        return math.nan
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s), dtype=np.float64)
    sorted_s = s[order]
    # average ranks over ties (1-based)
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_s)) + 1]
    ends = np.r_[starts[1:], len(s)]
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    u_stat = ranks[~u].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u_stat / (n_pos * n_neg) * 100)


def fpr_at_tpr(scores: np.ndarray, unknown: np.ndarray, tpr: float = TPR_AT) -> float:
    """FPR (%) at `tpr` TPR: the share of unknown samples whose score reaches the threshold that
    accepts at least `tpr` of the known samples (the largest such threshold); nan without both kinds."""
    s, u = np.asarray(scores, dtype=np.float64), np.asarray(unknown, dtype=bool)
    pos, neg = np.sort(s[~u])[::-1], s[u]
    if len(pos) == 0 or len(neg) == 0:
        return math.nan
    threshold = pos[max(0, math.ceil(tpr * len(pos)) - 1)]
    return float((neg >= threshold).mean() * 100)


def halves(pred: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """Accuracy (%) on the first and on the second half of the stream (the middle sample of an odd
    stream goes to the second half): does a method keep adapting?"""
    n = len(pred)
    h = n // 2
    return accuracy(pred[:h], labels[:h]), accuracy(pred[h:], labels[h:])


def order_stats(accuracies: Sequence[float], worst: float = WORST_SHARE) -> dict[str, float]:
    """Over R stream orders' accuracies: mean, sample std (0 for one order), and the mean of the
    worst ceil(worst x R) orders (at least one)."""
    a = np.sort(np.asarray([x for x in accuracies if not math.isnan(x)], dtype=np.float64))
    if len(a) == 0:
        return {"mean": math.nan, "std": math.nan, "worst": math.nan, "orders": 0}
    k = max(1, math.ceil(worst * len(a) - 1e-9))
    return {
        "mean": float(a.mean()),
        "std": float(a.std(ddof=1)) if len(a) > 1 else 0.0,
        "worst": float(a[:k].mean()),
        "orders": int(len(a)),
    }


# ---------------------------------------------------------------------- open streams
def withheld_classes(num_classes: int, seed: int, share: float = 0.5) -> np.ndarray:
    """The classes withheld from the text classifier (sorted): floor(share x C) of them drawn with
    `seed`; a UserError when fewer than two classes would stay known (or none be withheld)."""
    drop = int(math.floor(share * num_classes))
    if num_classes - drop < 2 or drop < 1:
        raise UserError(
            f"withheld-class setting: {num_classes} classes leave {num_classes - drop} known and "
            f"{drop} withheld; it needs at least two known classes and one withheld (a dataset "
            "with >= 3 classes), or drop --open withheld"
        )
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(num_classes, size=drop, replace=False))


def withhold(labels: np.ndarray, num_classes: int, withheld: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(kept class indices [K], labels remapped to 0..K-1 with withheld classes' samples -1)."""
    kept = np.setdiff1d(np.arange(num_classes), withheld)
    remap = np.full(num_classes + 1, -1, dtype=np.int64)  # index -1 (already unknown) stays -1
    remap[kept] = np.arange(len(kept))
    lab = np.asarray(labels, dtype=np.int64)
    return kept, remap[np.where(lab >= 0, lab, num_classes)]


def mix_positions(n_own: int, n_foreign: int, seed: int) -> np.ndarray:
    """Where each sample of a mixed stream comes from: [n_own + n_foreign] indices, own samples
    as 0..n_own-1 in their order, foreign ones as -(1 + j) in theirs, interleaved at random."""
    if n_own < 1:
        raise UserError("mixed-stream setting: the stream has no samples of its own")
    rng = np.random.default_rng(seed)
    foreign = np.zeros(n_own + n_foreign, dtype=bool)
    foreign[rng.choice(n_own + n_foreign, size=n_foreign, replace=False)] = True
    out = np.empty(n_own + n_foreign, dtype=np.int64)
    out[~foreign] = np.arange(n_own)
    out[foreign] = -1 - np.arange(n_foreign)
    return out


def open_set(pred: np.ndarray, probs: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """An open stream's metrics: AUROC and FPR@95 of max probability (unknown = label -1), and
    the accuracy on its known samples."""
    labels = np.asarray(labels)
    known = labels >= 0
    if int(known.sum()) < 1:
        raise UserError("open-set setting: the stream holds no known sample")
    score, unknown = max_prob(probs), ~known
    return {
        "auroc": auroc(score, unknown),
        "fpr95": fpr_at_tpr(score, unknown),
        "known_accuracy": accuracy(pred, labels),
    }
