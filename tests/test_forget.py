"""Forgetting (issue 29, `EngineConfig.forget`): each rule against the independent float64 reference
(tests/reference_forget.py), replay equal to the online steps, MultiEngine equal to S engines,
every family's resets, the scene-cut detector on streams with known cuts, resume equality."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import reference_dota
import reference_forget
import torch
import torch.nn.functional as F
from helpers_cli import run_bench
from helpers_family import tower_kw
from helpers_reference import reference_config
from synthetic import as_tensors, make_stream

from mstta import Engine, EngineConfig, UserError, get_method, list_methods, replay
from mstta.bench.config import load_dataset_config
from mstta.engine.cache_rules import entropy_slot_t
from mstta.engine.families import dota
from mstta.engine.forget import RECOMMENDED_HORIZON, ForgetConfig, stream_cuts, timeliness_slot, timeliness_slot_t
from mstta.engine.multi import MultiEngine
from mstta.features.format import save_features

CUT = 80  # the scene cut of `cut_stream`


def cut_stream(n=160, cuts=(CUT,), dim=12, classes=5, views=1, seed=11, shift=1.0):
    """(features, text): a make_stream whose features move by `shift` along a new random
    direction at each cut (a scene change with the same classes)."""
    f, t, _ = as_tensors(make_stream(n=n, classes=classes, dim=dim, views=views, seed=seed, noise=1.5))
    g = torch.Generator().manual_seed(seed)
    for a in cuts:
        f[a:] = F.normalize(f[a:] + shift * F.normalize(torch.randn(dim, generator=g), dim=0), dim=-1)
    return f, t


RULES = {
    "timeliness-h5": dict(rule="timeliness", horizon=5),
    "timeliness-h30-w0.3": dict(rule="timeliness", horizon=30, weight=0.3),
    "idle-12": dict(rule="idle", idle=12),
    "periodic-45": dict(rule="periodic", every=45),
    "detect": dict(detect=True, detect_warmup=30, detect_ridge=0.1),  # a 30-sample reference in 12 dims
    "timeliness-detect": dict(rule="timeliness", horizon=20, detect=True, detect_warmup=30, detect_ridge=0.1),
}
CACHE_ROWS = ["baseline", "tda", "ms-tta", "tda+ms"]  # without and with MS, with and without TDA's negative cache


def _config(rule, **over):
    return reference_config({"forget": ForgetConfig(**RULES[rule]), **over})


@pytest.mark.parametrize("method", CACHE_ROWS)
@pytest.mark.parametrize("rule", list(RULES))
def test_cache_family_equals_the_reference(method, rule):
    f, t = cut_stream()
    cfg = _config(rule, bank_size=40 if method == "tda+ms" else None)
    ref, ref_cuts = reference_forget.run(f.numpy(), t.numpy(), get_method(method), cfg)
    engine = Engine(t, method, cfg)
    steps = [engine.step(x) for x in f]
    online = torch.stack([r.logits for r in steps]).numpy()
    assert np.array_equal(online.argmax(1), ref.argmax(1))
    np.testing.assert_allclose(online, ref, rtol=1e-4, atol=1e-3)
    assert [r.cut for r in steps] == ref_cuts.tolist()
    fast = replay(f, t, method, cfg, chunk=16)
    assert np.array_equal(fast.predictions, ref.argmax(1))
    if cfg.forget.resets:
        assert np.array_equal(fast.cuts, ref_cuts) and ref_cuts.any()
    # the rule did something: not the never-forgetting engine
    never = Engine(t, method, reference_config({"bank_size": cfg.bank_size}))
    assert not np.allclose(online, torch.stack([never.step(x).logits for x in f]).numpy())


def test_the_detector_cuts_in_the_reference_stream_where_the_scene_changes():
    f, t = cut_stream()
    cuts = np.nonzero(reference_forget.run(f.numpy(), t.numpy(), get_method("tda"), _config("detect"))[1])[0]
    assert len(cuts) == 1 and CUT <= cuts[0] < CUT + 30


@pytest.mark.parametrize("method", ["tda", "ms-tta"])
def test_timeliness_with_weight_zero_is_the_entropy_rule_bit_for_bit(method):
    f, t = cut_stream(views=6)
    base = reference_config({"view_mode": "confident", "view_ratio": 0.34})
    zero = reference_config(
        {"view_mode": "confident", "view_ratio": 0.34, "forget": ForgetConfig("timeliness", 3, 0.0)}
    )
    a, b = Engine(t, method, base), Engine(t, method, zero)
    for x in f:
        assert torch.equal(a.step(x).logits, b.step(x).logits)
    assert np.array_equal(replay(f, t, method, zero).predictions, replay(f, t, method, base).predictions)


@pytest.mark.parametrize("method", list_methods())
def test_rule_none_is_todays_step_for_every_method(method):
    """`rule: none` with every other key moved is today's step, bit for bit (the other keys are inert)."""
    f, t = cut_stream(n=40, views=4)
    off = ForgetConfig(
        "none", horizon=2, weight=7.0, idle=1, every=2, detect_rate=1.0, detect_slack=0.0, detect_ridge=1.0
    )
    kw = tower_kw(method, t.shape[0], t.shape[1])  # the prompt-tuning rows' text tower (else nothing)
    a = Engine(t, method, EngineConfig(view_mode="original"), **kw)
    b = Engine(t, method, EngineConfig(view_mode="original", forget=off), **kw)
    for x in f:
        ra, rb = a.step(x), b.step(x)
        assert torch.equal(ra.logits, rb.logits) and not rb.cut and rb.cut_tensor is None


