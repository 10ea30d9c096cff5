"""Forgetting's Triton kernels (`mstta.engine.fused`, what a CUDA device runs) give the tensor path's
cuts, state and slots: on a GPU compiled, on a CPU through Triton's interpreter (TRITON_INTERPRET=1,
set by conftest.py before Triton's first import)."""

from __future__ import annotations

import copy
import dataclasses
import math
import os

import pytest
import torch
from test_cuda_graph import FORGET, _scene_cut, as_graph, graph_step

from mstta import Engine, EngineConfig, replay
from mstta.engine import fused, graphs
from mstta.engine.cache import Bank, Cache, tensors
from mstta.engine.drift import Drift, drift_step_t
from mstta.engine.forget import ForgetConfig, timeliness_slot_t
from mstta.errors import UserError


@pytest.fixture
def dev(monkeypatch) -> torch.device:
    """The device the kernels run on here (CUDA, else the CPU through Triton's interpreter), the step
    taking them on any device (MSTTA_KERNELS=triton)."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    assert os.environ.get("TRITON_INTERPRET") == "1", "conftest.py sets TRITON_INTERPRET=1 where there is no GPU"
    monkeypatch.setattr(fused, "_broken", False)
    monkeypatch.setenv(fused.KERNEL_ENV, "triton")
    return torch.device("cpu")


def _on(record, device):
    """The record (`Drift`, `Bank`, `Cache`) with its tensors on the device."""
    held = (getattr(record, f.name) for f in dataclasses.fields(record))
    return type(record)(*(t.to(device) if isinstance(t, torch.Tensor) else t for t in held))


def _stream(n: int, streams: int, dim: int, seed: int = 0) -> torch.Tensor:
    """[n, S, D] features whose mean moves at 3n/5 (a cut for every stream)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, streams, dim, generator=g)
    x[3 * n // 5 :] += 2 * torch.randn(dim, generator=g)
    return x


@pytest.mark.parametrize("dim", [32, 72])  # 72 > DETECT_DIMS: read through the projection
def test_the_fused_step_gives_the_tensor_paths_cuts_and_state(dev, dim):
    fg = ForgetConfig(detect=True, detect_warmup=16, detect_slack=0.7, detect_threshold=4.3)
    S = 3
    kernel, plain = Drift.empty(S, dim, dev, fg), Drift.empty(S, dim, dev, fg)
    got, want = [], []
    for i, x in enumerate(_stream(90, S, dim).to(dev)):
        ok = None if i % 7 else torch.tensor([True, False, i % 2 == 0], device=dev)  # streams that skip a step
        got.append(fused.drift_step_fused(kernel, x, fg, ok))
        want.append(_tensor_path(plain, x, fg, ok))
    got, want = torch.stack(got), torch.stack(want)
    assert want.any(dim=0).all()  # every stream cuts
    assert torch.equal(got, want)
    assert torch.equal(kernel.n, plain.n)
    for name in ("me", "inv", "acc", "scale"):
        torch.testing.assert_close(getattr(kernel, name), getattr(plain, name), rtol=1e-10, atol=1e-10)


def _tensor_path(d, x, fg, ok):
    """`drift_step_t` with the fused kernel off."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(fused.KERNEL_ENV, "torch")
        return drift_step_t(d, x, fg, ok)


@pytest.mark.parametrize(
    "rule,kernels",
    [
        ("timeliness-detect", {"drift_step": 1, "timeliness_slot": 2, "vacate": 3}),
        ("idle", {"timeliness_slot": 2, "expire": 2, "mark_used": 2}),
    ],
)
def test_an_engine_with_the_kernels_equals_the_eager_one_and_its_graph_holds_one_op_for_each(dev, rule, kernels):
    """As under a CUDA graph (no host read), the engine with the kernels (TDA + MS: the bank and two
    caches) predicts, cuts and keeps its caches as the CPU's eager engine; its captured step holds one
    op for each kernel where the tensor path holds about thirty for the detector and several a cache
    for each rule."""
    f, t = _scene_cut(n=130)
    cfg = EngineConfig(bank_size=40, k=3, cache_alpha=6.0, beta=3.0, forget=FORGET[rule])
    static, eager = Engine(t.to(dev), "tda+ms", cfg), Engine(t, "tda+ms", cfg)  # eager: the CPU's
    as_graph(static.runner)
    cuts = []
    for x in f[:-1]:
        a = graph_step(static.runner, x.to(dev)).cpu()
        r = eager.step(x)
        assert torch.equal(a.argmax(), r.logits.argmax()) and bool(static.last_cut[0]) == r.cut
        torch.testing.assert_close(a, r.logits, rtol=1e-5, atol=1e-5)
        cuts.append(r.cut)
    assert any(cuts) or rule == "idle"
    for name in ("pos", "neg"):
        mine, theirs = getattr(static.runner, name), getattr(eager.runner, name)
        assert torch.equal(mine.time.cpu(), theirs.time) and torch.equal(mine.ent.cpu(), theirs.ent)
    ops = graphs.step_ops(static.runner, f[-1].reshape(1, 1, -1).to(dev))
    assert {k: ops[k] for k in kernels} == kernels
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(fused.KERNEL_ENV, "torch")
        plain = graphs.step_ops(static.runner, f[-1].reshape(1, 1, -1).to(dev))
    assert not set(kernels) & set(plain) and sum(plain.values()) > sum(ops.values()) + 2 * len(kernels)


def test_the_vacate_kernel_empties_a_banks_first_rows_and_a_caches_slots(dev):
    g = torch.Generator().manual_seed(3)
    bank, plain = Bank.empty(3, 16, 4, torch.float32, dev), Bank.empty(3, 16, 4, torch.float32, dev)
    for b in (bank, plain):
        b.time.copy_(torch.arange(48).view(3, 16))
        b.bias.zero_()
    cut, clock = torch.tensor([True, False, True], device=dev), torch.tensor([7, 8, 9], device=dev)
    assert fused.vacate(bank, cut, 10, clock)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(fused.KERNEL_ENV, "torch")
        plain.forget(cut, clock, 10)
    assert all(torch.equal(a, b) for a, b in zip(tensors(bank), tensors(plain)))
    assert (
        bank.time[0, 9] == -1 and bank.time[0, 10] == 10 and bank.time[1, 0] == 16 and bank.start.tolist() == [7, 0, 9]
    )
    cache = _on(_random_cache(g, 3, 4, 2), dev)
    theirs = copy.deepcopy(cache)
    cache.forget(cut)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(fused.KERNEL_ENV, "torch")
        theirs.forget(cut)
    assert all(torch.equal(a, b) for a, b in zip(tensors(cache), tensors(theirs)))


@pytest.mark.parametrize("ok", [None, [True, False, True, True]])
def test_the_expire_and_mark_kernels_equal_the_tensor_ops(dev, ok):
    g = torch.Generator().manual_seed(5)
    ok = None if ok is None else torch.tensor(ok, device=dev)
    for _ in range(10):
        cache = _random_cache(g, 4, 300, 4, used=True)  # 1,200 slots a stream: two blocks
        cache.bias.copy_(torch.where(torch.isfinite(cache.ent).view(4, -1), -1.5, float("-inf")))
        cache = _on(cache, dev)
        theirs = copy.deepcopy(cache)
        clock = torch.randint(30, 60, (4,), generator=g).to(dev)
        w = torch.randint(0, 5, (4, 1200), generator=g).float().to(dev)  # ties: the first one is marked
        cache.expire(clock, 12, ok)
        cache._mark_used(w, clock, ok, False)
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(fused.KERNEL_ENV, "torch")
            theirs.expire(clock, 12, ok)
            theirs._mark_used(w, clock, ok, False)
        assert all(torch.equal(a, b) for a, b in zip(tensors(cache), tensors(theirs)))
    assert (cache.time == -1).any() and (cache.used == clock.view(-1, 1, 1)).any()


def _random_cache(g: torch.Generator, S: int, C: int, Q: int, used: bool = False) -> Cache:
    """A cache whose slots hold entropies from a few values (ties), times from a few steps (ties),
    and about a quarter empty (entropy +inf, time -1); `used`: marks at a few steps."""
    cache = Cache.empty(S, C, Q, 4, "cpu", values=False, used=used)
    cache.ent.copy_(torch.randint(0, 4, (S, C, Q), generator=g).float() * 0.25)
    cache.time.copy_(torch.randint(0, 6, (S, C, Q), generator=g) * 7)
    if used:
        cache.used.copy_(torch.randint(-1, 8, (S, C, Q), generator=g) * 7)
    empty = torch.rand(S, C, Q, generator=g) < 0.25
    cache.ent.masked_fill_(empty, float("inf"))
    cache.time.masked_fill_(empty, -1)
    return cache


@pytest.mark.parametrize("horizon,weight", [(1, 1.0), (10, 0.3), (50, 0.0)])
def test_the_timeliness_kernel_picks_the_tensor_rules_slot(dev, horizon, weight):
    g = torch.Generator().manual_seed(horizon)
    S, C, Q = 6, 4, 3
    for _ in range(40):
        cache = _on(_random_cache(g, S, C, Q), dev)
        label = torch.randint(0, C, (S,), generator=g).to(dev)
        h = (torch.randint(0, 6, (S,), generator=g).float() * 0.25).to(dev)  # ties with the scores at weight 0
        clock = torch.randint(35, 60, (S,), generator=g).to(dev)
        got = fused.timeliness_slot_fused(cache, label, h, clock, horizon, weight, math.log(C))
        row = label.view(S, 1, 1).expand(S, 1, Q)
        rows = (cache.ent.gather(1, row).squeeze(1), cache.time.gather(1, row).squeeze(1))
        want = timeliness_slot_t(*rows, h, clock, horizon, weight, math.log(C))
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: where `auto` takes the kernels")
def test_on_a_gpu_the_step_takes_the_kernels_by_default(monkeypatch):
    monkeypatch.delenv(fused.KERNEL_ENV, raising=False)
    assert fused.wanted(torch.device("cuda")) and not fused.wanted(torch.device("cpu"))


def test_an_unknown_kernel_choice_is_refused_in_one_line_when_the_engine_is_made(monkeypatch):
    _, t = _scene_cut(n=2)
    monkeypatch.setenv(fused.KERNEL_ENV, "cuda")
    for make in (lambda: Engine(t, "ms-tta"), lambda: replay(torch.zeros(2, 1, t.shape[1]), t, "tda")):
        with pytest.raises(UserError, match="MSTTA_KERNELS='cuda': use auto, triton or torch"):
            make()


def test_on_a_cpu_the_tensor_path_runs_by_default(monkeypatch):
    monkeypatch.delenv(fused.KERNEL_ENV, raising=False)
    assert not fused.wanted(torch.device("cpu"))


@pytest.mark.parametrize("method", ["ms-tta", "tda"])
def test_with_the_kernels_no_forget_setting_adds_a_tenth_to_the_captured_steps_ops(dev, method):
    """Issue 29's goal (forgetting adds at most 10% to the step) by the GPU's measure of a graph's
    step of tiny kernels, its op count (`benchmarks/engine.py --parts graph_ops`): every rule and the
    detector, with forgetting's kernels as CUDA runs them, against `none`'s step with them."""
    f, t = _scene_cut(n=12)
    counts = {}
    for name, fg in {
        "none": ForgetConfig(),
        "timeliness": ForgetConfig("timeliness"),
        "idle": ForgetConfig("idle"),
        "periodic": ForgetConfig("periodic", every=5),
        "detect": ForgetConfig(detect=True),
        "timeliness+detect": ForgetConfig("timeliness", detect=True),
    }.items():
        runner = Engine(t.to(dev), method, EngineConfig(bank_size=40, k=3, forget=fg)).runner
        as_graph(runner)
        for x in f[:-1]:  # a periodic reset at sample 10, before the count
            graph_step(runner, x.to(dev))
        counts[name] = sum(graphs.step_ops(runner, f[-1].reshape(1, 1, -1).to(dev)).values())
    assert all(n <= 1.1 * counts["none"] for n in counts.values()), counts
