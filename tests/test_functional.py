"""The paper's equations on tiny hand-computed cases (C=3, d=4)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mstta.engine import cache_rules as rules
from mstta.engine import functional as Fn

E = torch.eye(4)
TEXT = E[:3]


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


@pytest.mark.parametrize(
    "alpha,k,bank,expected",
    [
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
    ],
)
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


def test_negative_mask_is_strict():
    probs = torch.tensor([0.03, 0.031, 0.5, 1.0])
    assert Fn.negative_mask(probs, 0.03, 1.0).tolist() == [0.0, 1.0, 1.0, 0.0]


def test_aggregate_views_keeps_most_confident():
    feats = Fn.normalize(torch.tensor([[1.0, 0, 0, 0], [0, 1.0, 0, 0], [1.0, 1.0, 0, 0]] + [[0, 0, 1.0, 0]] * 7))
    logits = torch.zeros(10, 3)
    logits[1] = torch.tensor([0.0, 9.0, 0.0])  # the only confident view
    f, lg, h, probs = Fn.aggregate_views(feats[None], logits[None], 0.1)  # floor(0.1*10) = 1 view
    assert torch.equal(f[0], feats[1]) and torch.equal(lg[0], logits[1])
    assert h.item() == pytest.approx(Fn.entropy(logits[1]).item(), rel=1e-5)
    assert torch.allclose(probs[0], torch.softmax(logits[1], -1))


def test_ordered_bits_keep_float_order():
    x = torch.cat([torch.tensor([float("-inf"), -0.0, 0.0, float("inf"), 1e-38, -1e-38]), torch.randn(500) * 10])
    key = Fn.ordered_bits(x)
    order = torch.argsort(x, stable=True)
    assert (key[order][1:] >= key[order][:-1]).all()
    assert key[1] == key[2]  # -0.0 == +0.0, as float comparison says


@pytest.mark.parametrize("seed", range(5))
def test_knn_ties_by_age_match_a_sort(seed):
    """Many exact ties (coarse similarities), any age order: the (similarity, older) order."""
    g = torch.Generator().manual_seed(seed)
    sims = torch.randint(-3, 4, (6, 40), generator=g).float() / 4
    sims[:, ::7] = float("-inf")
    age = torch.randperm(40, generator=g)
    for k in (1, 3, 8):
        got = Fn.knn_indices(sims, k, age)
        for r in range(6):
            want = sorted(range(40), key=lambda j: (-sims[r, j].item(), age[j].item()))[:k]
            assert got[r].tolist() == want


@pytest.mark.parametrize("seed", range(5))
def test_host_ties_top_k_picks_the_same_sets(seed):
    """The replay's float top-k with the tie check: the same neighbour sets as the exact key,
    with many exact ties, -inf columns and -0.0 against +0.0."""
    g = torch.Generator().manual_seed(seed)
    sims = torch.randint(-3, 4, (50, 40), generator=g).float() / 4
    sims[:, ::7] = float("-inf")
    sims[:5, 1:] = float("-inf")  # rows with fewer usable columns than k
    sims[sims == 0] = torch.where(torch.rand(int((sims == 0).sum()), generator=g) < 0.5, -0.0, 0.0)
    sims[10:20] += torch.rand(10, 40, generator=g)  # rows without ties
    for k in (1, 2, 3, 8, 39, 40, 45):  # 40 = every column
        fast, exact = Fn.knn_indices_host_ties(sims, k), Fn.knn_indices(sims, k)
        assert [sorted(r) for r in fast.tolist()] == [sorted(r) for r in exact.tolist()]


def test_mean_shift_step_masks_and_leaves_a_lonely_row():
    raw = torch.stack([E[1], 2 * E[2], E[3]])  # raw features, not unit (confident mode)
    q = Fn.normalize(torch.tensor([[0.0, 0.1, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]]))
    bias = torch.tensor([[0.0, 0.0, float("-inf")], [float("-inf")] * 3])
    out = Fn.mean_shift_step(q, Fn.normalize(raw), raw.norm(dim=-1), None, 1, 0.5, bias)
    assert torch.allclose(out[0], Fn.normalize(0.5 * q[0] + 0.5 * 2 * E[2]))  # nearest by cosine, raw sum
    assert torch.equal(out[1], q[1])  # no usable neighbour


def test_batched_mean_shift_equals_one_stream_at_a_time():
    """Streams [S, n, d] against their own banks [S, M, d] give each stream's own result."""
    g = torch.Generator().manual_seed(1)
    q, raw = Fn.normalize(torch.randn(3, 2, 8, generator=g)), torch.randn(3, 6, 8, generator=g)
    bias = torch.zeros(3, 1, 6)
    bias[1, 0, 4:] = float("-inf")  # stream 1 holds only 4 rows
    age = torch.arange(6).expand(3, 1, 6)
    out = Fn.mean_shift_step(q, Fn.normalize(raw), raw.norm(dim=-1), age, 2, 0.7, bias)
    for s in range(3):
        n = 4 if s == 1 else 6
        one = Fn.mean_shift_step(q[s], Fn.normalize(raw[s, :n]), raw[s, :n].norm(dim=-1), None, 2, 0.7)
        torch.testing.assert_close(out[s], one)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_bank_similarities_accumulate_in_float32(dtype):
    """The query rounded to the bank's dtype, products summed in float32: equal to widening both."""
    g = torch.Generator().manual_seed(2)
    q, bank = Fn.normalize(torch.randn(5, 64, generator=g)), Fn.normalize(torch.randn(30, 64, generator=g)).to(dtype)
    sims = Fn.similarities(q, bank)
    assert sims.dtype == torch.float32
    torch.testing.assert_close(sims, q.to(dtype).double() @ bank.double().T, rtol=0, atol=1e-6, check_dtype=False)
    assert (sims - q @ bank.float().T).abs().max() > 0  # the query really was rounded
    bias = torch.zeros(30)
    bias[3] = float("-inf")
    assert torch.isneginf(Fn.similarities(q, bank, bias)[:, 3]).all()


