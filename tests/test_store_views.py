"""`mstta-bench run --views-on`: each pixel path of the views (PIL, tensors on a GPU, tensors on a
CPU) has its own feature file in the store, and a file written before they had their own names is
refused when its views were made elsewhere than the run asks; `features.read_meta` reads only a
file's meta."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from helpers_cli import run_bench
from helpers_data import make_fake_dataset

from mstta.bench.store import Backbone, FeatureKey
from mstta.errors import UserError
from mstta.features.extract_views import view_path
from mstta.features.format import read_meta, save_features


@pytest.mark.parametrize(
    "views_on,device,want",
    [
        ("auto", "cpu", "pil"),
        ("cpu", "cpu", "pil"),
        ("device", "cpu", "cpu-tensors"),
        ("auto", "cuda", "gpu"),
        ("device", "cuda", "gpu"),
        ("cpu", "cuda", "pil"),
    ],
)
def test_view_path_of_each_flag_and_device(views_on, device, want):
    assert view_path(views_on, torch.device(device)) == want


def test_each_view_path_has_its_own_file_name(tmp_path):
    key = lambda views, made: (
        FeatureKey("dtd", Backbone("mstta-tiny", "none"), "fp32", views, "crop", 1, views_made=made).path(tmp_path).name
    )
    assert [key(4, m) for m in ("pil", "gpu", "cpu-tensors")] == [
        "views4-crop-seed1.npz",
        "views4-crop-seed1-gpuviews.npz",
        "views4-crop-seed1-tensorviews.npz",
    ]
    assert {key(1, m) for m in ("pil", "gpu", "cpu-tensors")} == {"views1-seed1.npz"}  # one view: CLIP's own


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("views_on")
    make_fake_dataset(tmp / "data", "dtd", classes=2, per_class=3)
    return tmp


def _argv(world, store, out, *extra):
    return [
        "run",
        "--data-root",
        world / "data",
        "--datasets",
        "dtd",
        "--backbone",
        "mstta-tiny",
        "--views",
        "4",
        "--methods",
        "zero-shot,ms-tta",
        "--store",
        store,
        "--out",
        out,
        "--device",
        "cpu",
        "--workers",
        "0",
        "--fps-samples",
        "0",
        "--no-plots",
        "--no-progress",
        *extra,
    ]


def test_run_keeps_pil_and_tensor_views_apart(world, capsys):
    store = world / "store"
    code, out, err = run_bench(capsys, *_argv(world, store, world / "r1", "--views-on", "device", "--dry-run"))
    assert code == 0, err
    assert "views4-crop-seed1-tensorviews.npz" in out and not list(store.rglob("*.npz"))
    code, _, err = run_bench(capsys, *_argv(world, store, world / "r1", "--views-on", "device", "--fps-samples", "2"))
    assert code == 0, err
    code, _, err = run_bench(capsys, *_argv(world, store, world / "r2", "--views-on", "cpu", "--fps-samples", "2"))
    assert code == 0, err
    for d, how in (("r1", "on CPU tensors (mstta.features.tensor_views, the fast path) by "), ("r2", "with PIL by ")):
        eff = json.loads((world / d / "results.json").read_text())["efficiency"]  # timed as its features were made
        assert eff and all(e["views_made"].startswith(how) for e in eff), eff
    files = {p.name: read_meta(p)["views_on"] for p in store.rglob("*.npz")}
    assert files == {"views4-crop-seed1-tensorviews.npz": "device", "views4-crop-seed1.npz": "cpu"}
    runs = {
        r["features"].rsplit("/", 1)[-1]
        for d in ("r1", "r2")
        for r in json.loads((world / d / "results.json").read_text())["runs"]
    }
    assert runs == set(files)  # each run read the file of its own views


def test_a_file_under_pils_name_with_tensor_views_is_refused(world, tmp_path, capsys):
    """A store written before view paths had their own names: tensor views under the plain name."""
    store = tmp_path / "store"
    code, _, err = run_bench(capsys, *_argv(world, store, tmp_path / "r", "--views-on", "device"))
    assert code == 0, err
    made = next(store.rglob("*-tensorviews.npz"))
    legacy = made.with_name("views4-crop-seed1.npz")
    shutil.move(made, legacy)
    before = legacy.read_bytes()
    code, _, err = run_bench(capsys, *_argv(world, store, tmp_path / "r2", "--views-on", "cpu"))
    assert code == 2
    line = err.strip().splitlines()[-1]
    assert str(legacy) in line and "--views-on device" in line and "-tensorviews.npz" in line
    assert "Traceback" not in err and legacy.read_bytes() == before  # nothing lost


def test_views_on_flag_is_checked(world, tmp_path, capsys):
    code, _, err = run_bench(capsys, *_argv(world, tmp_path / "s", tmp_path / "r", "--views-on", "gpu"))
    assert code == 2 and "--views-on" in err and "Traceback" not in err


def test_read_meta_reads_only_the_meta(tmp_path):
    p = save_features(tmp_path / "f.npz", np.ones((3, 4)), np.eye(4)[:2], meta={"views_on": "cpu", "k": [1, 2]})
    assert read_meta(p) == {"views_on": "cpu", "k": [1, 2]}
    bare = save_features(tmp_path / "g.npz", np.ones((3, 4)), np.eye(4)[:2])
    assert read_meta(bare) == {}
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(UserError, match="not a valid .npz"):
        read_meta(tmp_path / "bad.npz")
    np.savez(tmp_path / "big.npz", features=np.ones((3, 4)), text=np.eye(4)[:2], meta=np.asarray("x" * 300_000))
    with pytest.raises(UserError, match="a meta string is at most"):
        read_meta(tmp_path / "big.npz")
    np.savez(tmp_path / "list.npz", features=np.ones((3, 4)), text=np.eye(4)[:2], meta=np.asarray('["a"]'))
    with pytest.raises(UserError, match="must be a JSON object"):
        read_meta(tmp_path / "list.npz")
