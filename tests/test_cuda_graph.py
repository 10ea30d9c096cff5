"""The step captured as a CUDA graph predicts exactly what the eager step does (needs a GPU)."""

from __future__ import annotations

import pytest
import torch
from synthetic import as_tensors, make_stream

from mstta import Engine, EngineConfig
from mstta.engine import graphs
from mstta.engine.forget import ForgetConfig


@pytest.mark.parametrize("method", ["ms-tta", "tda+ms", "baseline"])
@pytest.mark.parametrize("views,mode", [(1, "confident"), (8, "confident")])
def test_static_shape_step_equals_eager_on_cpu(method, views, mode):
    """What the graph captures (the whole ring buffer, empty rows masked) runs on the CPU too:
    the same predictions and state as the eager step over the filled prefix."""
    f, t, _ = as_tensors(make_stream(n=150, classes=7, dim=32, views=views, seed=4, noise=1.5))
    cfg = EngineConfig(bank_size=40, k=3, view_mode=mode, view_ratio=0.25, cache_alpha=6.0, beta=3.0)
    static, eager = Engine(t, method, cfg), Engine(t, method, cfg)
    for x in f:
        with torch.inference_mode():
            a = graphs.static_step(static, x.reshape(1, -1, x.shape[-1]), None)[0][0]
        static.seen += 1
        b = eager.step(x).logits
        assert torch.equal(a.argmax(), b.argmax())
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(static.pos.ent, eager.pos.ent)


@pytest.mark.parametrize("method", ["zero-shot", "baseline", "ms-tta", "tda", "tda+ms"])
@pytest.mark.parametrize("views,mode", [(1, "confident"), (8, "confident"), (8, "original")])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: a CUDA graph is captured on a GPU")
def test_graph_equals_eager(method, views, mode):
    f, t, _ = as_tensors(make_stream(n=200, classes=7, dim=32, views=views, seed=4, noise=1.5))
    cfg = EngineConfig(
        bank_size=64,
        k=3,
        view_mode=mode,
        view_ratio=0.25,
        cache_alpha=6.0,
        beta=3.0,
        neg_entropy_lower=0.05,
        neg_entropy_upper=0.9,
    )
    graph = Engine(t.cuda(), method, cfg)  # automatic on CUDA
    eager = Engine(t.cuda(), method, cfg, cuda_graph=False)
    assert graph.cuda_graph and not eager.cuda_graph
    a = torch.stack([graph.step(x.cuda()).logits for x in f])
    b = torch.stack([eager.step(x.cuda()).logits for x in f])
    assert torch.equal(a.argmax(1), b.argmax(1))
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert graph.graphs  # the graph was really captured and replayed
    sa, sb = graph.state_dict(), eager.state_dict()  # every state tensor the method has (zero-shot: no cache)
    assert sa.keys() == sb.keys()
    for key, value in sa.items():
        if isinstance(value, torch.Tensor):
            torch.testing.assert_close(value, sb[key], rtol=1e-4, atol=1e-4, msg=lambda m, k=key: f"{k}: {m}")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: a CUDA graph is captured on a GPU")
def test_graph_survives_reset_and_state_load():
    f, t, _ = as_tensors(make_stream(n=120, classes=5, dim=16, seed=1))
    a, b = (
        Engine(t.cuda(), "ms-tta", EngineConfig(bank_size=32)),
        Engine(t.cuda(), "ms-tta", EngineConfig(bank_size=32), cuda_graph=False),
    )
    for x in f[:50]:
        a.step(x.cuda())
        b.step(x.cuda())
    a.reset()
    b.reset()
    state = None
    for i, x in enumerate(f[50:]):
        if i == 30:
            state = b.state_dict()
            a.load_state_dict(state)
        assert a.step(x.cuda()).prediction == b.step(x.cuda()).prediction


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: a CUDA graph is captured on a GPU")
def test_boost_and_unbounded_run_eagerly():
    _, t, _ = as_tensors(make_stream(n=2, classes=5, dim=16, seed=1))
    assert not Engine(t.cuda(), "boostadapter").cuda_graph
    assert not Engine(t.cuda(), "ms-tta", EngineConfig(bank_size=None)).cuda_graph
    with pytest.raises(Exception, match="bounded bank"):
        Engine(t.cuda(), "ms-tta", EngineConfig(bank_size=None), cuda_graph=True)


