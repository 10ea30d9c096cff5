"""Shared by the family tests: generated float64 streams (the references' inputs) and an engine's
scores over a stream."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from synthetic import make_stream

# streams x views x classes every family is held to its reference on
CASES = [(C, V, seed) for C in (2, 10, 1000) for V in (1, 64) for seed in range(3)]


def unit_stream(C, V, seed, n=24, dim=32):
    """A float64 stream [n, V, d] and text [C, d], rows unit in float64 (the reference's inputs)."""
    s = make_stream(n=n, classes=C, dim=dim, views=V, seed=seed)
    f = torch.from_numpy(s["features"]).double()
    f = f if f.dim() == 3 else f[:, None]
    return F.normalize(f, dim=-1), F.normalize(torch.from_numpy(s["text"]).double(), dim=-1)


@functools.cache
def exact_ties() -> bool:
    """Whether this machine's products give a duplicated text row the same score as the row it copies,
    in the shapes the tie tests use (1 or 3 rows against 2 to 10 classes, the copy last). Some BLAS
    round a product's last columns apart from its first (AMD Zen 3 with MKL's AVX2 kernels: about one
    in two such products, by 1 ulp), so duplicated classes do not tie there: the tests built on an
    exact tie skip (`needs_exact_ties`), the others check within rounding (`argmax_agrees`)."""
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        for classes in range(2, 11):
            for rows in (1, 3):
                for _ in range(8):
                    x = torch.randn(rows, 32, generator=g, dtype=dtype)
                    t = torch.randn(classes, 32, generator=g, dtype=dtype)
                    t[-1] = t[0]
                    out = x @ t.T
                    if not torch.equal(out[:, 0], out[:, -1]):
                        return False
    return True


def needs_exact_ties():
    """A test built on duplicated classes tying exactly: skipped where this machine's products do not tie them."""
    reason = "this machine's products round a duplicated class apart (seen on AMD Zen 3 with MKL): no exact tie"
    return pytest.mark.skipif(not exact_ties(), reason=reason)


def argmax_agrees(scores, expected, first_argmax, tol=1e-9) -> bool:
    """Each row's prediction is the reference's (`first_argmax`: ties to the first class), or where this
    machine's products do not tie duplicated classes (`exact_ties`), any class the reference scores
    within tol of its top (one that ties it in exact arithmetic)."""
    want = [first_argmax(r) for r in expected]
    got = [int(i) for i in np.asarray(scores).argmax(1)]
    if exact_ties():
        return got == want
    warnings.warn("this machine's products round duplicated classes apart: ties checked within rounding", stacklevel=2)
    return all(expected[i][g] >= expected[i][w] - tol for i, (g, w) in enumerate(zip(got, want)))


def run(engine, feats):
    """(scores [n, C], probs [n, C]) of stepping `engine` over `feats`, as numpy arrays."""
    rows = [engine.step(x) for x in feats]
    return torch.stack([r.logits for r in rows]).numpy(), torch.stack([r.probs for r in rows]).numpy()


def register_method(monkeypatch, row) -> None:
    """Add a registry row for this test only (undone at its end), as a new family's row would be."""
    from mstta.engine import methods

    # no public seam adds a row (a method is registered by code, mstta/engine/methods.py or a family's METHODS)
    monkeypatch.setitem(methods._METHODS, row.name, row)


HOST_READS = ("item", "tolist", "__int__", "__float__", "__bool__", "__index__", "numpy", "cpu")


def assert_no_host_reads(method, feats, text, monkeypatch, warm=6):
    """Step a warm engine of `method` over feats[warm:] with every tensor -> Python number conversion
    failing the test (on a GPU each would stall it): the guard is checked live, and the guarded
    steps' scores equal those of an unguarded twin engine."""
    from mstta import Engine

    engine, twin = Engine(text, method), Engine(text, method)
    for x in feats[:warm]:
        engine.step(x)
    with monkeypatch.context() as mp:
        for name in HOST_READS:
            mp.setattr(torch.Tensor, name, lambda *a, _n=name, **k: pytest.fail(f"Tensor.{_n} in step()"))
        with pytest.raises(pytest.fail.Exception, match=r"Tensor\.item in step"):  # the guard is live
            torch.zeros(2).sum().item()
        guarded = [engine.step(x).logits for x in feats[warm:]]
    want = [twin.step(x).logits for x in feats][warm:]
    assert len(guarded) == len(feats) - warm > 0
    assert all(torch.equal(a, b) for a, b in zip(guarded, want))


def feature_methods() -> list[str]:
    """The registry's rows that run on features alone: the prompt-tuning rows (tpt, c-tpt) also need
    a model's text tower, and tests/test_family_tpt.py runs them behind Engine, MultiEngine, replay."""
    from mstta.engine.methods import list_methods, needs_text_tower

    return [m for m in list_methods() if not needs_text_tower(m)]


def tower_kw(method: str, classes: int, dim: int) -> dict:
    """`text_tower=` for a prompt-tuning row (a tiny random open_clip CLIP of `dim` dims, its
    classes named c0, c1, ...), else nothing."""
    from reference_tpt import tiny_clip

    from mstta.engine.methods import needs_text_tower
    from mstta.features.text_tower import TextTower

    if not needs_text_tower(method):
        return {}
    import open_clip

    return {"text_tower": TextTower(tiny_clip(dim=dim), open_clip.tokenize, [f"c{i}" for i in range(classes)])}
