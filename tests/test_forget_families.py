"""Forgetting for DMN-ZS, DPE, BCA and OnZeta (issue 29): each rule against its independent float64
reference (tests/reference_forget_families.py) on streams with a scene cut, with and without MS,
100% of predictions; the rule changes something; weight 0 is the memory's own rule; replay equals
the steps; a resumed stream equals an uninterrupted one."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import reference_bca
import reference_forget_families as ref
import reference_onzeta
import test_forget
import torch
import torch.nn.functional as F
from helpers_cli import run_bench
from helpers_family import HOST_READS
from test_forget import cut_stream

from mstta import Engine, EngineConfig, UserError, replay
from mstta.engine import slot_forget
from mstta.engine.families import bca, bca_fade, dmn, dota, dpe, onzeta, onzeta_fade
from mstta.engine.forget import ForgetConfig
from mstta.engine.slot_forget import RULE_KEY, SlotRule, ages
from mstta.features.format import save_features

N, CUT, HORIZON, IDLE = 120, 60, 8, 10
DPE_N = 80
RULES = {"timeliness": dict(rule="timeliness", horizon=HORIZON), "idle": dict(rule="idle", idle=IDLE)}
SHIFT = dict(k=2, alpha=0.5)  # the +ms rows' kNN mean shift (EngineConfig k, alpha)


def _stream(views=1, n=N, cut=CUT, seed=11):
    """(features [n, V, d], text) in float64, unit rows (the engine's path that the references check)."""
    f, t = cut_stream(n=n, cuts=(cut,), views=views, seed=seed)
    f = f if f.dim() == 3 else f[:, None]
    return F.normalize(f.double(), dim=-1), F.normalize(t.double(), dim=-1)


def _steps(engine, f):
    return torch.stack([engine.step(x).logits for x in f]).numpy()


def _check(got, want, tol):
    assert np.array_equal(got.argmax(1), want.argmax(1))  # 100% of predictions
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)


def _never_differs(method, cfg, f, t, got, cut=CUT, **kw):
    """The rule did something after the cut: the never-forgetting engine predicts otherwise."""
    never = _steps(Engine(t, method, dataclasses.replace(cfg, forget=ForgetConfig()), **kw), f)
    assert (never[cut:].argmax(1) != got[cut:].argmax(1)).any()


@pytest.mark.parametrize("ms", [False, True])
@pytest.mark.parametrize("rule", list(RULES))
def test_dmn_rules_equal_the_reference(rule, ms):
    f, t = _stream(views=4)
    method = "dmn-zs+ms" if ms else "dmn-zs"
    p = dmn.Params(memory_size=3, selection_p=0.5)
    cfg = EngineConfig(dmn=p, forget=ForgetConfig(**RULES[rule]), **SHIFT)
    got = _steps(Engine(t, method, cfg), f)
    kw = dict(memory_size=3, selection_p=0.5, beta=p.beta, weight=p.weight, logit_scale=cfg.logit_scale)
    kw.update(mean_shift=ms, k=cfg.k, alpha=cfg.alpha, bank_size=cfg.bank_size)
    _check(got, ref.dmn(f.numpy(), t.numpy(), rule, horizon=HORIZON, idle=IDLE, **kw), 1e-9)
    _never_differs(method, cfg, f, t, got)
    assert np.array_equal(replay(f, t, method, cfg).predictions, got.argmax(1))