def test_timeliness_twins_agree_on_random_rows():
    """The host rule (replay's scan) and the device rule (the step) pick the same slot, ties and
    empty slots included; at weight 0 both are the entropy rule."""
    g = np.random.default_rng(0)
    for _ in range(300):
        Q = int(g.integers(1, 6))
        ent = g.choice([0.1, 0.2, 0.5, np.inf], Q) if g.random() < 0.3 else g.random(Q)
        when = np.where(np.isinf(ent), -1, g.integers(0, 50, Q))
        h, now, n, w = float(g.random()), 60, int(g.integers(1, 40)), float(g.choice([0.0, 0.5, 1.0, 3.0]))
        host = timeliness_slot(ent.tolist(), when.tolist(), h, now, n, w, np.log(7))
        j, ok = timeliness_slot_t(
            torch.tensor(ent[None], dtype=torch.float32),
            torch.tensor(when[None]),
            torch.tensor([h], dtype=torch.float32),
            torch.tensor([now]),
            n,
            w,
            float(np.log(7)),
        )
        assert host == (int(j) if bool(ok) else -1)
        if w == 0.0:
            je, oke = entropy_slot_t(
                torch.tensor(ent[None], dtype=torch.float32), torch.tensor(when[None]), torch.tensor([h])
            )
            assert (int(j), bool(ok)) == (int(je), bool(oke))


def _multi_streams(S, n=90):
    """S streams, each with its own scene cut, and the steps each one takes (about one in five skipped)."""
    feats = [cut_stream(n=n - 5 * s, cuts=(40 + 6 * s,), seed=20 + s)[0] for s in range(S)]
    text = cut_stream(n=2, cuts=())[1]
    rng = np.random.default_rng(1)
    return feats, text, [rng.random(n) > 0.2 for _ in range(S)]


MULTI = [
    ("tda", "timeliness-detect"),
    ("tda", "idle-12"),
    ("ms-tta", "timeliness-detect"),
    ("ms-tta", "idle-12"),
    ("ms-tta", "periodic-45"),
    ("dota", "detect"),
    ("dota", "periodic-45"),
    ("dmn-zs+ms", "detect"),
    ("dmn-zs+ms", "idle-12"),
    ("dpe", "timeliness-h5"),
    ("bca+ms", "timeliness-h5"),
    ("onzeta", "timeliness-h5"),
]


@pytest.mark.parametrize("method,rule", MULTI)
def test_multi_engine_equals_separate_engines(method, rule):
    S, cfg = 3, _config(rule, bank_size=30)
    feats, text, takes = _multi_streams(S)
    multi = MultiEngine(text, method, cfg, streams=S)
    single = [Engine(text, method, cfg) for _ in range(S)]
    cursor, cuts = [0] * S, 0
    for step in range(len(takes[0])):
        batch = [feats[s][cursor[s]] if takes[s][step] and cursor[s] < len(feats[s]) else None for s in range(S)]
        if all(b is None for b in batch):
            continue
        out = multi.step(batch)
        for s, x in enumerate(batch):
            if x is None:
                assert not out.cuts[s]
                continue
            want = single[s].step(x)
            assert out[s].prediction == want.prediction and out[s].cut == want.cut == out.cuts[s]
            torch.testing.assert_close(out[s].logits, want.logits, rtol=1e-5, atol=1e-5)
            cursor[s] += 1
            cuts += want.cut
    assert cuts >= S or not cfg.forget.resets