@pytest.mark.parametrize("kernel", ["exp", "linear"])
def test_fused_cache_weights_equal_the_formula(kernel):
    g = torch.Generator().manual_seed(0)
    q = Fn.normalize(torch.randn(3, 8, generator=g))
    keys = Fn.normalize(torch.randn(5, 8, generator=g))
    live = torch.tensor([True, False, True, True, False])
    a, beta = 2.5, 4.0
    bias = torch.where(live, Fn.log_weight(a, beta), float("-inf"))
    s = q @ keys.T
    formula = a * (torch.exp(-beta * (1 - s)) if kernel == "exp" else s) * live
    assert torch.allclose(Fn.cache_weights(q, keys, bias, beta, kernel, a), formula, atol=1e-6)


def test_final_logits_eq13_and_lambda_zero():
    clip, pos, neg = torch.tensor([1.0, 2.0]), torch.tensor([0.5, 0.0]), torch.tensor([0.0, 0.25])
    assert torch.equal(Fn.final_logits(clip, pos, neg, 2.0), torch.tensor([2.0, 1.5]))
    assert torch.equal(Fn.final_logits(clip, pos, None, 0.0), clip)


def test_form_queries_by_view_mode():
    x = Fn.normalize(torch.randn(2, 10, 4))
    f, clip, h, probs = Fn.form_queries(x, TEXT, 10.0, "original", 0.2)
    assert torch.allclose(f, x[:, 0]) and torch.allclose(clip, 10.0 * x[:, 0] @ TEXT.T)
    assert torch.allclose(h, Fn.entropy(clip)) and torch.allclose(probs, torch.softmax(clip, -1))
    f2, clip2, _, _ = Fn.form_queries(x, TEXT, 10.0, "confident", 0.2)  # 2 of 10 views
    keep = torch.argsort(Fn.entropy(10.0 * x[0] @ TEXT.T), stable=True)[:2]
    assert torch.allclose(f2[0], x[0, keep].mean(0)) and torch.allclose(clip2[0], (10.0 * x[0, keep] @ TEXT.T).mean(0))


@pytest.mark.parametrize("seed", range(20))
def test_cache_rules_host_and_device_agree(seed):
    """The replay scan's host rules and the engine's tensor rules pick the same slot."""
    rng = np.random.default_rng(seed)
    ent = rng.choice([0.1, 0.5, 0.5, 0.9, np.inf], size=(4, 3)).astype(np.float32)
    time = rng.permutation(12).reshape(4, 3).astype(np.int64)
    time[np.isinf(ent)] = rules.EMPTY_TIME
    h = rng.choice([0.05, 0.5, 0.9, 1.0], size=4).astype(np.float32)
    j, ok = rules.entropy_slot_t(torch.from_numpy(ent), torch.from_numpy(time), torch.from_numpy(h))
    jf, _ = rules.fifo_slot_t(torch.from_numpy(time))
    gate = rules.entropy_gate_t(torch.from_numpy(h), 5, 0.2, 0.5)
    for r in range(4):
        host = rules.entropy_slot(ent[r].astype(np.float64), time[r], float(h[r]))
        assert (int(j[r]) if ok[r] else -1) == host
        assert (
            rules.entropy_slot(ent[r].astype(np.float64).tolist(), time[r].tolist(), float(h[r])) == host
        )  # the scan's lists
        assert int(jf[r]) == rules.fifo_slot(time[r]) == rules.fifo_slot(time[r].tolist())
        assert bool(gate[r]) == rules.entropy_gate(float(h[r]), 5, 0.2, 0.5)
