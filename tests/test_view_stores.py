"""The view stores the field needs (issue 23 item 3): each row reads the views its authors' code reads
on each dataset group (`Method.views`, resolved by `context.view_spec`), each store is extracted once
per run and shared by every row that reads it, and each cell records the kind and count it read."""

from __future__ import annotations

import json

import pytest
from helpers_cli import default_model_dir, default_views_suffix
from helpers_data import make_fake_dataset

from mstta.bench import context, viewpolicy
from mstta.bench.context import dataset_config
from mstta.bench.viewpolicy import VIEW_POLICIES, view_spec
from mstta.engine.methods import get_method, list_methods
from mstta.features.format import read_meta

ROWS = "tda,boostadapter,ms-tta,zero,mta,dmn-zs,dpe"


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """One run (no --views: every count is a policy's or the config's) on ImageNet and DTD."""
    tmp = tmp_path_factory.mktemp("views")
    for key in ("imagenet", "dtd"):
        make_fake_dataset(tmp / "data", key, classes=3, per_class=2)
    calls: list[str] = []
    real = context.ensure_features
    mp = pytest.MonkeyPatch()
    mp.setattr(
        context,
        "ensure_features",
        lambda key, store, *a, **kw: calls.append(key.path(store)) or real(key, store, *a, **kw),
    )
    out, store = tmp / "results", tmp / "features"
    argv = ["run", "--data-root", tmp / "data", "--datasets", "imagenet,dtd", "--backbone", "mstta-tiny",
            "--methods", ROWS, "--out", out, "--store", store, "--workers", "0", "--no-progress",
            "--fps-samples", "0", "--no-plots"]  # fmt: skip
    from mstta.cli import main

    try:
        assert main([str(a) for a in argv]) == 0
    finally:
        mp.undo()
    runs = json.loads((out / "results.json").read_text())["runs"]
    return {"tmp": tmp, "store": store, "calls": calls, "by": {(r["dataset"], r["method"]): r for r in runs}}


def test_each_store_is_extracted_once_and_only_the_stores_the_rows_read(stores):
    model, v = default_model_dir(), default_views_suffix()
    files = sorted(p.relative_to(stores["store"]).as_posix() for p in stores["store"].rglob("*.npz"))
    assert files == [
        f"{model}/dtd/views64-augmix-seed1{v}.npz",  # DMN: AugMix on the fine-grained sets
        f"{model}/dtd/views64-crop-seed1{v}.npz",  # BoostAdapter's crops (ZERO, MTA; DPE and TDA read view 0)
        f"{model}/imagenet/views1-seed1.npz",  # TDA, BoostAdapter, MS-TTA: CLIP's preprocess only
        f"{model}/imagenet/views64-augmix-seed1{v}.npz",  # DPE
        f"{model}/imagenet/views64-crop-seed1{v}.npz",  # ZERO, MTA, DMN (its first 32)
    ]
    assert len(stores["calls"]) == len(set(stores["calls"])) == len(files)  # one request per store


# (dataset, row) -> (augment recorded, views read, views in its store)
EXPECTED = {
    ("imagenet", "tda"): (None, 1, 1),
    ("imagenet", "boostadapter"): (None, 1, 1),
    ("imagenet", "ms-tta"): (None, 1, 1),
    ("imagenet", "zero"): ("crop", 64, 64),
    ("imagenet", "mta"): ("crop", 64, 64),
    ("imagenet", "dmn-zs"): ("crop", 32, 64),
    ("imagenet", "dpe"): ("augmix", 64, 64),
    ("dtd", "tda"): ("crop", 64, 64),
    ("dtd", "boostadapter"): ("crop", 64, 64),
    ("dtd", "ms-tta"): ("crop", 64, 64),
    ("dtd", "zero"): ("crop", 64, 64),
    ("dtd", "mta"): ("crop", 64, 64),
    ("dtd", "dmn-zs"): ("augmix", 32, 64),
    ("dtd", "dpe"): ("crop", 64, 64),
}


