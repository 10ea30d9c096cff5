"""The scene-cut detector's fused Triton kernel (`drift_fused`, what a CUDA device runs) gives the
tensor path's cuts and state, run here on the CPU through Triton's interpreter (TRITON_INTERPRET=1,
set before the kernel's module is first imported)."""

from __future__ import annotations

import sys

import pytest
import torch
from test_cuda_graph import _scene_cut, as_graph, graph_step

from mstta import Engine, EngineConfig
from mstta.errors import UserError
from mstta.engine import drift_fused, graphs
from mstta.engine.drift import Drift, drift_step_t
from mstta.engine.forget import ForgetConfig


@pytest.fixture
def interpreted(monkeypatch):
    """The kernel built for Triton's interpreter (CPU tensors), and `drift_step_t` taking it on any
    device (MSTTA_DETECTOR_KERNEL=triton)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delitem(sys.modules, "mstta.engine.drift_kernel", raising=False)
    monkeypatch.setattr(drift_fused, "_built", [])
    monkeypatch.setattr(drift_fused, "_broken", False)
    monkeypatch.setenv(drift_fused.KERNEL_ENV, "triton")
    yield
    sys.modules.pop("mstta.engine.drift_kernel", None)


def _stream(n: int, streams: int, dim: int, seed: int = 0) -> torch.Tensor:
    """[n, S, D] features whose mean moves at 3n/5 (a cut for every stream)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, streams, dim, generator=g)
    x[3 * n // 5 :] += 2 * torch.randn(dim, generator=g)
    return x


@pytest.mark.parametrize("dim", [32, 100])  # 100 > DETECT_DIMS: read through the projection
def test_the_fused_step_gives_the_tensor_paths_cuts_and_state(interpreted, dim):
    fg = ForgetConfig(detect=True, detect_warmup=30, detect_slack=0.7, detect_threshold=4.3)
    S = 3
    fused, plain = Drift.empty(S, dim, "cpu", fg), Drift.empty(S, dim, "cpu", fg)
    got, want = [], []
    for i, x in enumerate(_stream(200, S, dim)):
        ok = None if i % 7 else torch.tensor([True, False, i % 2 == 0])  # streams that skip a step
        got.append(drift_fused.drift_step_fused(fused, x, fg, ok))
        want.append(_tensor_path(plain, x, fg, ok))
    got, want = torch.stack(got), torch.stack(want)
    assert want.any(dim=0).all()  # every stream cuts
    assert torch.equal(got, want)
    assert torch.equal(fused.n, plain.n)
    for name in ("me", "inv", "acc", "scale"):
        torch.testing.assert_close(getattr(fused, name), getattr(plain, name), rtol=1e-10, atol=1e-10)


def _tensor_path(d, x, fg, ok):
    """`drift_step_t` with the fused kernel off."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(drift_fused.KERNEL_ENV, "torch")
        return drift_step_t(d, x, fg, ok)


def test_an_engine_with_the_fused_detector_equals_the_eager_one_and_its_graph_holds_one_op_for_it(interpreted):
    """As under a CUDA graph (no host read), the engine with the fused detector predicts and cuts as
    the CPU's eager engine; its captured step holds one op for the detector where the tensor path
    holds about thirty."""
    f, t = _scene_cut(n=200)
    fg = ForgetConfig(detect=True, detect_warmup=30)
    cfg = EngineConfig(bank_size=40, k=3, cache_alpha=6.0, beta=3.0, forget=fg)
    static, eager = Engine(t, "tda+ms", cfg), Engine(t, "tda+ms", cfg)
    as_graph(static.runner)
    cuts = []
    for x in f[:-1]:
        a = graph_step(static.runner, x)
        r = eager.step(x)
        assert torch.equal(a.argmax(), r.logits.argmax()) and bool(static.last_cut[0]) == r.cut
        torch.testing.assert_close(a, r.logits, rtol=1e-5, atol=1e-5)
        cuts.append(r.cut)
    assert any(cuts)
    ops = graphs.step_ops(static.runner, f[-1].reshape(1, 1, -1))
    assert ops["drift_step"] == 1
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(drift_fused.KERNEL_ENV, "torch")
        plain = graphs.step_ops(static.runner, f[-1].reshape(1, 1, -1))
    assert "drift_step" not in plain and sum(plain.values()) - sum(ops.values()) >= 20


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: the kernel compiled for a GPU")
@pytest.mark.parametrize("dim", [32, 512])
def test_on_a_gpu_the_fused_step_gives_the_tensor_paths_cuts_and_state(dim):
    fg = ForgetConfig(detect=True, detect_warmup=30)
    assert drift_fused.wanted(torch.device("cuda"))
    fused, plain = Drift.empty(4, dim, "cuda", fg), Drift.empty(4, dim, "cuda", fg)
    got, want = [], []
    for x in _stream(300, 4, dim).cuda():
        got.append(drift_step_t(fused, x, fg))
        want.append(_tensor_path(plain, x, fg, None))
    assert torch.stack(want).any() and torch.equal(torch.stack(got), torch.stack(want))
    torch.testing.assert_close(fused.inv, plain.inv, rtol=1e-10, atol=1e-10)


def test_an_unknown_kernel_choice_is_refused_in_one_line(monkeypatch):
    monkeypatch.setenv(drift_fused.KERNEL_ENV, "cuda")
    with pytest.raises(UserError, match="MSTTA_DETECTOR_KERNEL='cuda': use auto, triton or torch"):
        drift_fused.wanted(torch.device("cpu"))


def test_on_a_cpu_the_tensor_path_runs_by_default(monkeypatch):
    monkeypatch.delenv(drift_fused.KERNEL_ENV, raising=False)
    assert not drift_fused.wanted(torch.device("cpu"))
