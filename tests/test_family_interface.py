"""The one interface of a method family (`mstta.engine.families.base.Family`, `check_family`): every
registered family declares it, the check names what a module lacks, and a toy family added by the
route of docs/architecture.md ("Adding a method") runs everywhere a shipped family runs."""

from __future__ import annotations

import types
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
from helpers_family import register_method
from synthetic import make_stream

from mstta import Engine, EngineConfig, MultiEngine, get_method, list_methods, replay
from mstta.checks import check_num
from mstta.engine import families
from mstta.engine.config import FAMILY_SECTIONS
from mstta.engine.engine import RUNNERS
from mstta.engine.families.base import CACHE, Method, StepOut, check_family


def test_every_registered_family_declares_the_interface():
    assert list(families.FAMILIES)[0] == CACHE
    for name, fam in families.FAMILIES.items():
        assert fam.NAME == name
        assert check_family(fam, own_runner=name in RUNNERS) == [], name
    rows = [r.name for fam in families.FAMILIES.values() for r in fam.METHODS]
    assert rows == list_methods()  # the registry is the families' rows, in their order
    cfg = EngineConfig()
    assert FAMILY_SECTIONS == tuple(n for n in families.FAMILIES if n != CACHE)
    for name, fam in families.FAMILIES.items():  # a family's functions get its own Params, nothing else
        assert isinstance(cfg.family_params(name), fam.Params), name


def test_the_cache_family_params_are_the_configs_top_level_keys():
    cfg = EngineConfig(capacity=5, lam=2.0, neg_alpha=0.3)
    p = cfg.family_params(CACHE)
    assert (p.capacity, p.lam, p.neg_alpha) == (5, 2.0, 0.3)
    with pytest.raises(Exception, match="bad value for 'capacity'"):
        EngineConfig(capacity=0)  # checked by the cache family's Params


def test_check_family_names_what_a_module_lacks():
    @dataclass
    class Params:
        rate: float = 0.5

    bad = types.SimpleNamespace(
        NAME="bad",
        METHODS=(
            Method(name="bad", title="Bad", summary="x", family="other"),
            Method(name="bad2", title="Bad 2", summary="x", family="bad", settings={"cache": True}),
        ),
        Params=Params,
        state_bytes=lambda C, d, cfg: 0,  # the old parameter name
        init=lambda text, p, logit_scale, length: {},
        DATASET_PARAMS={"dtd": {"nope": 1}},
    )
    problems = check_family(bad)
    assert any(p.startswith("METHODS: row 'bad' names family 'other'") for p in problems)
    assert "METHODS: row 'bad2' has settings dict, not a RowSettings" in problems  # a family's switches are typed
    assert any(p.startswith("state_bytes(") for p in problems)
    assert "step: a function is missing" in problems
    assert any("DATASET_PARAMS['dtd']: unknown keys ['nope']" in p for p in problems)
    assert check_family(bad, own_runner=True) != []  # the rows and state_bytes are still wrong
    bad.READS_LENGTH, bad.replay = True, lambda x, text, p, logit_scale: None  # a piece would not know N
    assert "replay('x', 'text', 'p', 'logit_scale'): expected replay(x, text, p, logit_scale, length)" in check_family(
        bad, own_runner=True
    )


# ---------------------------------------------------------------- the route, followed by a toy family
# 1. A module: NAME, METHODS (a `+ms` row sets mean_shift), Params (checked), state_bytes, init, step.
@dataclass
class ToyParams:
    rate: float = 0.25  # how far a class's centre moves toward each sample it wins

    def __post_init__(self) -> None:
        check_num(self, "rate", 0.0, 1.0)


def _init(text, p, logit_scale, length):
    return {"mu": text.clone()}


