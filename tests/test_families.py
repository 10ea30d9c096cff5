"""The family interface: every registered method runs behind Engine, MultiEngine and replay; the
runner's mean shift, bank, reset, state and memory refusal, checked on a small family written
here (a running class-mean classifier), against a plain loop."""

from __future__ import annotations

import copy
import sys
import types
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
from helpers_family import register_method, tower_kw
from synthetic import make_stream

import mstta.engine.families as families
from mstta import Engine, EngineConfig, MultiEngine, UserError, get_method, list_methods, load_dataset_config, replay
from mstta.engine.cache_runner import Streams
from mstta.engine.config import FAMILY_SECTIONS
from mstta.engine.families.base import CACHE, Method, StepOut
from mstta.engine.families.cache import Switches


# ---------------------------------------------------------------- a family written for the test
@dataclass
class _Params:
    rate: float = 0.5


def _init(text, p, logit_scale, length):
    return {"mu": text.clone(), "count": torch.zeros((), dtype=torch.long, device=text.device)}


def _step(state, x, text, p, logit_scale, shift):
    f = x.mean(0)
    clip = logit_scale * (f @ text.T)
    z = shift(f.unsqueeze(0))[0]
    scores = clip + logit_scale * (z @ state["mu"].T)
    c = int(scores.argmax())
    state["mu"][c] = torch.nn.functional.normalize(state["mu"][c] + p.rate * z, dim=-1)
    state["count"] += 1
    p = torch.softmax(scores, -1)
    h = -(torch.softmax(clip, -1) * torch.log_softmax(clip, -1)).sum()
    return StepOut(scores, clip, h, f, p)


_FAKE = types.SimpleNamespace(
    NAME="mean", Params=_Params, METHODS=(), init=_init, step=_step, state_bytes=lambda C, d, p: C * d * 4 + 8
)
_ROW = Method(name="mean", title="Mean", summary="test family", family="mean")
_ROW_MS = Method(name="mean+ms", title="Mean + MS", summary="test family", family="mean", mean_shift=True)


@dataclass
class _Cfg(EngineConfig):
    """EngineConfig plus the test family's section (a family reads its own section only)."""

    mean: _Params = field(default_factory=_Params)


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setitem(families.FAMILIES, "mean", _FAKE)
    return _FAKE


def _cfg(**kw) -> _Cfg:
    return _Cfg(**kw)


def _loop(feats, text, cfg, ms):
    """The test family's stream as a plain float64 loop, the mean shift written out (Eq. 9-11)."""
    mu = [t / np.linalg.norm(t) for t in text]
    bank, preds = [], []
    for x in feats:
        x = x / np.linalg.norm(x, axis=-1, keepdims=True)
        f = x.mean(0)
        z = f
        if ms and bank and cfg.alpha > 0:
            b = np.array(bank[-cfg.bank_size :] if cfg.bank_size else bank)
            sims = (b / np.linalg.norm(b, axis=1, keepdims=True)) @ f
            order = sorted(range(len(b)), key=lambda j: (-sims[j], j))[: cfg.k]
            z = (1 - cfg.alpha) * f + cfg.alpha * b[order].mean(0)
            z = z / np.linalg.norm(z)
        scores = 100 * np.array([f @ t for t in text]) / np.linalg.norm(text, axis=1) + 100 * np.array(
            [z @ m for m in mu]
        )
        c = int(np.argmax(scores))
        mu[c] = mu[c] + 0.5 * z
        mu[c] = mu[c] / np.linalg.norm(mu[c])
        preds.append(c)
        bank.append(f)
    return preds


@pytest.mark.parametrize("ms,views,bank_size", [(False, 1, None), (True, 1, None), (True, 4, None), (True, 3, 5)])
def test_runner_equals_a_plain_loop(fake, ms, views, bank_size):
    s = make_stream(n=60, classes=6, dim=16, views=views, seed=3)
    cfg = _cfg(k=3, bank_size=bank_size)
    feats = s["features"].reshape(60, views, 16)
    engine = Engine(torch.tensor(s["text"], dtype=torch.float64), _ROW_MS if ms else _ROW, cfg)
    got = [engine.step(torch.tensor(x)).prediction for x in feats]
    assert got == _loop(feats, s["text"], cfg, ms)
    assert engine.n_seen == 60 and engine.bank_len == (min(60, bank_size or 60) if ms else 0)


