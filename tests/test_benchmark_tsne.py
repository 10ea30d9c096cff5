"""`mstta-bench tsne` and `mean_shifted`: the embeddings z are the engine's, the figure is drawn."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from synthetic import make_stream

from mstta.bench.plots import pick_classes, running_accuracy
from mstta.bench.store import Backbone, FeatureKey
from mstta.cli import main
from mstta.engine.config import EngineConfig
from mstta.engine.engine import Engine
from mstta.engine.replay import mean_shifted
from mstta.features.format import save_features


@pytest.mark.parametrize(
    "views,view_mode,k,steps", [(1, "confident", 2, 1), (5, "confident", 3, 2), (5, "original", 2, 1)]
)
def test_mean_shifted_matches_the_engine(views, view_mode, k, steps):
    s = make_stream(n=60, classes=4, dim=16, views=views, seed=2)
    cfg = EngineConfig(k=k, ms_steps=steps, view_mode=view_mode)
    f, z = mean_shifted(torch.from_numpy(s["features"]), torch.from_numpy(s["text"]), cfg)
    engine = Engine(torch.from_numpy(s["text"]), "ms-tta", cfg)
    want = torch.stack([engine.step(torch.from_numpy(x)).feature for x in s["features"]])
    assert torch.allclose(z, want, atol=1e-5)
    assert not torch.allclose(f[1:], z[1:])


def test_running_accuracy_and_class_pick():
    assert running_accuracy(np.array([1, 0, 2, 2]), np.array([1, 1, -1, 2])).tolist() == [100.0, 50.0, 200 / 3]
    labels = np.repeat(np.arange(8), 3)
    assert pick_classes(labels, 8, 3, None, 0) == pick_classes(labels, 8, 3, None, 0)
    assert len(pick_classes(labels, 8, 3, None, 0)) == 3 and pick_classes(labels, 8, 0, None, 0) == list(range(8))
    assert pick_classes(labels, 8, 3, [5, 1], 0) == [5, 1]


def _feats(path, labels=True):
    s = make_stream(n=48, classes=6, dim=16, seed=4)
    return save_features(
        path,
        s["features"],
        s["text"],
        s["labels"] if labels else None,
        [f"c{i}" for i in range(6)],
        {"dataset": "oxford_flowers"},
        dtype=np.float32,
    )


def test_tsne_from_feature_file(tmp_path, capsys):
    f = _feats(tmp_path / "f.npz")
    code = main(["tsne", "--features", str(f), "--classes", "3", "--out", str(tmp_path / "t.png")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "from 3 classes" in out and (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"


def test_tsne_from_the_store(tmp_path, capsys):
    store = tmp_path / "features"
    s = make_stream(n=40, classes=4, dim=16, views=4, seed=1)
    path = FeatureKey("dtd", Backbone("mstta-tiny", "none"), "fp32", 4, "crop", 1).path(store)
    save_features(path, s["features"], s["text"], s["labels"], list("abcd"), {}, dtype=np.float32)
    code = main(
        [
            "tsne",
            "--dataset",
            "dtd",
            "--backbone",
            "mstta-tiny",
            "--views",
            "4",
            "--store",
            str(store),
            "--device",
            "cpu",
            "--class-ids",
            "0,2",
            "--out",
            str(tmp_path / "t.png"),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "from 2 classes" in out and (tmp_path / "t.png").is_file()


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--out", "t.jpg"], "ending in .png"),
        (["--class-ids", "9"], "class 9 has no labelled sample"),
        (["--class-ids", "a"], "--class-ids"),
        (["--classes", "-1"], "--classes -1"),
        (["--views", "4"], "--views works with --dataset"),
    ],
)
def test_tsne_bad_inputs(tmp_path, capsys, extra, message):
    f = _feats(tmp_path / "f.npz")
    code = main(["tsne", "--features", str(f), "--out", str(tmp_path / "t.png"), *extra])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_tsne_needs_labels(tmp_path, capsys):
    f = _feats(tmp_path / "f.npz", labels=False)
    assert main(["tsne", "--features", str(f), "--out", str(tmp_path / "t.png")]) == 2
    assert "needs labelled features" in capsys.readouterr().err
