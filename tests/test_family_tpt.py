"""TPT and C-TPT (mstta.engine.families.tpt, ctpt) against an independent autograd reference
(tests/reference_tpt.py) on a tiny open_clip CLIP built in the test, and the text tower
(mstta.features.text_tower) against open_clip's own `encode_text`."""

from __future__ import annotations

import copy
import json

import numpy as np
import open_clip
import pytest
import torch
from helpers_cli import run_bench
from reference_tpt import ReferenceTPT, tiny_clip
from synthetic import make_stream

from mstta import Engine, EngineConfig, MultiEngine, UserError, get_method, replay
from mstta.engine.families import ctpt, tpt
from mstta.features.format import load_features, save_features
from mstta.features.models import load_clip
from mstta.features.text_tower import TextTower, text_tower

WORDS = ["cat", "dog", "golden_retriever", "sea lion", "tree", "car", "ship", "apple pie", "x", "zebra"]


@pytest.fixture(scope="module")
def clip():
    return tiny_clip(seed=0)


def tower(clip, C):
    return TextTower(clip, open_clip.tokenize, WORDS[:C])


def stream(C, seed, n=8, V=64):
    s = make_stream(n=n, classes=C, dim=32, views=V, seed=seed)
    return torch.from_numpy(s["features"]).float()


def test_tower_equals_encode_text(clip):
    """With ctx = the initial context the tower is open_clip's encode_text of the prompts."""
    t = tower(clip, 10)
    want = clip.encode_text(open_clip.tokenize([f"a photo of a {w.replace('_', ' ')}." for w in WORDS]), normalize=True)
    assert torch.allclose(t(t.ctx_init), want, atol=1e-6)
    moved = t.ctx_init + 0.5 * torch.randn(t.ctx_init.shape, generator=torch.Generator().manual_seed(0))
    assert not torch.allclose(t(moved), want, atol=1e-3)  # the context really enters


@pytest.mark.parametrize("C", [2, 10])
@pytest.mark.parametrize("method,lam", [("tpt", 0.0), ("c-tpt", 50.0)])
def test_against_reference(clip, C, method, lam):
    """100% of predictions, the tuned context within 1e-5 and the same 6 selected views."""
    x = stream(C, seed=C)
    ref = ReferenceTPT(clip, WORDS[:C], lam=lam)
    t = tower(clip, C)
    eng = Engine(t.initial(), method, EngineConfig(), text_tower=t)
    moved = 0
    for i, xi in enumerate(x):
        r, o = ref.step(xi.numpy()), eng.step(xi)
        st = eng.states[0]
        assert o.prediction == r["pred"], f"sample {i}"
        assert torch.allclose(o.logits, r["scores"], atol=1e-4)
        assert (st["ctx"] - r["ctx"]).abs().max() < 1e-5
        assert st["selected"].tolist() == r["idx"].tolist() and len(r["idx"]) == 6
        moved += float((st["ctx"] - t.ctx_init).abs().max()) > 1e-3
    assert moved == len(x)  # every sample's step moved the prompt


@pytest.mark.parametrize("C", [2, 10])
@pytest.mark.parametrize("method,lam", [("tpt", 0.0), ("c-tpt", 50.0)])
def test_batched_replay_equals_reference_and_steps(clip, C, method, lam, monkeypatch):
    """The replay tunes chunks of samples at once (`tpt.replay_stream`, chunks of 4 here on the pool's
    workers): the reference's predictions on 100% of samples and its contexts within 1e-5, and the
    per-sample engine loop's outputs (`online=True`) within 5e-6."""
    monkeypatch.setattr(tpt, "MAX_CHUNK", 4)
    x = stream(C, seed=10 + C, n=10)
    ref = ReferenceTPT(clip, WORDS[:C], lam=lam)
    t = tower(clip, C)
    want = [ref.step(xi.numpy()) for xi in x]
    got = replay(x, t.initial(), method, text_tower=t, keep_probs=True)
    steps = replay(x, t.initial(), method, text_tower=t, keep_probs=True, online=True)
    assert got.predictions.tolist() == [int(r["pred"]) for r in want]
    # a chunk's products round apart from one row's on some BLAS: 1.1e-6 on AMD Zen 3's MKL
    assert np.array_equal(got.predictions, steps.predictions) and np.abs(got.probs - steps.probs).max() < 5e-6
    unit = torch.nn.functional.normalize(x, dim=-1)
    ctx, idx = tpt.tune_batch(unit, t, tpt.Params(), lam)
    assert max(float((c - r["ctx"]).abs().max()) for c, r in zip(ctx, want)) < 1e-5
    assert [i.tolist() for i in idx] == [r["idx"].tolist() for r in want]


def test_reset_per_sample(clip):
    """The prompt and the optimiser are reset before every sample: the same sample twice, the same output."""
    t = tower(clip, 10)
    x = stream(10, seed=3, n=3)
    eng = Engine(t.initial(), "tpt", text_tower=t)
    first = eng.step(x[0]).logits.clone()
    eng.step(x[1])
    assert torch.equal(eng.step(x[0]).logits, first)