# Each family with both resets, with and without MS where it has a +ms row.
FAMILY_RESETS = [
    ("dmn-zs", "periodic-45"),
    ("dmn-zs+ms", "detect"),
    ("dota", "detect"),
    ("dota+ms", "periodic-45"),
    ("onzeta", "periodic-45"),
    ("onzeta+ms", "detect"),
    ("bca", "detect"),
    ("bca+ms", "periodic-45"),
    ("dpe", "periodic-45"),
    ("dpe", "detect"),
    ("zero", "detect"),
]


@pytest.mark.parametrize("method,rule", FAMILY_RESETS)
def test_a_family_reset_equals_fresh_engines_on_the_segments(method, rule):
    """Every family: a reset (periodic; at a cut found by the reference's detector) equals a new
    engine on each segment; replay and the step agree and report the same cuts."""
    f, t = cut_stream(n=120, cuts=(60,))
    t = t.double()
    cfg = _config(rule)
    _, cuts = reference_forget.run(f.numpy(), t.numpy(), get_method("baseline"), cfg)
    edges = [0, *np.nonzero(cuts)[0].tolist(), len(f)]
    want = []
    for a, b in zip(edges, edges[1:]):
        fresh = Engine(t, method, EngineConfig(), stream_length=len(f))
        want += [fresh.step(x).logits for x in f[a:b]]
    engine = Engine(t, method, cfg, stream_length=len(f))
    steps = [engine.step(x) for x in f]
    assert [r.cut for r in steps] == cuts.tolist() and len(edges) > 2
    torch.testing.assert_close(torch.stack([r.logits for r in steps]), torch.stack(want), rtol=1e-9, atol=1e-9)
    fast = replay(f, t, method, cfg)
    assert np.array_equal(fast.predictions, torch.stack(want).argmax(1).numpy()) and np.array_equal(fast.cuts, cuts)


@pytest.mark.parametrize("method", ["bca", "onzeta+ms", "dota"])
def test_a_statistics_family_refuses_idle_in_one_line_naming_timeliness(method):
    """BCA, OnZeta and DOTA read every class statistic at every step: nothing goes idle."""
    with pytest.raises(
        UserError, match="forget.rule=idle: not defined for .* read at every step.*forget.rule=timeliness"
    ):
        Engine(torch.eye(3, 4), method, EngineConfig(forget=ForgetConfig("idle")))
    Engine(torch.eye(3, 4), method, EngineConfig(forget=ForgetConfig("timeliness")))  # its neighbour: defined


def test_the_detector_finds_known_cuts_within_30_steps():
    f, _ = cut_stream(n=1200, cuts=(300, 650, 900), dim=64, classes=10, seed=3, shift=0.5)
    found = np.nonzero(stream_cuts(f.unsqueeze(1), ForgetConfig(detect=True)).numpy())[0]
    assert len(found) == 3 and all(0 <= c - a < 30 for c, a in zip(found, (300, 650, 900))), found


def _lifted(f, width, noise, seed=0):
    """f [N, k] lifted to `width` dims: a seeded random orthonormal map plus isotropic noise of norm ~`noise`."""
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(width, f.shape[1], generator=g))
    return F.normalize(f @ q.T + noise / width**0.5 * torch.randn(f.shape[0], width, generator=g), dim=-1)


def test_the_detector_finds_known_cuts_at_a_clip_width():
    """A 64-dim scene stream lifted to d = 512 with noise: the statistic is read through the fixed map
    to DETECT_DIMS dims (a 150-sample reference in 512 dims is rank-deficient: without the map the
    standardisation collapses and two of the three cuts go unseen)."""
    f, _ = cut_stream(n=1200, cuts=(300, 650, 900), dim=64, classes=10, seed=3, shift=0.3)
    x = _lifted(f, 512, 0.5)
    found = np.nonzero(stream_cuts(x.unsqueeze(1), ForgetConfig(detect=True)).numpy())[0]
    assert len(found) == 3 and all(0 <= c - a < 30 for c, a in zip(found, (300, 650, 900))), found


