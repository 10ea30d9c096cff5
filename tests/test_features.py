"""Feature files: round trip, normalisation on load, and every bad input named."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from mstta import UserError, load_features, save_features


def _arrays(n=5, c=3, d=4, views=None):
    g = np.random.default_rng(0)
    shape = (n, d) if views is None else (n, views, d)
    return {"features": g.standard_normal(shape).astype(np.float32),
            "text": g.standard_normal((c, d)).astype(np.float32),
            "labels": np.array([0, 1, 2, -1, 0][:n])}


def test_round_trip_normalises_and_keeps_everything(tmp_path):
    a = _arrays(views=3)
    p = save_features(tmp_path / "f.npz", a["features"] * 5, a["text"], a["labels"], ["a", "b", "c"],
                      {"model": "mstta-tiny", "views": 3})
    fs = load_features(p)
    assert fs.features.shape == (5, 3, 4) and fs.num_views == 3
    assert fs.features.dtype == torch.float16    # stored dtype kept (memory)
    assert torch.allclose(fs.features.float().norm(dim=-1), torch.ones(5, 3), atol=1e-3)
    assert fs.labels.tolist() == [0, 1, 2, -1, 0]
    assert fs.classnames == ["a", "b", "c"] and fs.meta == {"model": "mstta-tiny", "views": 3}
    assert not list(tmp_path.glob(".*tmp*"))     # no temp file left behind


@pytest.mark.parametrize("mutate,message", [
    (lambda a: a.pop("text"), "missing array 'text'"),
    (lambda a: a.update(features=a["features"][:, :3]), "shape mismatch"),
    (lambda a: a["features"].__setitem__((2, 1), np.nan), "'features' has a non-finite value at index 2"),
    (lambda a: a["features"].__setitem__(3, 0.0), "'features' has an all-zero row at index 3"),
    (lambda a: a["text"].__setitem__((1, 0), np.inf), "'text' has a non-finite value at index 1"),
    (lambda a: a.update(labels=np.array([0, 1, 3, 0, 0])), "'labels' is out of range at index 2"),
    (lambda a: a.update(labels=np.array([0, 1, 0])), "'labels' has 3 entries"),
    (lambda a: a.update(labels=np.array([0.0, 1, 0, 0, 0])), "'labels' must be a 1-D integer array"),
    (lambda a: a.update(features=a["features"].astype(np.int32)), "float16/float32"),
    (lambda a: a.update(extra=np.zeros(2)), "unknown array 'extra'"),
    (lambda a: a.update(meta=np.asarray("{not json")), "'meta' must be a JSON string"),
    (lambda a: a.update(classnames=np.asarray(["a", "b"])), "'classnames' must hold 3 strings"),
])
def test_bad_files_name_the_array_and_index(tmp_path, mutate, message):
    a = _arrays()
    mutate(a)
    np.savez(tmp_path / "bad.npz", **a)
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace("[", r"\[")) as err:
        load_features(tmp_path / "bad.npz")
    assert "\n" not in str(err.value)


def test_bad_view_row_is_named_by_sample_and_view(tmp_path):
    a = _arrays(views=2)
    a["features"][4, 1] = 0.0
    np.savez(tmp_path / "bad.npz", **a)
    with pytest.raises(UserError, match=r"index \[4, 1\]"):
        load_features(tmp_path / "bad.npz")


def test_missing_and_unreadable_files(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_features(tmp_path / "nope.npz")
    (tmp_path / "junk.npz").write_bytes(b"this is not a zip")
    with pytest.raises(UserError, match="not a valid .npz"):
        load_features(tmp_path / "junk.npz")
    with pytest.raises(UserError, match="not a file"):
        load_features(tmp_path)


def test_meta_is_json(tmp_path):
    a = _arrays()
    save_features(tmp_path / "f.npz", a["features"], a["text"], meta={"seed": 1})
    with np.load(tmp_path / "f.npz") as z:
        assert json.loads(str(z["meta"])) == {"seed": 1}
        assert z["features"].dtype == np.float16