def test_ctpt_lambda_zero_is_tpt(clip):
    t = tower(clip, 10)
    x = stream(10, seed=4, n=4)
    a = replay(x, t.initial(), "tpt", text_tower=t, keep_probs=True)
    b = replay(x, t.initial(), "c-tpt", EngineConfig(ctpt=ctpt.Params(lam=0.0)), text_tower=t, keep_probs=True)
    assert np.array_equal(a.predictions, b.predictions) and np.array_equal(a.probs, b.probs)
    c = replay(x, t.initial(), "c-tpt", text_tower=t, keep_probs=True)
    assert not np.array_equal(a.probs, c.probs)  # lam = 50 changes the step


def test_ms_alpha_zero_is_tpt_and_multi(clip):
    t = tower(clip, 10)
    x = stream(10, seed=5, n=5)
    a = replay(x, t.initial(), "tpt", text_tower=t, keep_probs=True, online=True)  # stepped, as tpt+ms is
    b = replay(x, t.initial(), "tpt+ms", EngineConfig(alpha=0.0), text_tower=t, keep_probs=True)
    assert np.array_equal(a.probs, b.probs)
    c = replay(x, t.initial(), "tpt+ms", text_tower=t, keep_probs=True)
    assert not np.array_equal(a.probs, c.probs)
    multi = MultiEngine(t.initial(), "tpt", streams=2, text_tower=t)
    out = multi.step(torch.stack([x[:2], x[2:4]]).transpose(0, 1)[0])
    assert out.logits.shape == (2, 10)


def test_rows_and_config():
    """The authors' values (tpt_classification.py argparse, C-TPT's scripts) and the marks."""
    p, c = tpt.Params(), ctpt.Params()
    assert (p.lr, p.weight_decay, p.selection, p.steps) == (5e-3, 0.01, 0.1, 1) and c.lam == 50.0
    for name in ("tpt", "c-tpt", "tpt+ms"):
        assert "not training-free" in get_method(name).marks
    assert copy.deepcopy(tower(tiny_clip(), 2)).model is not None


@pytest.mark.parametrize(
    "case,match",
    [
        ("one view", "at least 2"),
        ("nan", "NaN or infinite"),
        ("no tower", "text tower"),
        ("classes", "classes"),
        ("siglip", "CustomTextCLIP"),
    ],
)
def test_bad_input(clip, case, match):
    t = tower(clip, 10)
    x = stream(10, seed=6, n=1)[0]
    with pytest.raises(UserError, match=match):
        if case == "one view":
            Engine(t.initial(), "tpt", text_tower=t).step(x[:1])
        elif case == "nan":
            Engine(t.initial(), "tpt", text_tower=t).step(torch.where(torch.arange(64)[:, None] == 3, np.nan, x))
        elif case == "no tower":
            Engine(t.initial(), "tpt")
        elif case == "classes":
            Engine(t.initial()[:5], "c-tpt", text_tower=t)
        else:
            model = open_clip.CustomTextCLIP(
                embed_dim=32,
                vision_cfg={"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 16},
                text_cfg={"context_length": 16, "vocab_size": 1000, "width": 32, "heads": 2, "layers": 1},
            )
            TextTower(model, open_clip.tokenize, WORDS)


def _file(tmp_path, views=64, meta=True):
    s = make_stream(n=4, classes=3, dim=64, views=views, seed=8)
    names = ["cat", "dog", "car"]
    path = tmp_path / f"f{views}{meta}.npz"
    save_features(
        path,
        s["features"],
        s["text"],
        s["labels"],
        names,
        {"model": "mstta-tiny", "pretrained": "none"} if meta else {},
    )
    return path


def test_replay_cli_builds_the_feature_files_tower(tmp_path, capsys):
    """`mstta-bench replay --method tpt` loads the file's model for its text tower; equal to the library."""
    path = _file(tmp_path)
    code, out, err = run_bench(capsys, "replay", "--features", path, "--method", "tpt", "--json")
    assert code == 0, err
    fs = load_features(path)
    clip = load_clip("mstta-tiny", "none", "cpu", "fp32")
    want = replay(fs.features, fs.text, "tpt", text_tower=text_tower(clip, fs.classnames))
    assert json.loads(out)["accuracy"] == pytest.approx(100 * float(np.mean(want.predictions == fs.labels)), abs=0.01)


@pytest.mark.parametrize("views,meta,match", [(1, True, "at least 2"), (64, False, "names no model")])
def test_replay_cli_refusals(tmp_path, capsys, views, meta, match):
    code, _, err = run_bench(capsys, "replay", "--features", _file(tmp_path, views, meta), "--method", "c-tpt")
    assert code == 2 and len(err.strip().splitlines()) == 1 and match in err