def test_ms_at_alpha_zero_is_the_base_row_exactly(fake):
    s = make_stream(n=40, classes=5, dim=16, views=3, seed=1)
    text = torch.tensor(s["text"], dtype=torch.float64)
    base = Engine(text, _ROW, _cfg())
    ms = Engine(text, _ROW_MS, _cfg(alpha=0.0))
    for x in s["features"]:
        a, b = base.step(x), ms.step(x)
        assert torch.equal(a.logits, b.logits) and torch.equal(a.probs, b.probs)


def test_replay_multi_reset_and_state(fake):
    s = make_stream(n=30, classes=4, dim=8, views=2, seed=2)
    text = torch.tensor(s["text"], dtype=torch.float64)
    feats = torch.tensor(s["features"])
    online = Engine(text, _ROW_MS, _cfg())
    logits = torch.stack([online.step(x).logits for x in feats])
    r = replay(feats, text, _ROW_MS, _cfg(), keep_probs=True)
    assert np.array_equal(r.predictions, logits.argmax(-1).numpy())
    assert r.probs.shape == (30, 4) and np.allclose(r.probs.sum(1), 1, atol=1e-6)
    # two streams, stepped together (one skipping a step), equal two engines
    multi = MultiEngine(text, _ROW_MS, _cfg(), streams=2)
    e0, e1 = Engine(text, _ROW_MS, _cfg()), Engine(text, _ROW_MS, _cfg())
    for t in range(10):
        out = multi.step([feats[t], feats[29 - t] if t % 3 else None])
        assert out.predictions[0] == e0.step(feats[t]).prediction
        if t % 3:
            assert out.predictions[1] == e1.step(feats[29 - t]).prediction
        else:
            assert out.predictions[1] == -1 and out[1] is None
    assert multi.n_seen.tolist() == [10, 6]
    # state_dict round trip, deep copy, reset of one stream and of all
    saved = online.state_dict()
    after = [online.step(x).logits for x in feats[:5]]
    online.load_state_dict(saved)
    assert all(torch.equal(a, online.step(x).logits) for a, x in zip(after, feats[:5]))
    twin = copy.deepcopy(online)
    assert torch.equal(twin.step(feats[7]).logits, online.step(feats[7]).logits)
    multi.reset(stream=1)
    assert multi.n_seen.tolist() == [10, 0] and multi.bank_len(1) == 0 and multi.bank_len(0) == 10
    online.reset()
    fresh = Engine(text, _ROW_MS, _cfg())
    assert torch.equal(online.step(feats[0]).logits, fresh.step(feats[0]).logits)


def test_runner_refuses_graphs_and_oversized_state(fake, monkeypatch):
    text = torch.randn(5, 8)
    with pytest.raises(UserError, match="runs eagerly"):
        Engine(text, _ROW, _cfg(), cuda_graph=True)
    monkeypatch.setattr(_FAKE, "state_bytes", lambda C, d, cfg: 10**15)
    with pytest.raises(UserError) as err:
        Engine(text, _ROW, _cfg())
    assert "Mean's state" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(UserError, match="stream_length"):
        Engine(torch.randn(5, 8), _ROW, _cfg(), stream_length=0)


def test_float32_classifier_runs_in_float32(fake):
    engine = Engine(torch.randn(5, 8, dtype=torch.float32), _ROW, _cfg())
    r = engine.step(torch.randn(8, dtype=torch.float64))
    assert r.logits.dtype == torch.float32 and r.topk(2)[0][1] == pytest.approx(float(r.probs.max()))