@pytest.mark.parametrize("ms", [False, True])
@pytest.mark.parametrize("rule", list(RULES))
def test_dpe_rules_equal_the_reference(rule, ms):
    f, t = _stream(
        views=1, n=DPE_N, cut=DPE_N // 2
    )  # the reference takes an autograd AdamW step per sample: a short stream
    method = "dpe+ms" if ms else "dpe"
    p = dpe.Params(capacity=2, lr_text=0.02, lr_image=0.02)
    cfg = EngineConfig(dpe=p, forget=ForgetConfig(**RULES[rule]), bank_size=None, **SHIFT)
    got = _steps(Engine(t, method, cfg), f)
    shift = dict(k=cfg.k, alpha=cfg.alpha, steps=cfg.ms_steps, bank_size=None) if ms else None
    r = ref.DPEForget(t.numpy(), dataclasses.asdict(p), rule, horizon=HORIZON, idle=IDLE, ms=shift)
    want = np.stack([r.step(x.numpy())["scores"].numpy() for x in f])
    _check(got, want, 1e-6)
    _never_differs(method, cfg, f, t, got, cut=DPE_N // 2)
    assert np.array_equal(replay(f, t, method, cfg).predictions, got.argmax(1))


def test_dpe_idle_at_beta_zero_uses_the_first_live_entry():
    """The use mark reads the largest cosine (the kernel weight exp(-beta (1 - cos)) is increasing in
    it); at beta = 0 every weight is 1 and the reference's argmax takes the first live entry."""
    f, t = _stream(views=1, n=DPE_N, cut=DPE_N // 2)
    p = dpe.Params(capacity=2, beta=0.0, lr_text=0.02, lr_image=0.02)
    cfg = EngineConfig(dpe=p, forget=ForgetConfig(rule="idle", idle=4), bank_size=None, **SHIFT)
    got = _steps(Engine(t, "dpe", cfg), f)
    r = ref.DPEForget(t.numpy(), dataclasses.asdict(p), "idle", horizon=HORIZON, idle=4, ms=None)
    _check(got, np.stack([r.step(x.numpy())["scores"].numpy() for x in f]), 1e-6)


@pytest.mark.parametrize("ms", [False, True])
def test_bca_timeliness_equals_the_reference(ms):
    """BCA at a centre prior weight of 200 (the port's 20,000 moves a centre ~1/20,000 per sample: the
    decay's arithmetic is checked where it shows)."""
    f, t = _stream(views=1)
    method = "bca+ms" if ms else "bca"
    p = bca.Params(init_count1=200)
    cfg = EngineConfig(logit_scale=30.0, bca=p, forget=ForgetConfig("timeliness", horizon=HORIZON), **SHIFT)
    got = _steps(Engine(t, method, cfg), f)
    shift = reference_bca.mean_shift(cfg.k, cfg.alpha, cfg.ms_steps) if ms else None
    want = ref.bca(f.numpy(), t.numpy(), 30.0, math.exp(-1 / HORIZON), shift, init_count1=200)
    _check(got, want, 1e-9)
    _never_differs(method, cfg, f, t, got)
    assert np.array_equal(replay(f, t, method, cfg).predictions, got.argmax(1))


@pytest.mark.parametrize("counts", [(200, 1), (0, 0), (5, 3)])
def test_bca_fade_at_a_short_horizon_equals_the_reference(counts):
    """Horizon 2 on 120 steps: the prior's scale s = gamma^t falls below `bca_fade.RESCALE` (1e-20)
    twice and is folded into its evidence; at init counts 0 the rows without evidence are masked
    (c1 = 0, c2 = 0). Float64: 100% of predictions; float32: the same predictions, finite."""
    f, t = _stream(views=4)
    n1, n2 = counts
    p = bca.Params(init_count1=n1, init_count2=n2, selection_p=0.5)
    cfg = EngineConfig(logit_scale=30.0, bca=p, view_mode="confident", forget=ForgetConfig("timeliness", horizon=2))
    engine = Engine(t, "bca", cfg)
    got = _steps(engine, f)
    want = ref.bca(f.numpy(), t.numpy(), 30.0, math.exp(-1 / 2), None, init_count1=n1, init_count2=n2, selection_p=0.5)
    _check(got, want, 1e-9)
    assert engine.states[0]["scale"] > math.exp(-1 / 2 * N)  # it was folded: s alone would be e^-60
    low = _steps(Engine(t.float(), "bca", cfg), f.float())
    assert np.isfinite(low).all() and np.array_equal(low.argmax(1), want.argmax(1))


def test_bca_fade_touches_no_centre_or_prior_entry():
    """The fade is O(C): `bca.decay` rewrites no entry of V [C, d] or E [C, C] (between rescales), yet
    the centres and prior it holds are the faded ones (bca.decay's formulas, in place, float64)."""
    f, t = _stream(views=1)
    p = bca.Params(init_count1=20, init_count2=2)
    cfg = EngineConfig(logit_scale=30.0, bca=p, forget=ForgetConfig("timeliness", horizon=HORIZON))
    engine = Engine(t, "bca", cfg)
    _steps(engine, f[:30])
    st, gamma = engine.states[0], math.exp(-1 / HORIZON)
    mu, prior = bca_fade.centres(st, t), bca_fade.prior(st, 2.0)
    c1, c2 = st["c1"].clone(), st["c2"].clone()
    V, E = st["V"].clone(), st["E"].clone()
    with torch.inference_mode():  # as the engine steps
        bca.decay(st, gamma, t, p)
    assert torch.equal(st["V"], V) and torch.equal(st["E"], E)
    want = F.normalize(torch.where((c1 > 20).unsqueeze(1), gamma * c1.unsqueeze(1) * mu + (1 - gamma) * 20 * t, mu))
    torch.testing.assert_close(bca_fade.centres(st, t), want, rtol=0, atol=1e-12)
    seen = (c2 > 2).unsqueeze(1)
    c2n = (2 + gamma * (c2 - 2)).unsqueeze(1)
    faded = torch.where(
        seen, (2 * torch.eye(len(t)) + gamma * (c2.unsqueeze(1) * prior - 2 * torch.eye(len(t)))) / c2n, prior
    )
    torch.testing.assert_close(bca_fade.prior(st, 2.0), faded.double(), rtol=0, atol=1e-12)
    used = sum(v.numel() * v.element_size() for v in st.values() if isinstance(v, torch.Tensor))
    assert used <= bca.state_bytes(len(t), t.shape[1], p) * 2  # float64: twice the float32 bound


def test_dota_fade_scales_its_evidence_instead_of_touching_it():
    """DOTA's fade is O(C): the C d x d scatters are held as E_k = (S_k - sigma I) / gamma^t, which a
    fade leaves as it is; at horizon 1 the scale passes `dota.RESCALE` twice in 100 steps and is folded
    in. Against the float64 reference of the in-place fade (tests/test_forget.py): every prediction."""
    f, t = cut_stream(n=100, cuts=(50,), views=1, dim=16)
    f, t = f.double()[:, None], t.double()
    p = dota.DATASET_PARAMS["imagenet"]
    cfg = EngineConfig(dota=dota.Params(**p), forget=ForgetConfig("timeliness", horizon=1))
    engine = Engine(t, "dota", cfg)
    got = _steps(engine, f)
    want = test_forget._dota_reference_with_decay(f.numpy(), t.numpy(), 1, p)
    assert np.array_equal(got.argmax(1), want.argmax(1))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    st = engine.states[0]
    assert 1e-20 < st["scale"] < 1 and "scatter" not in st  # folded: e^-100 alone would be below
    evidence, scale = st["evidence"].clone(), st["scale"]
    with torch.inference_mode():  # as the engine steps
        dota.decay(st, math.exp(-1), t, engine.config.dota)
    assert torch.equal(st["evidence"], evidence) and st["scale"] == scale * math.exp(-1)


@pytest.mark.parametrize("ms", [False, True])
def test_onzeta_timeliness_equals_the_reference(ms):
    f, t = _stream(views=1)
    method = "onzeta+ms" if ms else "onzeta"
    cfg = EngineConfig(forget=ForgetConfig("timeliness", horizon=HORIZON), **SHIFT)
    got = _steps(Engine(t, method, cfg, stream_length=N), f)
    shift = reference_onzeta.mean_shift(cfg.k, cfg.alpha, cfg.ms_steps) if ms else None
    want = ref.onzeta(f[:, 0].numpy(), t.numpy(), math.exp(-1 / HORIZON), N, shift=shift)
    _check(got, want, 1e-9)
    _never_differs(method, cfg, f, t, got, stream_length=N)
    assert np.array_equal(replay(f, t, method, cfg).predictions, got.argmax(1))  # replay: length N


@pytest.mark.parametrize("method", ["dmn-zs", "dmn-zs+ms"])
def test_dmn_timeliness_with_weight_zero_is_its_own_rule(method):
    f, t = _stream(views=1)
    base = EngineConfig(dmn=dmn.Params(memory_size=3), **SHIFT)
    zero = dataclasses.replace(base, forget=ForgetConfig("timeliness", horizon=3, weight=0.0))
    a, b = Engine(t, method, base), Engine(t, method, zero)
    for x in f:
        assert torch.equal(a.step(x).logits, b.step(x).logits)


def test_dpe_idle_keeps_each_entrys_norm_beside_it():
    """Under `idle` the use weights read |e| from `dpe.slot_norms` (one pass over the cache): through
    insertions, sorted moves and expiries each kept norm is its entry's, and 1 where empty."""
    f, t = _stream(views=1, n=DPE_N, cut=DPE_N // 2)
    cfg = EngineConfig(dpe=dpe.Params(capacity=2), forget=ForgetConfig(rule="idle", idle=4), bank_size=None, **SHIFT)
    engine = Engine(t, "dpe+ms", cfg)
    filled = []
    for x in f:
        engine.step(x)
        st = engine.states[0]
        live = torch.isfinite(st["ent"])
        want = torch.where(live, torch.linalg.vector_norm(st["feats"], dim=-1), 1.0)
        torch.testing.assert_close(st["norm"], want, rtol=1e-12, atol=0)
        filled.append(int(live.sum()))
    assert any(b < a for a, b in zip(filled, filled[1:]))  # entries expired (idle 4)


@pytest.mark.parametrize("method", ["dpe+ms", "dmn-zs"])
def test_the_idle_expiry_runs_only_where_a_slot_can_expire(method, monkeypatch):
    """`slot_forget.expiry_due`: the expiry reads the memory only from the step its kept bound names
    (the least last use of the live slots plus `idle`), and the logits are those of an expiry at
    every step."""
    family = dpe if method.startswith("dpe") else dmn
    f, t = _stream(views=1, n=DPE_N, cut=DPE_N // 2)
    cfg = EngineConfig(
        dpe=dpe.Params(capacity=2), dmn=dmn.Params(memory_size=3), forget=ForgetConfig(rule="idle", idle=IDLE), **SHIFT
    )
    scans = []  # per scan, the slots it empties

    def counted(*args):
        gone = slot_forget.idle_slots(*args)
        scans.append(int(gone.sum()))
        return gone

    monkeypatch.setattr(family, "idle_slots", counted)
    got = _steps(Engine(t, method, cfg), f)
    bounded, emptied = len(scans), sum(scans)
    monkeypatch.setattr(family, "expiry_due", lambda state: True)
    want = _steps(Engine(t, method, cfg), f)
    assert len(scans) - bounded == len(f)  # unbounded: a scan at every step
    assert bounded < len(f) * 3 // 4 and emptied > 0  # the bound skipped steps; slots expired
    assert sum(scans[bounded:]) == emptied
    np.testing.assert_array_equal(got, want)


def test_dpe_insert_with_timeliness_weight_zero_is_tdas_rule():
    """DPE's cache alone (its W_g decays under timeliness): at weight 0 every insertion, entropy ties
    included, leaves the same sorted lists and class keys as `update_cache`."""
    g = torch.Generator().manual_seed(0)
    C, Q, d = 3, 2, 4
    text = F.normalize(torch.randn(C, d, generator=g, dtype=torch.float64), dim=-1)
    p = dpe.Params(capacity=Q)
    plain, ruled = dpe.init(text, p, 100.0, None), dpe.init(text, p, 100.0, None)
    ruled.update(ages(ruled["ent"]), **{RULE_KEY: SlotRule("timeliness", 3, 0.0, 1000)})
    for _ in range(60):
        c, h = int(torch.randint(C, (1,), generator=g)), float(torch.randint(4, (1,), generator=g)) / 4
        key = torch.randn(d, generator=g, dtype=torch.float64)
        dpe.insert(plain, c, key, h, Q)
        dpe.insert(ruled, c, key, h, Q)
        ruled["clock"] += 1
        for name in ("feats", "ent", "keys"):
            assert torch.equal(plain[name], ruled[name])
    assert torch.isfinite(plain["ent"]).all()  # every class filled: the rule chose among full rows


def test_onzeta_fade_touches_no_proxy_entry_and_keeps_it_unit():
    """OnZeta's fade is O(C): `onzeta.decay` rewrites no entry of U [C, d], yet the proxy it holds is
    normalise_rows(W + gamma (w - W)) (float64); the proxy's rows stay unit from the carried dot
    products over 2,000 float32 steps at horizon 3 (no drift)."""
    f, t = _stream(views=1)
    cfg = EngineConfig(forget=ForgetConfig("timeliness", horizon=HORIZON), **SHIFT)
    engine = Engine(t, "onzeta+ms", cfg, stream_length=N)
    _steps(engine, f[:30])
    st, gamma = engine.states[0], math.exp(-1 / HORIZON)
    w, U = onzeta_fade.proxy(st, t), st["U"].clone()
    with torch.inference_mode():  # as the engine steps
        onzeta.decay(st, gamma, t, engine.config.onzeta)
    assert torch.equal(st["U"], U)
    torch.testing.assert_close(onzeta_fade.proxy(st, t), F.normalize(t + gamma * (w - t)), rtol=0, atol=1e-12)
    long, _ = cut_stream(n=2000, cuts=(700, 1400), seed=4)
    short = EngineConfig(forget=ForgetConfig("timeliness", horizon=3))
    engine = Engine(t.float(), "onzeta", short, stream_length=2000)
    assert np.isfinite(_steps(engine, long.float()[:, None])).all()
    norms = torch.linalg.vector_norm(onzeta_fade.proxy(engine.states[0], t.float()), dim=1)
    torch.testing.assert_close(norms, torch.ones(len(t)), rtol=0, atol=1e-5)


@pytest.mark.parametrize("method", ["bca", "bca+ms", "onzeta", "onzeta+ms", "dota"])
def test_a_faded_step_reads_no_number_on_the_host(method, monkeypatch):
    """The O(C) fades and their steps keep the plain steps' property: no tensor is read back as a
    Python number (on a GPU each would stall the step); the guarded steps equal an unguarded twin's."""
    f, t = _stream(views=1, n=24)
    cfg = EngineConfig(forget=ForgetConfig("timeliness", horizon=1), **SHIFT)  # the scales fold at step 46: not yet
    engine, twin = Engine(t, method, cfg, stream_length=24), Engine(t, method, cfg, stream_length=24)
    _steps(engine, f[:6])
    with monkeypatch.context() as mp:
        for name in HOST_READS:
            mp.setattr(torch.Tensor, name, lambda *a, _n=name, **k: pytest.fail(f"Tensor.{_n} in step()"))
        with pytest.raises(pytest.fail.Exception, match=r"Tensor\.item in step"):  # the guard is live
            torch.zeros(2).sum().item()
        guarded = [engine.step(x).logits for x in f[6:]]
    assert "scale" in engine.states[0] or "U" in engine.states[0]  # the faded form stepped
    want = [twin.step(x).logits for x in f][6:]
    assert all(torch.equal(a, b) for a, b in zip(guarded, want))


@pytest.mark.parametrize(
    "method,rule",
    [("dmn-zs+ms", "idle"), ("dpe", "idle"), ("dpe", "timeliness"), ("bca", "timeliness"), ("onzeta+ms", "timeliness")],
)
def test_a_resumed_stream_equals_an_uninterrupted_one(method, rule):
    f, t = _stream(views=1)
    cfg = EngineConfig(dmn=dmn.Params(memory_size=3), dpe=dpe.Params(capacity=2), forget=ForgetConfig(**RULES[rule]))
    whole = Engine(t, method, cfg)
    want = _steps(whole, f)
    first = Engine(t, method, cfg)
    _steps(first, f[: CUT + 5])
    second = Engine(t, method, cfg)
    second.load_state_dict(first.state_dict())
    assert np.array_equal(_steps(second, f[CUT + 5 :]), want[CUT + 5 :])
    if method.startswith(("dmn", "dpe")):  # the slot clocks exist under a slot rule only
        with pytest.raises(UserError, match="state_dict was saved under another forget.rule"):
            Engine(t, method, EngineConfig()).load_state_dict(first.state_dict())


@pytest.mark.parametrize("method,marked", [("bca", True), ("dmn-zs", False)])
def test_replay_marks_a_familys_own_decay_as_the_projects_adaptation(tmp_path, capsys, method, marked):
    """`mstta-bench replay --set forget.rule=timeliness`: a statistics family's decay is marked in the
    JSON; DMN-ZS's slot rule is RoTTA's score (unmarked, as the cache family's)."""
    f, t = cut_stream(n=30, cuts=(15,))
    path = save_features(tmp_path / "f.npz", f.numpy(), t.numpy(), np.zeros(30, int), list("abcde"), {"model": "x"})
    argv = ["replay", "--features", str(path), "--method", method, "--json", "--set", "forget.rule=timeliness"]
    code, out, err = run_bench(capsys, *argv)
    assert code == 0, err
    marks = json.loads(out.strip().splitlines()[-1]).get("marks", [])
    assert any("statistics fade with the horizon" in m for m in marks) == marked
