"""ZERO (mstta.engine.families.zero) against the independent reference (tests/reference_zero.py), the
engine/replay/MultiEngine contracts, constructed ties and the official tie-break quirk."""

from __future__ import annotations

import numpy as np
import pytest
import reference_zero as ref
import torch
from synthetic import make_stream

from mstta import Engine, MultiEngine, replay
from mstta.bench.config import load_dataset_config
from mstta.engine.config import EngineConfig
from mstta.engine.families import zero
from mstta.engine.methods import get_method
from mstta.errors import UserError


def stream(C, V, seed, n, d=32):
    s = make_stream(n=n, classes=C, dim=d, views=V, seed=seed)
    x = torch.nn.functional.normalize(torch.from_numpy(s["features"]).double(), dim=-1)
    text = torch.nn.functional.normalize(torch.from_numpy(s["text"]).double(), dim=-1)
    return (x.unsqueeze(1) if V == 1 else x), text


def config(**kw):
    return EngineConfig(zero=zero.Params(**kw))


def run_engine(x, text, cfg=None):
    e = Engine(text, "zero", cfg)
    rows = [e.step(v) for v in x]
    return torch.stack([r.logits for r in rows]), torch.stack([r.probs for r in rows]), rows


def check_against_reference(x, text, cfg=None):
    cfg = cfg or EngineConfig()
    p = cfg.zero
    scores, probs, rows = run_engine(x, text, cfg)
    for i, views in enumerate(x.numpy()):
        votes, pred = ref.zero(views, text.numpy(), cfg.logit_scale, p.gamma, p.eps, p.tie_break == "official")
        assert int(scores[i].argmax()) == pred
        np.testing.assert_allclose(scores[i].numpy(), votes, rtol=0, atol=1e-6)
        np.testing.assert_allclose(probs[i].numpy(), np.array(votes) / sum(votes), rtol=0, atol=1e-9)
    return scores


@pytest.mark.parametrize("C,n", [(2, 12), (10, 12), (1000, 5)])
@pytest.mark.parametrize("V", [1, 64])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_engine_matches_reference(C, n, V, seed):
    x, text = stream(C, V, seed, n)
    check_against_reference(x, text)


def basis(d=32):
    return torch.eye(d, dtype=torch.float64)


def view(target, cos, filler, second=None, cos2=0.0, d=32):
    """A unit view with cosine `cos` to text row `target` (text = basis rows), `cos2` to `second`."""
    e = basis(d)
    v = cos * e[target] + np.sqrt(1 - cos**2 - cos2**2) * e[filler]
    return v + (cos2 * e[second] if second is not None else 0)


def text10():
    return basis()[:10]


def test_greedy_break_walks_the_non_kept_views():
    # k = int(7 * 0.3) = 2 kept views vote 2 and 7 (a tie at exactly 1.0 each); the non-kept views
    # in entropy order predict 5, 5, 7, 2, 9: greedy_break returns the first tied one, 7, which
    # gets the extra vote (the first maximum of p_bar would have been 2).
    x = torch.stack(
        [
            view(2, 0.9, 20),
            view(7, 0.9, 21),
            view(5, 0.5, 22),
            view(5, 0.45, 23),
            view(7, 0.3, 24),
            view(2, 0.2, 25),
            view(9, 0.1, 26),
        ]
    ).unsqueeze(0)
    scores = check_against_reference(x, text10())
    expected = torch.zeros(10, dtype=torch.float64)
    expected[2], expected[7] = 1.0, 2.0
    torch.testing.assert_close(scores[0], expected, rtol=0, atol=1e-12)


def tie_without_greedy_hit():
    # kept views vote 1 and 3; no non-kept view predicts a tied class; the first non-kept view
    # ranks 8 > 5 > 3 > 1 (cosines 0.5, 0.4, 0.2, 0.1); the later ones are less confident.
    first = 0.5 * basis()[8] + 0.4 * basis()[5] + 0.2 * basis()[3] + 0.1 * basis()[1]
    first = first + np.sqrt(1 - 0.25 - 0.16 - 0.04 - 0.01) * basis()[22]
    return torch.stack(
        [
            view(1, 0.9, 20),
            view(3, 0.9, 21),
            first,
            view(8, 0.05, 23),
            view(9, 0.04, 24),
            view(8, 0.03, 25),
            view(6, 0.02, 26),
        ]
    ).unsqueeze(0)