def test_no_false_cut_on_a_long_iid_stream():
    f, _, _ = as_tensors(make_stream(n=10_000, classes=10, dim=64, seed=5))
    assert not stream_cuts(f.unsqueeze(1), ForgetConfig(detect=True)).any()


@pytest.mark.parametrize(
    "seed,cuts,keys",
    [
        (3, (300, 650, 900), {}),
        (4, (250, 500), dict(detect_rate=0.2, detect_slack=0.2, detect_threshold=2.0, detect_warmup=60)),
        (5, (), dict(detect_ridge=0.002, detect_warmup=40, detect_threshold=1.0, detect_slack=0.1)),
    ],
)
def test_the_detector_equals_its_float64_reference_loop(seed, cuts, keys):
    """`drift_step_t` (float32, Sherman-Morrison) cuts where the plain float64 loop of the statistic
    (tests/reference_forget.Detector: the reference's covariance inverted directly) cuts; at d = 96
    both read the features through the fixed map to 64 dims."""
    dim = 96 if seed == 5 else 32
    f, _ = cut_stream(n=1000, cuts=cuts, dim=dim, classes=8, seed=seed, shift=0.4)
    cfg = ForgetConfig(detect=True, **keys)
    det = reference_forget.Detector(cfg, dim)
    want = [det.cut(u) for u in f.double().numpy()]
    got = stream_cuts(f.unsqueeze(1), cfg).tolist()
    assert got == want and any(want)


@pytest.mark.parametrize(
    "method,rule",
    [
        ("ms-tta", "timeliness-detect"),
        ("ms-tta", "idle-12"),
        ("tda", "periodic-45"),
        ("dota+ms", "detect"),
        ("dota+ms", "periodic-45"),
    ],
)
def test_a_resumed_stream_equals_an_uninterrupted_one(method, rule):
    f, t = cut_stream()
    cfg = _config(rule)
    whole = Engine(t, method, cfg)
    want = [whole.step(x) for x in f]
    first = Engine(t, method, cfg)
    for x in f[: CUT - 10]:  # the detector is mid-way through its reference (and its run-up, below)
        first.step(x)
    second = Engine(t, method, cfg)
    second.load_state_dict(first.state_dict())
    got = [second.step(x) for x in f[CUT - 10 :]]
    assert [r.cut for r in got] == [r.cut for r in want[CUT - 10 :]]
    for a, b in zip(got, want[CUT - 10 :]):
        assert torch.equal(a.logits, b.logits)
    if get_method(method).family == "cache":
        assert np.array_equal(second.cache_times(), whole.cache_times())


def test_cache_times_are_the_insertion_steps():
    f, t = cut_stream(n=40)
    engine = Engine(t, "tda", reference_config({"capacity": 2}))
    assert (engine.cache_times() == -1).all()
    for x in f:
        engine.step(x)
    times = engine.cache_times()
    assert times.shape == (5, 2) and np.array_equal(times >= 0, np.isfinite(engine.cache_entropy()))
    assert times.max() < 40 and len(set(times[times >= 0].tolist())) == (times >= 0).sum()


def test_the_keys_reach_the_engine_from_set_and_yaml(tmp_path):
    cfg = load_dataset_config(None, ["forget.rule=timeliness", "forget.detect=true", "forget.detect_warmup=2"]).engine
    assert cfg.forget == ForgetConfig("timeliness", detect=True, detect_warmup=2)
    assert cfg.forget.steps == RECOMMENDED_HORIZON
    path = tmp_path / "c.yaml"
    path.write_text("engine:\n  forget: {rule: periodic, every: 10000000, detect_slack: 1000000, horizon: 1}\n")
    fg = load_dataset_config(path).engine.forget
    assert (fg.rule, fg.every, fg.detect_slack, fg.steps) == ("periodic", 10_000_000, 1e6, 1)
    with pytest.raises(UserError, match=r"unknown key 'rules' in .*forget; allowed keys: rule, horizon"):
        load_dataset_config(None, ["forget.rules=idle"])


