"""The paper's equations on tiny hand-computed cases (C=3, d=4)."""
from __future__ import annotations

import math

import pytest
import torch

from mstta import functional as Fn

E = torch.eye(4)


def test_clip_logits_eq1():
    f = torch.tensor([[0.6, 0.8, 0.0, 0.0]])
    text = E[:3]
    assert torch.allclose(Fn.clip_logits(f, text, 100.0), torch.tensor([[60.0, 80.0, 0.0]]))


def test_entropy_in_nats():
    logits = torch.tensor([1.0, 0.0, 0.0])
    p = [math.e / (math.e + 2), 1 / (math.e + 2), 1 / (math.e + 2)]
    expected = -sum(x * math.log(x) for x in p)
    assert Fn.entropy(logits).item() == pytest.approx(expected, rel=1e-6)
    assert Fn.entropy(torch.zeros(3)).item() == pytest.approx(math.log(3), rel=1e-6)


@pytest.mark.parametrize("alpha,k,bank,expected", [
    # one neighbour e1: z = norm(0.2 f + 0.8 e1) with f = e1 -> e1
    (0.8, 1, [E[0]], E[0]),
    # f = e1, neighbours e2 (k=1): z = norm(0.2 e1 + 0.8 e2)
    (0.8, 1, [E[1]], torch.tensor([0.2, 0.8, 0, 0]) / math.hypot(0.2, 0.8)),
    # k=2, bank e2, e3: z = norm(0.5 e1 + 0.25 e2 + 0.25 e3)
    (0.5, 2, [E[1], E[2]], torch.tensor([0.5, 0.25, 0.25, 0]) / math.sqrt(0.375)),
    # k larger than the bank: m = |M| = 1 -> alpha/1
    (0.5, 4, [E[1]], torch.tensor([0.5, 0.5, 0, 0]) / math.sqrt(0.5)),
    # alpha = 0: z = f
    (0.0, 2, [E[1], E[2]], E[0]),
])
def test_mean_shift_eq10(alpha, k, bank, expected):
    f = E[0:1]
    bank = torch.stack(bank)
    idx = Fn.knn_indices(f @ bank.T, k)
    z = Fn.mean_shift(f, bank[idx].sum(1), idx.shape[1], alpha)
    assert torch.allclose(z[0], expected, atol=1e-6)
    assert z.norm().item() == pytest.approx(1.0, abs=1e-6)


def test_paper_form_equals_weighted_form():
    """Alg. 1's (1-a-a/k) f + a/k sum_{N(f)} with f in N(f) equals (1-a) f + a/k sum_kNN."""
    g = torch.Generator().manual_seed(0)
    f = Fn.normalize(torch.randn(1, 4, generator=g))
    nn = Fn.normalize(torch.randn(2, 4, generator=g))
    a, k = 0.8, 2
    paper = Fn.normalize((1 - a - a / k) * f + a / k * (f + nn.sum(0)))
    ours = Fn.mean_shift(f, nn.sum(0, keepdim=True), k, a)
    assert torch.allclose(paper, ours, atol=1e-6)


def test_knn_ties_pick_earlier_index():
    sims = torch.tensor([[0.5, 0.9, 0.5, 0.5]])
    assert sorted(Fn.knn_indices(sims, 2)[0].tolist()) == [0, 1]
    # with an explicit order (ring buffer): column 2 is the oldest
    order = torch.tensor([5, 6, 1, 7])
    assert sorted(Fn.knn_indices(sims, 2, order)[0].tolist()) == [1, 2]


def test_knn_masked_columns_never_beat_valid_ones():
    sims = torch.tensor([[0.1, float("-inf"), -0.3]])
    assert sorted(Fn.knn_indices(sims, 2)[0].tolist()) == [0, 2]


def test_cache_affinity_kernels():
    q = torch.tensor([1.0, 0.0, 0.0, 0.0])
    keys = torch.stack([E[0], E[1]])
    assert torch.allclose(Fn.cache_affinity(q, keys, "exp", 5.0), torch.tensor([1.0, math.exp(-5.0)]))
    assert torch.allclose(Fn.cache_affinity(q, keys, "linear", 5.0), torch.tensor([1.0, 0.0]))


def test_negative_mask_is_strict():
    probs = torch.tensor([0.03, 0.031, 0.5, 1.0])
    assert Fn.negative_mask(probs, 0.03, 1.0).tolist() == [0.0, 1.0, 1.0, 0.0]


def test_aggregate_views_keeps_most_confident():
    feats = Fn.normalize(torch.tensor([[1.0, 0, 0, 0], [0, 1.0, 0, 0], [1.0, 1.0, 0, 0]] + [[0, 0, 1.0, 0]] * 7))
    logits = torch.zeros(10, 3)
    logits[1] = torch.tensor([0.0, 9.0, 0.0])  # the only confident view
    f, lg, h, probs = Fn.aggregate_views(feats, logits, 0.1)  # floor(0.1*10) = 1 view
    assert torch.equal(f, feats[1]) and torch.equal(lg, logits[1])
    assert h.item() == pytest.approx(Fn.entropy(logits[1]).item(), rel=1e-5)
    assert torch.allclose(probs, torch.softmax(logits[1], -1))
