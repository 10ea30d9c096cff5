"""The encoder and the per-stream session with the tiny random-weight CLIP (no network)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers_video import LABELS, scene
from PIL import Image

from app.encoder import FrameEncoder
from app.session import StreamSession
from mstta.engine.config import EngineConfig
from mstta.errors import UserError


@pytest.mark.parametrize("size", [(96, 64), (64, 96), (64, 64), (300, 50)])
def test_batched_preprocessing_matches_clip_preprocess(tiny_clip, size):
    img = scene(3, *size)
    ours = FrameEncoder(tiny_clip).pixels([img])
    ref = tiny_clip.preprocess(Image.fromarray(img)).unsqueeze(0)
    assert ours.shape == ref.shape
    assert torch.allclose(ours, ref, atol=1e-5)  # the model's own open_clip transform, not a look-alike


def test_encoder_batches_mixed_sizes_and_views(tiny_clip):
    enc = FrameEncoder(tiny_clip, views=3, seed=1)
    feats = enc.encode([scene(0, 96, 64), scene(1, 80, 60), scene(2, 96, 64)])
    assert feats.shape == (3, 3, 64)
    assert torch.allclose(feats.norm(dim=-1), torch.ones(3, 3), atol=1e-4)
    single = FrameEncoder(tiny_clip).encode([scene(1, 80, 60)])[0]
    assert torch.allclose(feats[1, 0], single, atol=1e-5)  # view 0 is the plain frame
    enc.reset(1)
    assert torch.allclose(enc.encode([scene(0, 96, 64), scene(1, 80, 60), scene(2, 96, 64)]), feats)


def test_encoder_rejects_bad_frames(tiny_clip):
    with pytest.raises(UserError, match="RGB uint8"):
        FrameEncoder(tiny_clip).encode([np.zeros((4, 4), np.uint8)])
    for views in (0, 257, True, 2.5):
        with pytest.raises(UserError, match="--views"):
            FrameEncoder(tiny_clip, views=views)


def test_process_returns_both_predictions(tiny_clip):
    session = StreamSession(tiny_clip, LABELS, template="a photo of a {}.", topk=2)
    r = session.process(scene(0))
    assert [s.label for s in r.clip_topk][0] in LABELS and len(r.clip_topk) == len(r.tta_topk) == 2
    assert r.clip_topk[0].prob >= r.clip_topk[1].prob and 0 <= r.tta_topk[1].prob <= r.tta_topk[0].prob <= 1
    assert r.cache_size == 1 and r.bank_rows == 1 and r.cache_capacity == 3 * 3 and r.latency_ms > 0
    assert r.disagree == (r.clip_label != r.tta_label)
    assert r.to_dict()["disagree"] == r.disagree


def test_zero_lam_gives_clip_exactly(tiny_clip):
    session = StreamSession(tiny_clip, LABELS, config=EngineConfig(lam=0.0, bank_size=16))
    for i in range(12):
        r = session.process(scene(i))
        assert r.tta_topk == r.clip_topk and not r.disagree


def test_bank_is_bounded_and_reset_forgets(tiny_clip):
    session = StreamSession(tiny_clip, LABELS, config=EngineConfig(bank_size=5))
    results = [session.process(scene(i)) for i in range(9)]
    assert [r.bank_rows for r in results] == [1, 2, 3, 4, 5, 5, 5, 5, 5]
    session.reset()
    assert session.process(scene(0)).bank_rows == 1


def test_reset_replays_identically(tiny_clip):
    session = StreamSession(tiny_clip, LABELS, views=2)
    first = [session.process(scene(i)).tta_topk for i in range(6)]
    session.reset()
    assert [session.process(scene(i)).tta_topk for i in range(6)] == first


def test_set_labels_rebuilds_and_configure_switches_method(tiny_clip):
    session = StreamSession(tiny_clip, LABELS)
    session.process(scene(0))
    session.set_labels(["cat", "dog", "bird", "fish"])
    r = session.process(scene(0))
    assert {s.label for s in r.clip_topk} <= {"cat", "dog", "bird", "fish"} and r.bank_rows == 1
    session.configure(method="zero-shot")
    r = session.process(scene(1))
    assert r.cache_capacity == 0 and r.cache_size == 0 and r.tta_topk == r.clip_topk
    with pytest.raises(UserError, match="unknown method"):
        session.configure(method="nope")
    with pytest.raises(UserError, match="at least 2"):
        session.set_labels(["cat"])
