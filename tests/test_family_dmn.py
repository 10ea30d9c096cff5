"""DMN-ZS (mstta.engine.families.dmn) against the independent reference (tests/reference_dmn.py), the
engine/replay/MultiEngine contracts, constructed ties, the replace rules and the test-label search
of the fusion weight (also through `mstta-bench replay --search-on-labels`)."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import reference_dmn as ref
import torch
from helpers_cli import run_bench
from helpers_family import needs_exact_ties
from synthetic import make_stream

from mstta import Engine, MultiEngine, replay
from mstta.bench.config import load_dataset_config
from mstta.engine import functional as Fn
from mstta.engine.config import EngineConfig
from mstta.engine.families import dmn
from mstta.engine.methods import get_method
from mstta.errors import UserError
from mstta.features.format import save_features


def stream(C, V, seed, n, d=32, dtype=torch.float64):
    s = make_stream(n=n, classes=C, dim=d, views=V, seed=seed)
    x = torch.nn.functional.normalize(torch.from_numpy(s["features"]).to(dtype), dim=-1)
    text = torch.nn.functional.normalize(torch.from_numpy(s["text"]).to(dtype), dim=-1)
    return (x.unsqueeze(1) if V == 1 else x), text, s["labels"]


def config(**kw):
    ms = {k: kw.pop(k) for k in ("alpha", "k", "bank_size") if k in kw}
    return EngineConfig(dmn=dmn.Params(**kw), **ms)


def ref_kwargs(cfg, method="dmn-zs"):
    p = cfg.dmn
    return dict(
        memory_size=p.memory_size,
        selection_p=p.selection_p,
        beta=p.beta,
        weight=p.weight,
        logit_scale=cfg.logit_scale,
        replace=p.replace,
        mean_shift=method.endswith("+ms"),
        k=cfg.k,
        alpha=cfg.alpha,
        bank_size=cfg.bank_size,
    )


def engine_rows(x, text, cfg, method="dmn-zs"):
    e = Engine(text, method, cfg)
    rows = [e.step(v) for v in x]
    return torch.stack([r.logits for r in rows]), torch.stack([r.probs for r in rows]), rows


def check_against_reference(x, text, cfg, method="dmn-zs"):
    scores, probs, rows = engine_rows(x, text, cfg, method)
    r_scores, r_clip, _, _ = ref.run(x.numpy(), text.numpy(), **ref_kwargs(cfg, method))
    assert np.array_equal(scores.argmax(-1).numpy(), r_scores.argmax(-1))  # 100% agreement
    np.testing.assert_allclose(scores.numpy(), r_scores, rtol=0, atol=1e-9)
    np.testing.assert_allclose(probs.numpy(), r_scores / (1 + cfg.dmn.weight), rtol=0, atol=1e-9)
    np.testing.assert_allclose(torch.stack([r.clip_logits for r in rows]).numpy(), r_clip, rtol=0, atol=1e-9)
    return scores


# memory_size 2 makes classes overflow (the replace rule runs) on the short streams
@pytest.mark.parametrize("C,n,M,d", [(2, 30, 2, 32), (10, 40, 2, 32), (1000, 20, 50, 24)])
@pytest.mark.parametrize("V", [1, 64])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_engine_matches_reference(C, n, M, d, V, seed):
    x, text, _ = stream(C, V, seed, n, d)
    check_against_reference(x, text, config(memory_size=M))


@pytest.mark.parametrize("replace", ["official", "tta-vlm"])
@pytest.mark.parametrize("V", [1, 5, 12])
def test_replace_rules_and_few_views(replace, V):
    x, text, _ = stream(4, V, 3, 40)
    scores = check_against_reference(x, text, config(memory_size=3, replace=replace))
    assert torch.isfinite(scores).all()


@pytest.mark.parametrize("overrides", [{}, {"k": 3, "bank_size": 4}, {"alpha": 0.3, "memory_size": 2}])
def test_ms_row_matches_reference(overrides):
    x, text, _ = stream(5, 12, 4, 30)
    check_against_reference(x, text, config(**overrides), "dmn-zs+ms")


def test_rules_differ_and_ms_changes_predictions():
    """The tests above can fail: the TTA-VLM rule and the MS keys change the scores here."""
    x, text, _ = stream(4, 1, 5, 60)
    base = engine_rows(x, text, config(memory_size=2))[0]
    assert not torch.allclose(base, engine_rows(x, text, config(memory_size=2, replace="tta-vlm"))[0])
    assert not torch.allclose(base, engine_rows(x, text, config(memory_size=2), "dmn-zs+ms")[0])


# ----------------------------------------------------------------- constructed ties
@needs_exact_ties()
def test_ties_duplicate_classes_samples_and_views():
    """Two identical text rows (p_bar ties: the first class), every sample repeated (stored entropies
    tie: the official last max slot, TTA-VLM's first) and identical views (stable view order). Not
    where this machine's products round the copied class apart (`exact_ties`): then the copy wins some
    samples by 1 ulp and its memory fills in the original's place."""
    x, text, _ = stream(4, 3, 6, 12)
    text = torch.cat([text, text[:1]])  # class 4 = class 0
    x = torch.cat([x, x, x])  # equal entropies in the memory
    x[:, 2] = x[:, 1]  # tied views
    for replace in ("official", "tta-vlm"):
        check_against_reference(x, text, config(memory_size=2, replace=replace))
    label = dmn.zero_shot(x[:1], text, 100.0, dmn.Params()).label
    assert int(label) != 4


def test_replace_slot_rules():
    assert dmn.replace_slot([0.5, 0.9, 0.9, 0.1], 0.2, "official") == 2  # last of the tied maxima
    assert dmn.replace_slot([0.5, 0.9, 0.9, 0.1], 0.2, "tta-vlm") == 1  # the first
    assert dmn.replace_slot([0.5, 0.9], 0.95, "official") is None  # not below any stored
    assert dmn.replace_slot([0.5, 0.9], 0.95, "tta-vlm") == 1  # always overwrites


# ----------------------------------------------------------------- replay, streams, state
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("V,M", [(1, 2), (1, 50), (12, 3)])
def test_replay_equals_stepping(dtype, V, M):
    x, text, _ = stream(6, V, 7, 120, dtype=dtype)
    cfg = config(memory_size=M)
    online = replay(x, text, "dmn-zs", cfg, online=True, keep_probs=True)
    fast = replay(x, text, "dmn-zs", cfg, keep_probs=True)
    assert np.array_equal(online.predictions, fast.predictions)
    assert np.array_equal(online.clip_predictions, fast.clip_predictions)
    np.testing.assert_allclose(online.probs, fast.probs, rtol=0, atol=1e-5 if dtype == torch.float32 else 1e-12)
    small = dmn.replay_parts(x, text, cfg.dmn, cfg.logit_scale, chunk=7)  # chunks cut through entries' lives
    np.testing.assert_allclose(
        small[2].numpy(),
        dmn.replay_parts(x, text, cfg.dmn, cfg.logit_scale)[2].numpy(),
        rtol=0,
        atol=1e-5 if dtype == torch.float32 else 1e-12,
    )


def test_replay_matches_reference_at_1000_classes():
    x, text, _ = stream(1000, 1, 8, 20, d=32)
    clip, p_text, p_mem = dmn.replay_parts(x, text, dmn.Params(), 100.0)
    r_scores, r_clip, r_text, r_mem = ref.run(x.numpy(), text.numpy())
    np.testing.assert_allclose(p_mem.numpy(), r_mem, rtol=0, atol=1e-9)
    np.testing.assert_allclose(p_text.numpy(), r_text, rtol=0, atol=1e-12)


def test_replay_parts_of_ms_row_are_the_engines():
    x, text, _ = stream(5, 4, 9, 40)
    cfg = config(memory_size=3)
    clip, p_text, p_mem = dmn.replay_parts(x, text, cfg.dmn, cfg.logit_scale, cfg.shift_settings())
    scores, _, _ = engine_rows(x, text, cfg, "dmn-zs+ms")
    np.testing.assert_allclose((p_text + p_mem).numpy(), scores.numpy(), rtol=0, atol=1e-12)
    assert not torch.allclose(p_mem, dmn.replay_parts(x, text, cfg.dmn, cfg.logit_scale)[2])


def test_ms_at_alpha_zero_is_the_base():
    x, text, _ = stream(5, 8, 10, 40)
    a = engine_rows(x, text, config(memory_size=2, alpha=0.0), "dmn-zs+ms")[0]
    b = engine_rows(x, text, config(memory_size=2, alpha=0.0))[0]
    assert torch.equal(a, b)


def test_multi_engine_equals_two_engines():
    x, text, _ = stream(5, 4, 11, 40)
    cfg = config(memory_size=2)
    multi = MultiEngine(text, "dmn-zs+ms", cfg, streams=2)
    one, two = Engine(text, "dmn-zs+ms", cfg), Engine(text, "dmn-zs+ms", cfg)
    for i in range(20):
        out = multi.step(torch.stack([x[i], x[39 - i]]))
        assert torch.equal(out.logits[0], one.step(x[i]).logits)
        assert torch.equal(out.logits[1], two.step(x[39 - i]).logits)


def test_reset_and_state_dict():
    x, text, _ = stream(5, 4, 12, 30)
    cfg = config(memory_size=2)
    e = Engine(text, "dmn-zs+ms", cfg)
    first = [e.step(v).logits for v in x[:10]]
    saved = e.state_dict()
    later = [e.step(v).logits for v in x[10:]]
    e.load_state_dict(saved)
    assert all(torch.equal(a, e.step(v).logits) for a, v in zip(later, x[10:]))
    e.reset()
    assert all(torch.equal(a, e.step(v).logits) for a, v in zip(first, x[:10]))


@pytest.mark.parametrize("M", [1, 50])
def test_state_within_state_bytes(M):
    x, text, _ = stream(7, 1, 13, 30, dtype=torch.float32)
    cfg = config(memory_size=M)
    state = dmn.init(text, cfg.dmn, cfg.logit_scale, None)
    for v in x:
        dmn.step(state, v, text, cfg.dmn, cfg.logit_scale, lambda f: f)
    used = sum(t.numel() * t.element_size() for t in state.values())
    assert used <= dmn.state_bytes(7, 32, cfg.dmn)
    assert dmn.state_bytes(1000, 512, dmn.Params()) == 4 * 1000 * 50 * 513 + 8 * 1000


def test_one_view_is_finite_and_view_zero_only():
    x, text, _ = stream(3, 1, 14, 10)
    scores, probs, _ = engine_rows(x, text, config())
    assert torch.isfinite(scores).all() and torch.allclose(probs.sum(-1), torch.ones(10, dtype=torch.float64))
    kept = [len(Fn.confident_indices(torch.zeros(V), 0.1)) for V in (1, 9, 32)]  # DMN's view selection
    assert kept == [1, 1, 3]


# ----------------------------------------------------------------- parameters
def test_defaults_are_the_official_values():
    # scripts/run.sh (zero-shot blocks): --memory_size 50 --selection_p 0.1 --beta 5.5; weight: TTA-VLM alpha 1.0
    p = dmn.Params()
    assert (p.memory_size, p.selection_p, p.beta, p.weight, p.replace) == (50, 0.1, 5.5, 1.0, "official")
    # dmn_main.py direct_inference beta2_list
    assert dmn.WEIGHT_GRID == (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100, 300, 1000)
    assert (dmn.H_SELECT_EPS, dmn.H_MEMORY_EPS) == (1e-6, 1e-8)
    assert dmn.DATASET_PARAMS == {}  # the zero-shot runs use one setting for every set
    assert [m.name for m in dmn.METHODS] == ["dmn-zs", "dmn-zs+ms"]
    assert get_method("dmn-zs+ms").mean_shift and not get_method("dmn-zs").mean_shift


@pytest.mark.parametrize(
    "key,value",
    [
        ("memory_size", 0),
        ("memory_size", 2.5),
        ("selection_p", 0.0),
        ("selection_p", 1.5),
        ("beta", -1.0),
        ("weight", float("nan")),
        ("weight", True),
        ("replace", "fifo"),
    ],
)
def test_bad_values_name_the_key(key, value):
    with pytest.raises(UserError, match=key):
        dmn.Params(**{key: value})
    with pytest.raises(UserError, match=key):
        load_dataset_config(None, [f"dmn.{key}={value}"])


def test_set_reaches_the_section():
    assert load_dataset_config(None, ["dmn.weight=0.3"]).engine.dmn.weight == 0.3


# ----------------------------------------------------------------- the test-label search
def test_search_weight_matches_the_official_loop():
    x, text, labels = stream(6, 1, 15, 150)
    _, p_text, p_mem = dmn.replay_parts(x, text, dmn.Params(memory_size=3), 100.0)
    w, acc = dmn.search_weight(p_text, p_mem, labels)
    assert (w, acc) == ref.search_weight(p_text.numpy(), p_mem.numpy(), labels)
    best = max(
        float((np.argmax(p_text.numpy() + g * p_mem.numpy(), 1) == labels).mean() * 100) for g in dmn.WEIGHT_GRID
    )
    assert acc == best


def test_search_weight_first_best_and_unknown_labels():
    p_text = torch.tensor([[0.6, 0.4], [0.6, 0.4]])
    p_mem = torch.tensor([[0.0, 1.0], [0.0, 1.0]])
    assert dmn.search_weight(p_text, p_mem, np.array([0, -1])) == (0.001, 100.0)  # the first best; -1 ignored
    assert dmn.search_weight(p_text, p_mem, np.array([1, 1]))[0] == 0.3  # 0.6 < 0.4 + 0.3
    with pytest.raises(UserError, match="no labelled sample"):
        dmn.search_weight(p_text, p_mem, np.array([-1, -1]))


@pytest.fixture
def feats(tmp_path):
    s = make_stream(n=60, classes=5, dim=16, views=4, seed=5)
    return save_features(
        tmp_path / "f.npz",
        s["features"],
        s["text"],
        s["labels"],
        list("abcde"),
        {"model": "synthetic"},
        dtype=np.float32,
    )


@pytest.mark.parametrize("method", ["dmn-zs", "dmn-zs+ms"])
def test_cli_search_on_labels_marks_every_output(tmp_path, feats, capsys, method):
    code, out, err = run_bench(
        capsys,
        "replay",
        "--features",
        feats,
        "--method",
        method,
        "--search-on-labels",
        "--out",
        tmp_path / "p.csv",
        "--json",
    )
    assert code == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert report["label_tuned"] == dmn.LABEL_TUNED
    assert report["hyperparameters"]["dmn"]["weight"] == report["searched_weight"] in dmn.WEIGHT_GRID
    assert report["accuracy"] == pytest.approx(report["searched_accuracy"])
    rows = list(csv.DictReader((tmp_path / "p.csv").open()))
    assert len(rows) == 60 and all(r["label_tuned"] == dmn.LABEL_TUNED for r in rows)
    code, out, err = run_bench(
        capsys, "replay", "--features", feats, "--method", method, "--search-on-labels", "--out", tmp_path / "p.jsonl"
    )
    assert code == 0, err
    summary = next(line for line in out.splitlines() if line.startswith(f"{method}: "))  # the result line
    assert dmn.LABEL_TUNED in summary
    assert all(json.loads(line)["label_tuned"] == dmn.LABEL_TUNED for line in (tmp_path / "p.jsonl").open())


def test_cli_without_the_flag_has_no_mark(tmp_path, feats, capsys):
    code, out, err = run_bench(
        capsys, "replay", "--features", feats, "--method", "dmn-zs", "--json", "--out", tmp_path / "p.jsonl"
    )
    assert code == 0, err
    assert "label_tuned" not in json.loads(out.strip().splitlines()[-1])
    assert "label_tuned" not in json.loads((tmp_path / "p.jsonl").open().readline())


def test_cli_search_on_labels_refusals(tmp_path, feats, capsys):
    s = make_stream(n=20, classes=5, dim=16, seed=5)
    unlabelled = save_features(
        tmp_path / "u.npz", s["features"], s["text"], None, list("abcde"), {"model": "synthetic"}, dtype=np.float32
    )
    cases = [
        (["--features", feats, "--method", "tda"], "only for the dmn-zs rows"),
        (["--features", unlabelled, "--method", "dmn-zs"], "labels"),
        (["--features", feats, "--method", "dmn-zs", "--out", tmp_path / "p.npy"], ".npy"),
    ]
    for argv, message in cases:
        code, out, err = run_bench(capsys, "replay", *argv, "--search-on-labels")
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "p.npy").exists()
