"""mstta.bench.metrics: each metric against a hand-computed value or a brute-force definition."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mstta.bench import metrics as M
from mstta.errors import UserError


def _probs(conf: list[float], pred: list[int], classes: int = 2) -> np.ndarray:
    """Rows whose max is `conf` at class `pred` (the rest spread evenly)."""
    p = np.zeros((len(conf), classes))
    for i, (c, k) in enumerate(zip(conf, pred)):
        p[i] = (1 - c) / (classes - 1)
        p[i, k] = c
    return p


def test_accuracy_ignores_unknown_samples():
    assert M.accuracy(np.array([0, 1, 1, 0]), np.array([0, 1, -1, 1])) == pytest.approx(200 / 3)
    assert math.isnan(M.accuracy(np.array([0]), np.array([-1])))


@pytest.mark.parametrize(
    "conf, pred, labels, bins, want",
    [
        ([0.8] * 5, [0] * 5, [0, 0, 0, 0, 1], 20, 0.0),  # 80% confident, 80% right: calibrated
        ([1.0] * 4, [0] * 4, [0, 0, 1, 1], 20, 50.0),  # always sure, right half the time
        ([0.6, 0.9], [0, 0], [1, 0], 20, (0.6 + 0.1) / 2 * 100),  # two bins, each |acc - conf|
        ([0.6, 0.9], [0, 0], [1, 0], 1, abs(0.5 - 0.75) * 100),  # one bin: mean gap only
    ],
)
def test_ece(conf, pred, labels, bins, want):
    assert M.ece(_probs(conf, pred), np.array(labels), bins) == pytest.approx(want)


def test_ece_skips_unknown_and_checks_bins():
    p = _probs([1.0, 1.0], [0, 0])
    assert M.ece(p, np.array([0, -1])) == pytest.approx(0.0)
    for bad in (0, -3, 10**6, 2.5, True):
        with pytest.raises(UserError, match="--ece-bins"):
            M.ece(p, np.array([0, 0]), bad)


def test_nll_floors_zero_probabilities():
    p = np.array([[0.5, 0.5], [1.0, 0.0]])
    assert M.nll(p, np.array([0, -1])) == pytest.approx(math.log(2))
    assert M.nll(p, np.array([1, 1])) == pytest.approx((math.log(2) - math.log(M.NLL_FLOOR)) / 2)


def _auroc_brute(s, u):
    pos, neg = s[~u], s[u]
    return 100 * np.mean([(a > b) + 0.5 * (a == b) for a in pos for b in neg])


@pytest.mark.parametrize("seed", range(4))
def test_auroc_equals_pairwise_definition(seed):
    g = np.random.default_rng(seed)
    s = g.integers(0, 6, 40) / 5.0  # many ties
    u = g.random(40) < 0.4
    assert M.auroc(s, u) == pytest.approx(_auroc_brute(s, u))


def test_auroc_extremes_and_missing_kind():
    s, u = np.array([0.9, 0.8, 0.2, 0.1]), np.array([False, False, True, True])
    assert M.auroc(s, u) == 100.0 and M.auroc(-s, u) == 0.0 and M.auroc(np.ones(4), u) == 50.0
    assert math.isnan(M.auroc(s, np.zeros(4, bool)))


def test_fpr_at_95_tpr():
    known = np.arange(20, 0, -1) / 20  # 1.0 .. 0.05: accepting 19 of 20 (95%) needs 0.1
    unknown = np.array([0.5, 0.1, 0.09, 0.0])  # two reach it
    s = np.r_[known, unknown]
    u = np.r_[np.zeros(20, bool), np.ones(4, bool)]
    assert M.fpr_at_tpr(s, u) == pytest.approx(50.0)


def test_halves_and_order_stats():
    assert M.halves(np.array([0, 0, 1, 1, 1]), np.array([0, 1, 1, 1, 0])) == pytest.approx((50.0, 200 / 3))
    st = M.order_stats([90, 80, 70, 60, 50, 40, 30, 20, 10, 0])
    assert st["mean"] == 45 and st["worst"] == 0 and st["orders"] == 10
    assert M.order_stats(list(range(20)))["worst"] == 0.5  # ceil(10% of 20) = 2 worst
    assert M.order_stats([70.0]) == {"mean": 70.0, "std": 0.0, "worst": 70.0, "orders": 1}


@pytest.mark.parametrize("classes, ok", [(2, False), (3, True), (10, True), (1000, True)])
def test_withheld_needs_two_known_classes(classes, ok):
    if not ok:
        with pytest.raises(UserError, match="at least two known classes"):
            M.withheld_classes(classes, 0)
        return
    w = M.withheld_classes(classes, 3)
    assert len(w) == classes // 2 and np.array_equal(w, M.withheld_classes(classes, 3)) and len(set(w)) == len(w)


def test_withhold_remaps_labels():
    kept, lab = M.withhold(np.array([0, 1, 2, 3, -1]), 4, np.array([1, 3]))
    assert kept.tolist() == [0, 2] and lab.tolist() == [0, -1, 1, -1, -1]


def test_mix_positions_keep_both_orders():
    pos = M.mix_positions(10, 5, 1)
    assert len(pos) == 15 and pos[pos >= 0].tolist() == list(range(10))
    assert (-1 - pos[pos < 0]).tolist() == list(range(5))
    assert not np.array_equal(pos, M.mix_positions(10, 5, 2))


def test_open_set_metrics():
    probs = _probs([0.9, 0.8, 0.6, 0.55], [0, 1, 0, 1])
    got = M.open_set(np.array([0, 1, 0, 1]), probs, np.array([0, 0, -1, -1]))
    assert got["auroc"] == 100.0 and got["fpr95"] == 0.0 and got["known_accuracy"] == 50.0
    with pytest.raises(UserError, match="no known sample"):
        M.open_set(np.array([0]), probs[:1], np.array([-1]))