def test_each_cell_records_the_views_its_policy_reads(stores):
    by = stores["by"]
    assert set(by) == set(EXPECTED)
    for cell, (augment, views, store_views) in EXPECTED.items():
        r = by[cell]
        meta = read_meta(r["features"])  # the file it read really holds these
        assert (r["augment"], r["views"], r["store_views"]) == (augment, views, store_views), cell
        assert meta["views"] == store_views and meta["dataset"] == cell[0]
        if store_views > 1:
            assert meta["augment"] == (augment or r["augment"]), cell
    # DPE on DTD predicts from the original image (view_mode original), as its code's one view does
    assert by["dtd", "dpe"]["clip_path"] == "the original image"
    assert "predicts from the original image" in by["dtd", "dpe"]["protocol"]


def test_a_row_reading_fewer_views_replays_exactly_the_first_ones(stores):
    """DMN-ZS's cell equals a replay of the first 32 views of its 64-view store (and differs from all 64
    where the extra views change a prediction: not asserted, the fake data is random)."""
    import numpy as np

    from mstta.bench.results import predictions_path
    from mstta.engine.replay import replay
    from mstta.features.format import load_features

    r = stores["by"]["dtd", "dmn-zs"]
    fs = load_features(r["features"])
    ecfg = dataset_config("dtd", {}).engine
    want = replay(fs.features[:, :32], fs.text, "dmn-zs", ecfg).predictions
    got = np.load(predictions_path(stores["tmp"] / "results", r))
    assert np.array_equal(got["predictions"], want)


def test_policies_resolve_per_dataset_group_and_yield_to_the_users_count():
    imagenet, sketch, dtd = (dataset_config(d, {}) for d in ("imagenet", "imagenet_sketch", "dtd"))
    assert view_spec("dmn-zs", sketch, dataset="imagenet_sketch") == ("crop", 64, 32)
    assert view_spec("dmn-zs", dtd, dataset="dtd") == ("augmix", 64, 32)
    assert view_spec("dpe", imagenet, dataset="imagenet") == ("augmix", 64, 64)
    assert view_spec("tda", imagenet, dataset="imagenet") == ("crop", 1, 1)  # a one-view stream
    # --views N: the user's count everywhere, the views read capped at it
    four = dataset_config("imagenet", {"views": 4})
    assert view_spec("zero", four, dataset="imagenet", views_set=True) == ("crop", 4, 4)
    assert view_spec("dmn-zs", four, dataset="imagenet", views_set=True) == ("crop", 4, 4)
    # a user's imagefolder: its own count (one view unless --views), the policy's kind
    folder = dataset_config("imagefolder:/x", {})
    assert view_spec("zero", folder, dataset="imagefolder:/x") == ("crop", 1, 1)
    # --augment replaces every kind, never a count
    assert view_spec("dmn-zs", dtd, "crop", "dtd") == ("crop", 64, 32)
    # every registered policy names both groups, and every row's policy is registered
    assert all(set(p) == set(viewpolicy.GROUPS) for p in VIEW_POLICIES.values())
    assert all(get_method(m).views in (None, *VIEW_POLICIES) for m in list_methods())


def test_field_reads_the_same_stores_and_records_each_rows_views(stores, tmp_path, capsys):
    """`mstta-bench field` over the run's store: nothing extracted again, each row's views as `run`'s."""
    from helpers_cli import run_bench

    before = sorted(stores["store"].rglob("*.npz"))
    code, _, err = run_bench(
        capsys, "field", "--data-root", stores["tmp"] / "data", "--datasets", "imagenet,dtd",
        "--backbone", "mstta-tiny", "--methods", "zero,dmn-zs,dpe", "--store", stores["store"],
        "--out", tmp_path / "f", "--orders", "1", "--open", "none", "--no-plots", "--workers", "0", "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    assert sorted(stores["store"].rglob("*.npz")) == before
    runs = json.loads((tmp_path / "f" / "results.json").read_text())["runs"]
    for r in runs:
        want = EXPECTED[r["dataset"], r["method"]]
        assert (r["augment"], r["views"], r["store_views"]) == want, (r["dataset"], r["method"])
    assert {(r["dataset"], r["method"]) for r in runs} >= {
        (d, m) for d in ("imagenet", "dtd") for m in ("zero", "dmn-zs", "dpe")
    }