# ---------------------------------------------------------------- the registry as it stands
def test_every_registered_method_runs_everywhere():
    """Each row of the registry steps, replays (equal to its steps), runs in a MultiEngine, resets."""
    s = make_stream(n=24, classes=5, dim=16, views=12, seed=4)
    text = torch.tensor(s["text"])
    feats = torch.tensor(s["features"], dtype=torch.float32)
    for name in list_methods():
        m = get_method(name)
        kw = tower_kw(name, 5, 16)  # the prompt-tuning rows: a tiny model's text tower
        engine = Engine(text, name, stream_length=len(feats), **kw)  # replay tells a family the stream's length
        steps = [engine.step(x).prediction for x in feats]
        r = replay(feats, text, name, keep_probs=True, **kw)
        assert r.predictions.tolist() == steps, name
        assert np.isfinite(r.probs).all() and np.allclose(r.probs.sum(1), 1, atol=1e-4), name
        multi = MultiEngine(text, name, streams=2, **kw)
        out = multi.step(torch.stack([feats[0], feats[1]]))
        assert out.predictions.shape == (2,), name
        engine.reset()
        assert engine.n_seen == 0, name
        assert (m.family == CACHE) == isinstance(engine.runner, Streams), name


def test_family_sections_in_config_and_overrides():
    cfg = EngineConfig()
    for section in FAMILY_SECTIONS:
        assert section in families.FAMILIES and isinstance(getattr(cfg, section), families.FAMILIES[section].Params)
    with pytest.raises(UserError, match="unknown key 'nope'"):
        load_dataset_config(None, ["dota.nope=1"])
    with pytest.raises(UserError, match="allowed keys:.*dota.KEY"):
        load_dataset_config(None, ["nosection.x=1"])