def _step(state, x, text, p, logit_scale, shift):
    f = x[0]
    clip = logit_scale * (text @ f)
    z = shift(f.unsqueeze(0))[0]
    scores = clip + logit_scale * (state["mu"] @ z)
    c = scores.argmax()
    state["mu"][c] = torch.nn.functional.normalize(state["mu"][c] + p.rate * z, dim=-1)
    h = -(torch.softmax(clip, -1) * torch.log_softmax(clip, -1)).sum()
    return StepOut(scores, clip, h, f, torch.softmax(scores, -1))


TOY = types.SimpleNamespace(
    NAME="toy",
    METHODS=(
        Method(name="toy", title="Toy", summary="a family written by the test", family="toy"),
        Method(name="toy+ms", title="Toy + MS", summary="its +ms row", family="toy", mean_shift=True),
    ),
    Params=ToyParams,
    state_bytes=lambda C, d, p: 4 * C * d,
    init=_init,
    step=_step,
)


# 3. Its section of EngineConfig (`engine: toy: {...}`, `--set toy.rate=...`).
@dataclass
class ToyConfig(EngineConfig):
    toy: ToyParams = field(default_factory=ToyParams)


@pytest.fixture
def toy(monkeypatch):
    # 2. Registered: the module in FAMILIES, its rows in the registry (what import time does for a
    # module listed in mstta/engine/families/__init__.py).
    monkeypatch.setitem(families.FAMILIES, "toy", TOY)
    for row in TOY.METHODS:
        register_method(monkeypatch, row)
    return TOY


def _loop(feats, text, rate):
    """The toy family as a plain float64 loop (no mean shift)."""
    mu = text.copy()
    out = []
    for x in feats:
        f = x[0]
        scores = 100 * (text @ f) + 100 * (mu @ f)
        c = int(np.argmax(scores))
        mu[c] = (mu[c] + rate * f) / np.linalg.norm(mu[c] + rate * f)
        out.append(c)
    return out


def test_a_toy_family_added_by_the_route_runs_everywhere(toy):
    assert check_family(toy) == []
    s = make_stream(n=30, classes=5, dim=12, seed=2)
    text = torch.nn.functional.normalize(torch.tensor(s["text"], dtype=torch.float64), dim=-1)
    feats = torch.nn.functional.normalize(torch.tensor(s["features"], dtype=torch.float64), dim=-1)[:, None]
    cfg = ToyConfig(toy=ToyParams(rate=0.5))
    engine = Engine(text, "toy", cfg)
    steps = [engine.step(x).prediction for x in feats]
    assert steps == _loop(feats.numpy(), text.numpy(), 0.5)
    assert steps != _loop(feats.numpy(), text.numpy(), 0.0)  # its own Params reached its step
    assert replay(feats, text, "toy", cfg).predictions.tolist() == steps
    multi = MultiEngine(text, "toy", cfg, streams=2)
    both = [multi.step(torch.stack([x, x])).predictions.tolist() for x in feats]
    assert [a for a, _ in both] == steps and [b for _, b in both] == steps
    ms0 = Engine(text, "toy+ms", ToyConfig(toy=ToyParams(rate=0.5), alpha=0.0))
    assert [ms0.step(x).prediction for x in feats] == steps  # +ms at alpha = 0 is the base row
    assert get_method("toy+ms").mean_shift and "toy" in list_methods()


@pytest.mark.parametrize("method", ["ms-tta", "dota"])
def test_an_engine_copies_and_pickles_with_its_runner(method):
    import copy
    import pickle

    text = torch.nn.functional.normalize(torch.randn(5, 8, generator=torch.Generator().manual_seed(0)), dim=-1)
    feats = torch.randn(6, 8, generator=torch.Generator().manual_seed(1))
    engine = Engine(text, method)
    engine.step(feats[0])
    for twin in (copy.deepcopy(engine), pickle.loads(pickle.dumps(engine))):
        assert type(twin) is Engine and twin.runner is not engine.runner and twin.n_seen == 1
    twin = copy.deepcopy(engine)
    assert [engine.step(x).prediction for x in feats[1:]] == [twin.step(x).prediction for x in feats[1:]]
    assert engine.n_seen == twin.n_seen == 6