def test_official_tie_break_masks_the_bitwise_not_classes():
    # ~ties on the int tensor [1, 3] = [-2, -4]: classes 8 and 6 (C-1-t) are masked, so the
    # first non-kept view's best remaining class 5 gets the vote (a class nobody tied on).
    scores = check_against_reference(tie_without_greedy_hit(), text10())
    expected = torch.zeros(10, dtype=torch.float64)
    expected[[1, 3, 5]] = 1.0
    torch.testing.assert_close(scores[0], expected, rtol=0, atol=1e-12)
    assert int(scores[0].argmax()) == 1  # three-way tie at 1 vote: the first maximum


def test_intended_tie_break_masks_the_non_tied_classes():
    scores = check_against_reference(tie_without_greedy_hit(), text10(), config(tie_break="intended"))
    expected = torch.zeros(10, dtype=torch.float64)
    expected[1], expected[3] = 1.0, 2.0
    torch.testing.assert_close(scores[0], expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("V", [1, 64])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_duplicated_text_rows_split_votes_exactly(V, dtype):
    # Rows 4 and 6 identical: every view's votes split exactly in half, so p_bar ties; greedy_break
    # takes the first non-kept view's argmax (the first maximum: 4) and gives it one more vote.
    x, text = stream(10, V, 3, 6)
    text[6] = text[4]
    x = (0.7 * x + 0.6 * text[4]) / (0.7 * x + 0.6 * text[4]).norm(dim=-1, keepdim=True)
    scores = check_against_reference(x, text)
    assert (scores.argmax(-1) == 4).all()
    kept = int(V * 0.3)
    torch.testing.assert_close(scores[:, 4] - scores[:, 6], torch.ones(6, dtype=torch.float64), rtol=0, atol=0)
    assert torch.allclose(scores[:, 6], torch.full((6,), kept / 2, dtype=torch.float64))
    s32, _, _ = run_engine(x.to(dtype), text.to(dtype))
    assert (s32.argmax(-1) == 4).all()


def test_eps_is_fp16s_and_controls_the_vote_temperature():
    assert zero.Params().eps == torch.finfo(torch.float16).eps == 2.0**-10
    # two kept views at cosines (0.300, 0.299) between classes 0 and 1: with eps = 2^-10 the votes are
    # fractional (softmax of a 1.024 gap), with float64's eps they are one-hot. The other views are
    # nearly uniform (less confident): k = int(7 * 0.3) = 2 keeps the two copies of v.
    e = basis()
    v = 0.300 * e[0] + 0.299 * e[1] + np.sqrt(1 - 0.3**2 - 0.299**2) * e[20]
    x = torch.stack(
        [v, v, view(5, 0.01, 21), view(5, 0.01, 22), view(5, 0.01, 23), view(5, 0.01, 24), view(5, 0.01, 25)]
    ).unsqueeze(0)
    soft = check_against_reference(x, text10())[0]
    hard = check_against_reference(x, text10(), config(eps=float(torch.finfo(torch.float64).eps)))[0]
    share = 1 / (1 + np.exp(-0.001 / 2**-10))
    assert abs(float(soft[0]) - 2 * share) < 1e-9 and 0.5 < float(soft[1]) < 0.8
    assert float(hard[0]) == 2.0 and float(hard[1]) < 1e-30


def test_replay_equals_stepping_the_engine():
    x, text = stream(1000, 64, 4, 10)
    x[3, 5:] = x[3, 0]  # identical views: an entropy tie (the stable sort)
    scores, probs, rows = run_engine(x, text)
    out = zero.replay(x, text, zero.Params(), 100.0)
    torch.testing.assert_close(out.scores, scores, rtol=0, atol=1e-12)
    torch.testing.assert_close(out.probs, probs, rtol=0, atol=1e-12)
    torch.testing.assert_close(out.clip, torch.stack([r.clip_logits for r in rows]), rtol=0, atol=1e-12)
    r = replay(x, text, "zero", keep_probs=True)
    assert (r.predictions == scores.argmax(-1).numpy()).all()
    online = replay(x, text, "zero", online=True, keep_probs=True)
    assert (online.predictions == r.predictions).all()
    np.testing.assert_allclose(r.probs, online.probs, atol=1e-6)


def test_replay_chunks_agree(monkeypatch):
    x, text = stream(10, 64, 5, 40)
    whole = zero.replay(x, text, zero.Params(), 100.0)
    monkeypatch.setitem(zero.CHUNK_ELEMENTS, "cpu", 64 * 10 * 3)  # chunks of 3 samples
    parts = zero.replay(x, text, zero.Params(), 100.0)
    torch.testing.assert_close(parts.scores, whole.scores, rtol=0, atol=1e-12)


def test_multi_engine_equals_two_engines():
    x, text = stream(10, 64, 6, 8)
    multi = MultiEngine(text, "zero", streams=2)
    a, b = Engine(text, "zero"), Engine(text, "zero")
    for i in range(4):
        m = multi.step(torch.stack([x[i], x[4 + i]]))
        torch.testing.assert_close(m.logits[0], a.step(x[i]).logits, rtol=0, atol=1e-12)
        torch.testing.assert_close(m.logits[1], b.step(x[4 + i]).logits, rtol=0, atol=1e-12)


@pytest.mark.parametrize("V", [1, 2, 3, 4, 5, 9])
def test_few_views_are_finite(V):
    # k = int(0.3 V) = 0 for V < 4: no vote, every class ties, and greedy_break takes the most
    # confident view's argmax (the official code's own path), one vote.
    x, text = stream(1000, max(V, 2), 7, 4, d=64)
    x = x[:, :V]
    for dtype in (torch.float32, torch.float64):
        out = zero.replay(x.to(dtype), text.to(dtype), zero.Params(), 100.0)
        for t in out:
            assert torch.isfinite(t).all()
        torch.testing.assert_close(out.probs.sum(-1), torch.ones(4, dtype=dtype))
    check_against_reference(x, text)
    if V < 4:
        best = zero.vote(x, text, 100.0, zero.Params())
        most = best.logits.gather(1, best.order[:, :1, None].expand(-1, 1, 1000))[:, 0].argmax(-1)
        assert (best.pred == most).all()


def test_aggregate_is_consistent_with_replay():
    x, text = stream(1000, 64, 8, 12)
    out = zero.replay(x, text, zero.Params(), 100.0)
    f, clip = zero.aggregate(x, text, 100.0, zero.Params())
    assert (clip.argmax(-1) == out.scores.argmax(-1)).all()
    torch.testing.assert_close(clip, 100.0 * f @ text.T)
    # sample 0 by hand: the kept views (19 lowest entropies) predicting the winner, averaged
    v = zero.vote(x[:1], text, 100.0, zero.Params())
    kept = v.order[0, :19]
    voters = [int(i) for i in kept if int(v.logits[0, i].argmax()) == int(v.pred[0])]
    torch.testing.assert_close(f[0], x[0, voters].mean(0))


def test_aggregate_falls_back_without_voters():
    # the official tie-break can pick a class no kept view predicts: then any view predicting the winner
    x = tie_without_greedy_hit()
    f, clip = zero.aggregate(x, text10(), 100.0, zero.Params())
    assert int(clip[0].argmax()) == 1
    torch.testing.assert_close(f[0], x[0, 0])


def test_state_reset_and_state_dict():
    x, text = stream(10, 64, 9, 4)
    e = Engine(text, "zero")
    first = e.step(x[0]).logits
    e.step(x[1])
    saved = e.state_dict()
    assert saved["states"] == [{}] and zero.state_bytes(1000, 512, zero.Params()) == 0
    later = e.step(x[2]).logits
    e.load_state_dict(saved)
    torch.testing.assert_close(e.step(x[2]).logits, later, rtol=0, atol=0)
    e.reset()
    assert e.n_seen == 0
    torch.testing.assert_close(e.step(x[0]).logits, first, rtol=0, atol=0)


def test_row_and_params_defaults():
    m = get_method("zero")
    assert (m.family, m.episodic, m.mean_shift, m.training_free) == ("zero", True, False, True)
    # ttas/zero.py Zero.set_hyperparams: gamma = 0.3; line 80: eps of the fp16 logits
    p = zero.Params()
    assert (p.gamma, p.eps, p.tie_break) == (0.3, 2.0**-10, "official")
    assert not hasattr(zero, "DATASET_PARAMS")  # the official code uses the same values on every set
    cfg = load_dataset_config(None, ["zero.tie_break=intended", "zero.gamma=0.5"]).engine
    assert (cfg.zero.tie_break, cfg.zero.gamma) == ("intended", 0.5)


@pytest.mark.parametrize(
    "key,value",
    [
        ("gamma", 1.0),
        ("gamma", -0.1),
        ("gamma", float("nan")),
        ("eps", 0.0),
        ("eps", 2.0),
        ("eps", float("inf")),
        ("tie_break", "nearest"),
    ],
)
def test_bad_values_name_the_key(key, value):
    with pytest.raises(UserError, match=key):
        zero.Params(**{key: value})
    with pytest.raises(UserError, match=key):
        load_dataset_config(None, [f"zero.{key}={value}"])