def _dota_reference_with_decay(feats, text, horizon, p):
    """reference_dota's `run_test_dota` loop, the evidence beyond DOTA's prior fading by
    exp(-1 / horizon) before each step (c_k and c_k Sigma_k toward 1 and sigma I)."""
    feats, text = np.asarray(feats, np.float64), np.asarray(text, np.float64)
    C, d = text.shape
    model = reference_dota.DOTA(C, d, p["epsilon"], p["sigma"])
    g = math.exp(-1 / horizon)
    finals = []
    for x in feats:
        scatter = g * model.c[:, None, None] * model.Sigma + (1 - g) * p["sigma"] * np.eye(d)
        model.c = 1 + g * (model.c - 1)
        model.Sigma = scatter / model.c[:, None, None]
        image_features, clip, _, prob_map = reference_dota.clip_logits_aug(x, text, 100.0, 0.1)
        weight = min(p["rho"] * model.c.mean() / image_features.shape[0], p["eta"])
        finals.append(clip + weight * model.predict(image_features.mean(0)))
        model.fit(image_features, prob_map)
        model.update()
    return np.array(finals)


@pytest.mark.parametrize("views", [1, 8])
def test_dota_timeliness_decay_equals_the_reference(views):
    f, t = cut_stream(n=100, cuts=(50,), views=views, dim=16)
    f, t = f.double(), t.double()
    f = f if f.dim() == 3 else f[:, None]
    p = dota.DATASET_PARAMS["imagenet"]
    cfg = EngineConfig(view_mode="confident", dota=dota.Params(**p), forget=ForgetConfig("timeliness", horizon=10))
    engine = Engine(t, "dota", cfg)
    got = torch.stack([engine.step(x).logits for x in f]).numpy()
    want = _dota_reference_with_decay(f.numpy(), t.numpy(), 10, p)
    assert np.array_equal(got.argmax(1), want.argmax(1))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)  # Lambda inverts a matrix of condition ~1e4
    never = Engine(t, "dota", EngineConfig(view_mode="confident", dota=dota.Params(**p)))
    assert np.abs(got - torch.stack([never.step(x).logits for x in f]).numpy()).max() > 1e-4
    assert np.array_equal(replay(f, t, "dota", cfg).predictions, got.argmax(1))


def test_replay_command_reports_the_cuts_and_the_marks(tmp_path, capsys):
    """`mstta-bench replay --set forget...`: the JSON names each reset sample and marks the project's
    adaptations; every JSONL row says whether a reset came before it."""
    f, t = cut_stream(n=120, cuts=(60,))
    path = save_features(tmp_path / "f.npz", f.numpy(), t.numpy(), np.zeros(120, int), list("abcde"), {"model": "x"})
    argv = ["replay", "--features", str(path), "--method", "tda", "--json", "--out", str(tmp_path / "p.jsonl")]
    code, out, err = run_bench(capsys, *argv, "--set", "forget.detect=true", "--set", "forget.detect_warmup=30")
    assert code == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    want = np.nonzero(reference_forget.run(f.numpy(), t.numpy(), get_method("tda"), _config("detect"))[1])[0]
    assert report["cuts"] == want.tolist() and any("scene-cut detector" in m for m in report["marks"])
    rows = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert [i for i, r in enumerate(rows) if r["cut"]] == want.tolist()


@pytest.mark.parametrize("rule", ["timeliness-detect", "idle-12", "periodic-45"])
def test_forgetting_adds_no_host_sync_to_the_step(rule, monkeypatch):
    """Every rule and the detector run as device ops: no Python number is read from a tensor (the
    step as on a GPU: `host_reads` off; on a CPU the host reads the detector and the expiry, as `plain` does,
    with the same predictions)."""
    f, t = cut_stream()
    cfg = _config(rule, bank_size=30)
    engine, plain = Engine(t, "tda+ms", cfg), Engine(t, "tda+ms", cfg)
    engine.runner.host_reads = engine.runner.host_resets = False
    for x in f[:5]:
        engine.step(x)
    with monkeypatch.context() as mp:
        for name in ("item", "tolist", "__int__", "__float__", "__bool__", "__index__", "numpy", "cpu"):
            mp.setattr(torch.Tensor, name, lambda *a, _n=name, **k: pytest.fail(f"Tensor.{_n} in step()"))
        with pytest.raises(pytest.fail.Exception):  # the guard is live
            torch.zeros(1).item()
        steps = [engine.step(x) for x in f[5:]]
    want = [plain.step(x) for x in f][5:]
    assert [r.cut for r in steps] == [r.cut for r in want]
    assert all(torch.equal(a.logits, b.logits) for a, b in zip(steps, want))
