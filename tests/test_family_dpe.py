"""DPE (mstta.engine.families.dpe) against an independent float64 reference of its official code
(tests/reference_dpe.py: autograd + torch.optim.AdamW), and behind Engine/MultiEngine/replay."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from reference_dpe import ReferenceDPE, avg_entropy, info_nce
from synthetic import make_stream

from mstta import Engine, MultiEngine, UserError, get_method, replay
from mstta.bench.config import load_dataset_config
from mstta.engine.config import EngineConfig
from mstta.engine.families import dpe

# zhangce01/DPE-CLIP @ fecae5a5 configs/*.yaml, read by hand: (alpha, beta, lr text = image, align);
# shot_capacity 3 in every file; ImageNet-A alone predicts from its confident views (main_dpe.py).
OFFICIAL = {
    "imagenet": (6.0, 5.0, 0.0006, 0.5),
    "imagenet_a": (6.0, 5.0, 0.0003, 2.5),
    "imagenet_v2": (3.0, 8.0, 0.0005, 0.5),
    "imagenet_r": (3.0, 8.0, 0.0006, 0.0),
    "imagenet_sketch": (7, 7.45, 0.0006, 0.2),
    "caltech101": (15.0, 5.0, 0.0006, 0.2),
    "dtd": (6.0, 3.0, 0.0006, 0.2),
    "eurosat": (3.0, 8.0, 0.00005, 0.2),
    "fgvc_aircraft": (6.0, 2.0, 0.0006, 0.2),
    "food101": (3.0, 1.0, 0.0002, 0.2),
    "oxford_flowers": (2.5, 5.0, 0.0001, 0.2),
    "oxford_pets": (4.0, 7.0, 0.00005, 0.2),
    "stanford_cars": (3.0, 7.0, 0.0001, 1.5),
    "sun397": (6.0, 3.0, 0.0002, 0.2),
    "ucf101": (9.0, 8.0, 0.0004, 0.2),
}
LR = 0.02  # ~50x the official step, so a wrong gradient or step moves scores far beyond the tolerance
STREAMS = {0: "imagenet", 1: "imagenet_a", 2: "imagenet_r"}  # align 0.5; 2.5 + confident inference; 0


def params(dataset: str, **over) -> dpe.Params:
    return dpe.Params(**{**dpe.DATASET_PARAMS[dataset], "lr_text": LR, "lr_image": LR, **over})


def stream(C: int, V: int, seed: int, n: int, d: int = 32):
    s = make_stream(n=n, classes=C, dim=d, views=V, seed=seed)
    x = s["features"].astype(np.float64)
    return (x if V > 1 else x[:, None]), s["text"].astype(np.float64)


def compare(x, text, p: dpe.Params, method="dpe", ms=None, tol=1e-6, **cfg):
    """Step the engine (float64 classifier) and the reference side by side; returns both."""
    ref = ReferenceDPE(text, dataclasses.asdict(p), ms=ms)
    eng = Engine(torch.from_numpy(text), method, EngineConfig(view_mode="confident", dpe=p, **cfg))
    for i, xi in enumerate(x):
        r, o = ref.step(xi), eng.step(torch.from_numpy(xi))
        assert o.prediction == r["pred"], f"sample {i}"
        for got, want in (
            (o.logits, r["scores"]),
            (o.clip_logits, r["clip"]),
            (o.feature, r["feature"]),
            (o.probs, torch.softmax(r["scores"], -1)),
        ):
            assert float((got - want).abs().max()) < tol, f"sample {i}"
        assert abs(o.entropy - r["entropy"]) < tol
    return eng, ref


@pytest.mark.parametrize("C,n", [(2, 16), (10, 16), (1000, 10)])
@pytest.mark.parametrize("V", [1, 64])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_agrees_with_the_reference(C, n, V, seed):
    x, text = stream(C, V, seed, n)
    eng, ref = compare(x, text, params(STREAMS[seed]))
    assert int(eng.states[0]["num_avg"]) == ref.num_avg


def test_official_learning_rates_and_a_global_update_that_sometimes_skips():
    """Official imagenet values; the synthetic stream is far more confident than CLIP on real
    images, so a lower threshold makes the prototype evolution skip about half the samples."""
    s = make_stream(n=24, classes=10, dim=32, views=64, seed=3, noise=3.0, text_noise=3.0)
    x, text = s["features"].astype(np.float64), s["text"].astype(np.float64)
    eng, ref = compare(x, text, dpe.Params(**dpe.DATASET_PARAMS["imagenet"], threshold=0.001))
    assert 5 < ref.num_avg < len(x) - 5  # both branches of the prototype evolution ran


@pytest.mark.parametrize("V,tol", [(1, 1e-6), (64, 1e-6)])
def test_ms_agrees_with_the_reference(V, tol):
    x, text = stream(10, V, 4, 20)
    ms = dict(k=3, alpha=0.6, steps=1, bank_size=7)
    compare(x, text, params("caltech101"), "dpe+ms", ms, tol=tol, k=3, alpha=0.6, bank_size=7)


def test_the_residual_step_is_visible_at_the_tolerance():
    """With lr = 0 the engine parts from the reference at lr = LR by far more than 1e-6."""
    x, text = stream(10, 1, 0, 10)
    with pytest.raises(AssertionError):
        ref = ReferenceDPE(text, dataclasses.asdict(params("imagenet")))
        eng = Engine(
            torch.from_numpy(text),
            "dpe",
            EngineConfig(view_mode="confident", dpe=params("imagenet", lr_text=0, lr_image=0)),
        )
        for xi in x:
            assert float((eng.step(torch.from_numpy(xi)).logits - ref.step(xi)["scores"]).abs().max()) < 1e-6


def test_ties_in_the_logits_and_in_the_cache():
    """Text rows 4 and 5 equal (argmax takes the first); X2 and X3 have the same logits (bit for bit)
    and so the same entropy but differ outside the text's span: sorted() keeps X3 after X2, so a
    lower-entropy X4 replaces X3, not X2. W_g stays fixed (threshold 0)."""
    C, d = 6, 16
    text = np.eye(C, d)
    text[5] = text[4]
    g = np.random.default_rng(0)

    def feat(logit_part, rest):
        v = np.zeros(d)
        v[:C], v[C:] = logit_part, rest
        return v / np.linalg.norm(v)

    rest = g.standard_normal(d - C) * 0.3
    x1 = feat([0.9, 0.1, 0, 0, 0, 0], rest)
    x2 = feat([0.5, 0.4, 0, 0, 0, 0], rest)
    x3 = feat([0.5, 0.4, 0, 0, 0, 0], rest[::-1].copy())
    x4 = feat([0.6, 0.4, 0, 0, 0, 0], rest)
    tie = feat([0, 0, 0, 0, 0.5, 0.5], rest)
    others = [feat(np.r_[-1.0, g.standard_normal(C - 1)], g.standard_normal(d - C)) for _ in range(6)]  # not class 0
    x = np.stack([x1, x2, tie, x3, others[0], x4, tie, *others[1:], x3])[:, None]  # the last x3 ties x2: kept out
    eng, ref = compare(x, text, params("imagenet", threshold=0.0))
    assert ref.num_avg == 0 and np.allclose([it[0][0].numpy() for it in ref.pos_cache[0]], [x1, x4, x2], atol=1e-12)
    assert 5 not in ref.pos_cache  # the tied logits went to class 4
    feats = eng.states[0]["feats"][0].numpy()
    assert np.allclose(feats, [x1, x4, x2], atol=1e-12)


def test_residual_gradients_equal_autograd():
    torch.manual_seed(0)
    C, d, m = 12, 16, 5
    wg = torch.randn(C, d, dtype=torch.float64) * 0.3 + 0.1
    f = F.normalize(torch.randn(d, dtype=torch.float64), dim=0) * 0.9
    q = F.normalize(torch.randn(d, dtype=torch.float64), dim=0)
    keys = torch.randn(m, d, dtype=torch.float64) * 0.5
    cls = torch.tensor([0, 2, 3, 7, 11])
    p = dpe.Params(align=0.7)
    rt = torch.zeros(C, d, dtype=torch.float64, requires_grad=True)
    rk = torch.zeros(m, d, dtype=torch.float64, requires_grad=True)
    w, k = F.normalize(wg + rt, dim=-1), F.normalize(keys + rk, dim=-1)
    final = (100 * w @ f).index_add(0, cls, p.alpha * torch.exp(-(p.beta - p.beta * (k @ q))))
    (avg_entropy(final[None]) + p.align * info_nce(k, w[cls], p.tau)).backward()
    wnorm, knorm = wg.norm(dim=-1), keys.norm(dim=-1)
    gt, gk = dpe.residual_grads(f, q, 100 * (wg @ f) / wnorm, wg, wnorm, cls, keys, knorm, p, 100.0)
    assert torch.allclose(gt, rt.grad, rtol=0, atol=1e-12) and torch.allclose(gk, rk.grad, rtol=0, atol=1e-12)


def test_closed_form_step_equals_torch_adamw():
    g = torch.randn(50, 7, dtype=torch.float64) * torch.logspace(-6, 1, 7, dtype=torch.float64)
    g[0, :3] = 0.0
    r = torch.nn.Parameter(torch.zeros_like(g))
    opt = torch.optim.AdamW([{"params": [r], "lr": 6e-4, "eps": 1e-3, "weight_decay": 1e-1}])
    r.grad = g.clone()
    opt.step()
    base = torch.randn_like(g)
    assert torch.allclose(dpe.adamw_first_step(base, g, 6e-4, 1e-3), base + r.detach(), rtol=0, atol=1e-15)


def test_replay_equals_stepping_the_engine():
    x, text = stream(10, 64, 5, 20)
    x32, t32 = torch.from_numpy(x).float(), torch.from_numpy(text).float()
    cfg = EngineConfig(view_mode="confident", dpe=params("imagenet_a"))
    out = replay(x32, t32, "dpe", cfg, keep_probs=True)
    eng = Engine(t32, "dpe", cfg)
    rows = [eng.step(xi) for xi in x32]
    assert out.predictions.tolist() == [r.prediction for r in rows]
    assert np.allclose(out.probs, torch.stack([r.probs for r in rows]).numpy(), atol=1e-6)


@pytest.mark.parametrize("method", ["dpe", "dpe+ms"])
def test_multi_engine_equals_two_engines(method):
    (xa, text), (xb, _) = stream(10, 8, 6, 12), stream(10, 8, 6, 24)
    xb = xb[12:]
    t = torch.from_numpy(text)
    cfg = EngineConfig(view_mode="confident", dpe=params("imagenet"))
    multi = MultiEngine(t, method, cfg, streams=2)
    engines = [Engine(t, method, cfg), Engine(t, method, cfg)]
    for a, b in zip(xa, xb):
        res = multi.step(torch.from_numpy(np.stack([a, b])))
        for s, xi in enumerate((a, b)):
            assert torch.equal(res.logits[s], engines[s].step(torch.from_numpy(xi)).logits)


@pytest.mark.parametrize("V", [1, 64])
def test_ms_at_alpha_zero_is_the_base_row(V):
    x, text = stream(10, V, 7, 20)
    t = torch.from_numpy(text)
    base = Engine(t, "dpe", EngineConfig(view_mode="confident", dpe=params("imagenet")))
    ms = Engine(t, "dpe+ms", EngineConfig(view_mode="confident", dpe=params("imagenet"), alpha=0.0))
    for xi in x:
        a, b = base.step(torch.from_numpy(xi)), ms.step(torch.from_numpy(xi))
        assert torch.equal(a.logits, b.logits) and torch.equal(a.probs, b.probs)


def test_params_and_dataset_params_are_the_official_values():
    assert dataclasses.asdict(dpe.Params()) == dict(
        alpha=6.0,
        beta=5.0,
        capacity=3,
        lr_text=6e-4,
        lr_image=6e-4,
        align=0.5,
        tau=0.01,
        eps=1e-3,
        ratio=0.1,
        threshold=0.1,
        infer_confident=False,
    )
    assert set(dpe.DATASET_PARAMS) == set(OFFICIAL)
    for ds, (alpha, beta, lr, align) in OFFICIAL.items():
        want = dict(alpha=alpha, beta=beta, lr_text=lr, lr_image=lr, align=align)
        if ds == "imagenet_a":
            want["infer_confident"] = True
        assert dpe.DATASET_PARAMS[ds] == want, ds
        dpe.Params(**dpe.DATASET_PARAMS[ds])


def test_rows_are_marked_not_training_free():
    for name, ms in (("dpe", False), ("dpe+ms", True)):
        m = get_method(name)
        assert m.family == "dpe" and m.mean_shift == ms and not m.training_free
        assert "not training-free" in m.marks


@pytest.mark.parametrize("C,d,V", [(10, 32, 64), (1000, 64, 1)])
def test_state_never_exceeds_state_bytes(C, d, V):
    x, text = stream(C, V, 8, 25, d)
    cfg = EngineConfig(view_mode="confident", dpe=params("imagenet"))
    eng = Engine(torch.from_numpy(text).float(), "dpe", cfg)
    bound = dpe.state_bytes(C, d, cfg.dpe)
    for xi in torch.from_numpy(x).float():
        eng.step(xi)
        assert sum(t.numel() * t.element_size() for t in eng.states[0].values()) <= bound
    assert dpe.state_bytes(1000, 512, dpe.Params()) == 10_256_008


@pytest.mark.parametrize(
    "key,value",
    [
        ("lr_text", -1e-3),
        ("lr_image", 2.0),
        ("tau", 0.0),
        ("eps", 0.0),
        ("capacity", 0),
        ("alpha", float("nan")),
        ("ratio", 1.5),
        ("threshold", -0.1),
        ("align", float("inf")),
        ("infer_confident", "yes"),
    ],
)
def test_bad_values_name_the_key(key, value):
    with pytest.raises(UserError, match=f"'{key}'"):
        dpe.Params(**{key: value})
    with pytest.raises(UserError, match=f"'{key}'"):
        load_dataset_config(overrides={f"dpe.{key}": value})


@pytest.mark.parametrize("V", [1, 2, 5, 9, 10])
def test_few_views_give_finite_outputs(V):
    x, text = stream(10, max(V, 2), 9, 8)
    eng = Engine(torch.from_numpy(text).float(), "dpe", EngineConfig(view_mode="confident", dpe=params("imagenet_a")))
    for xi in torch.from_numpy(x[:, :V]).float():
        r = eng.step(xi)
        for t in (r.logits, r.clip_logits, r.probs, r.feature, r.entropy_tensor):
            assert torch.isfinite(t).all()


def test_reset_and_state_dict():
    x, text = stream(10, 8, 10, 16)
    t, xs = torch.from_numpy(text), torch.from_numpy(x)
    eng = Engine(t, "dpe+ms", EngineConfig(view_mode="confident", dpe=params("imagenet")))
    first = [eng.step(xi).logits for xi in xs[:8]]
    saved = eng.state_dict()
    later = [eng.step(xi).logits for xi in xs[8:]]
    eng.load_state_dict(saved)
    assert all(torch.equal(a, eng.step(xi).logits) for a, xi in zip(later, xs[8:]))
    eng.reset()
    assert all(torch.equal(a, eng.step(xi).logits) for a, xi in zip(first, xs[:8]))