FORGET = {
    "timeliness-detect": ForgetConfig("timeliness", horizon=10, detect=True, detect_warmup=30),
    "idle": ForgetConfig("idle", idle=12),
    "periodic": ForgetConfig("periodic", every=45),
}


def _scene_cut(n=160, views=1):
    """A stream whose features move along a new direction from sample n/2 on (a scene cut)."""
    f, t, _ = as_tensors(make_stream(n=n, classes=7, dim=32, views=views, seed=4, noise=1.5))
    move = torch.nn.functional.normalize(torch.randn(32, generator=torch.Generator().manual_seed(0)), dim=0)
    f[n // 2 :] = torch.nn.functional.normalize(f[n // 2 :] + move, dim=-1)
    return f, t


def as_graph(runner) -> None:
    """A runner on any device set to step as under a CUDA graph (`Streams.step_as_graph`)."""
    runner.step_as_graph(True)


def graph_step(runner, x: torch.Tensor) -> torch.Tensor:
    """`Streams.run` under a CUDA graph, on any device (`graphs.captured_step`) -> the logits [C]."""
    return graphs.captured_step(runner, x.reshape(1, -1, x.shape[-1]))[0][0]


@pytest.mark.parametrize("method", ["ms-tta", "tda+ms"])
@pytest.mark.parametrize("rule", list(FORGET))
def test_static_shape_step_with_forgetting_equals_eager_on_cpu(method, rule):
    """Forgetting inside the captured step (resets, expiries, the detector: device ops only, as under
    a graph: no host read, `host_reads` off)."""
    f, t = _scene_cut()
    cfg = EngineConfig(bank_size=40, k=3, cache_alpha=6.0, beta=3.0, forget=FORGET[rule])
    static, eager = Engine(t, method, cfg), Engine(t, method, cfg)
    as_graph(static.runner)
    cuts = 0
    for x in f:
        a = graph_step(static.runner, x)
        r = eager.step(x)
        assert torch.equal(a.argmax(), r.logits.argmax()) and bool(static.last_cut[0]) == r.cut
        torch.testing.assert_close(a, r.logits, rtol=1e-5, atol=1e-5)
        cuts += r.cut
    assert cuts > 0 or rule == "idle"


@pytest.mark.parametrize("method", ["ms-tta", "tda"])
@pytest.mark.parametrize("rule", list(FORGET))
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: a CUDA graph is captured on a GPU")
def test_graph_with_forgetting_equals_eager(method, rule):
    f, t = _scene_cut(views=8)
    cfg = EngineConfig(bank_size=64, k=3, view_ratio=0.25, cache_alpha=6.0, beta=3.0, forget=FORGET[rule])
    graph = Engine(t.cuda(), method, cfg)
    eager = Engine(t.cuda(), method, cfg, cuda_graph=False)
    a = [graph.step(x.cuda()) for x in f]
    b = [eager.step(x.cuda()) for x in f]
    assert graph.graphs and [r.cut for r in a] == [r.cut for r in b]
    la, lb = torch.stack([r.logits for r in a]), torch.stack([r.logits for r in b])
    assert torch.equal(la.argmax(1), lb.argmax(1))
    torch.testing.assert_close(la, lb, rtol=1e-4, atol=1e-4)


def test_the_captured_step_holds_no_op_of_the_periodic_rule():
    """Under a CUDA graph without the detector RDumb's resets run before the replay, so the step a
    graph captures holds `none`'s ops and the bank's restart offset only; on the device path (every
    step tests the clock) it holds more: the count sees the rule's ops."""
    f, t = _scene_cut()
    counts = {}
    for name, fg, before in (
        ("none", ForgetConfig(), False),
        ("before", ForgetConfig("periodic", every=45), True),
        ("inside", ForgetConfig("periodic", every=45), False),
    ):
        e = Engine(t, "tda+ms", EngineConfig(bank_size=40, k=3, forget=fg))
        as_graph(e.runner)
        e.runner.resets_before = before
        for x in f[:50]:  # a reset at sample 45
            graph_step(e.runner, x)
        counts[name] = graphs.step_ops(e.runner, f[50].reshape(1, 1, -1))
    assert not counts["none"] - counts["before"]
    assert counts["before"] - counts["none"] == {"sub": 1}  # the bank's row offset: clock - start
    assert sum((counts["inside"] - counts["before"]).values()) >= 8  # the clock's test and the resets' masks