def test_nothing_outside_the_families_branches_on_a_new_method_name():
    """The runner, engine, replay, benchmark, demo and UI reach the families through the registry:
    no source file outside mstta/families names one of their rows in quotes."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    names = [m for m in list_methods() if get_method(m).family != CACHE]
    offenders = []
    for path in [*root.glob("mstta/**/*.py"), *root.glob("app/**/*.py")]:
        if "families" in path.parts or "data" in path.parts:  # data/: class names ("zero", the digit)
            continue
        text = path.read_text()
        offenders += [f"{path.name}: {n}" for n in names if f'"{n}"' in text or f"'{n}'" in text]
    assert offenders == []


def test_config_file_that_cannot_be_read_is_one_line(tmp_path, monkeypatch):
    from mstta.configfile import read_yaml

    p = tmp_path / "c.yaml"
    p.write_text("engine: {k: 2}\n")

    def broken(self, *a, **kw):
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(type(p), "open", broken)
    with pytest.raises(UserError) as err:
        read_yaml(p)
    assert "c.yaml" in str(err.value) and "--config" in str(err.value) and "Invalid argument" in str(err.value)


def test_config_from_proc_is_refused_in_one_line(capsys):
    from helpers_cli import run_bench

    if not sys.platform.startswith("linux"):
        pytest.skip("needs /proc (Linux)")
    code, _, err = run_bench(capsys, "replay", "--features", "/nonexistent.npz", "--config", "/proc/self/pagemap")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "/proc/self/pagemap" in err


def test_dataset_configs_hold_each_familys_published_values():
    """configs/<dataset>.yaml's family sections equal the values each family module transcribes from
    its authors' per-dataset configs (each family's own test checks those against its copy)."""
    from mstta.configfile import CONFIG_DIR

    checked = 0
    for name, fam in families.FAMILIES.items():
        for dataset, values in getattr(fam, "DATASET_PARAMS", {}).items():
            section = getattr(load_dataset_config(CONFIG_DIR / f"{dataset}.yaml").engine, name)
            assert {k: getattr(section, k) for k in values} == values, (name, dataset)
            checked += 1
    assert checked >= 15  # DOTA's 15 datasets at least


def test_replay_prints_a_rows_marks(tmp_path, capsys, monkeypatch):
    """A row that is not training-free (or not from its authors' code) says so in replay's outputs."""
    import json

    from helpers_cli import run_bench

    from mstta import save_features

    s = make_stream(n=20, classes=3, dim=8, seed=5)
    save_features(tmp_path / "f.npz", s["features"], s["text"], labels=s["labels"])
    row = Method(
        name="tda-marked",
        title="TDA (marked)",
        summary="",
        settings=Switches(cache=True, negative=True),
        training_free=False,
        provenance="from the paper, not the authors' code",
    )
    register_method(monkeypatch, row)
    code, out, _ = run_bench(capsys, "replay", "--features", str(tmp_path / "f.npz"), "--method", row.name)
    assert code == 0 and "[not training-free]" in out and "[from the paper, not the authors' code]" in out
    code, out, _ = run_bench(capsys, "replay", "--features", str(tmp_path / "f.npz"), "--method", row.name, "--json")
    assert json.loads(out.strip().splitlines()[-1])["marks"] == row.marks
    code, out, _ = run_bench(capsys, "replay", "--features", str(tmp_path / "f.npz"), "--method", "tda", "--json")
    assert "marks" not in json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["zero", "mta"])
def test_cache_methods_read_a_familys_view_combination(mode):
    """view_mode zero/mta: the cache methods read ZERO's or MTA's combination of the views; the
    vectorised replay equals the online step; MS-TTA on MTA's mode equals MS-TTA fed the modes."""
    s = make_stream(n=40, classes=6, dim=16, views=8, seed=6, gap=0.5, view_noise=1.0)
    text, feats = torch.tensor(s["text"]), torch.tensor(s["features"], dtype=torch.float32)
    cfg = EngineConfig(view_mode=mode)
    for name in ("ms-tta", "tda", "tda+ms"):
        engine = Engine(text, name, cfg)
        steps = [engine.step(x).prediction for x in feats]
        assert replay(feats, text, name, cfg).predictions.tolist() == steps
    confident = replay(feats, text, "ms-tta", EngineConfig(view_mode="confident")).predictions
    ours = replay(feats, text, "ms-tta", cfg).predictions
    assert len(set(ours.tolist())) > 2 and not np.array_equal(confident, ours)  # another query than TDA's
    if mode == "mta":
        fam = families.FAMILIES["mta"]
        t = torch.nn.functional.normalize(text.float(), dim=-1)
        modes, _ = fam.aggregate(torch.nn.functional.normalize(feats, dim=-1), t, 100.0, cfg.mta)
        fed = replay(modes, text, "ms-tta", EngineConfig(view_mode="original")).predictions
        assert np.array_equal(fed, ours)


def test_a_familys_view_mode_is_a_checked_value():
    from mstta.engine.config import VIEW_MODES

    assert {"confident", "original", "zero", "mta"} <= set(VIEW_MODES)
    with pytest.raises(UserError, match="view_mode"):
        EngineConfig(view_mode="dota")


def test_rows_follow_the_datasets_protocol_unless_they_have_their_own_views():
    """Under view_mode "original" (the cross-domain sets) a row without its own views reads view 0
    alone (DOTA's, DPE's, OnZeta's, BCA's code runs one view there); ZERO, MTA and DMN read their
    crops on every dataset; the benchmark gives each row the views its code reads."""
    from mstta.bench.viewpolicy import view_kind
    from mstta.configfile import CONFIG_DIR

    s = make_stream(n=12, classes=4, dim=16, views=12, seed=7, gap=0.5, view_noise=1.0)
    text, feats = torch.tensor(s["text"]), torch.tensor(s["features"], dtype=torch.float32)
    cfg = EngineConfig(view_mode="original")
    dtd = load_dataset_config(CONFIG_DIR / "dtd.yaml")
    for name in list_methods():
        m = get_method(name)
        if m.family == CACHE:
            continue
        kw = tower_kw(name, 4, 16)
        views = replay(feats, text, name, cfg, **kw).predictions
        everything = replay(feats, text, name, EngineConfig(), **kw).predictions
        if m.augment is None:
            assert np.array_equal(views, replay(feats[:, :1], text, name, cfg).predictions), name
            assert view_kind(name, dtd) == dtd.bench.augment
        else:
            assert np.array_equal(views, everything), name
            assert view_kind(name, dtd) == m.augment
