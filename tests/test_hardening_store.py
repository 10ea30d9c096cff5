"""Issue 32 point 2, a store that cannot lie: a feature file of the store cut short or copied from
another dataset (its meta honest, or rewritten to claim the asked dataset), a results.json with a
field of the wrong type, an extraction shard of another width. Each is one stderr line naming the
file (exit 2, no traceback) or is recomputed; never a table of wrong numbers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers_cli import run_bench
from helpers_data import make_fake_dataset

from mstta.bench.store import Backbone, FeatureKey
from mstta.features.extract import run_extraction
from mstta.features.format import load_features, save_features

TINY = Backbone("mstta-tiny", "none")
FIELD = ["--backbone", "mstta-tiny", "--device", "cpu", "--no-progress", "--orders", "1", "--methods", "zero-shot"]
FIELD += ["--no-plots", "--open", "none"]
RUN = ["--backbone", "mstta-tiny", "--device", "cpu", "--no-progress", "--methods", "zero-shot", "--fps-samples", "0"]


def _key(dataset: str) -> FeatureKey:
    return FeatureKey(dataset, TINY, "fp32", 1, "augmix", 1)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A 3-class and a 5-class folder; the 5-class one's store file extracted once by a field run."""
    tmp = tmp_path_factory.mktemp("store")
    three = make_fake_dataset(tmp / "d3", "imagefolder", classes=3, per_class=2).dataset
    five = make_fake_dataset(tmp / "d5", "imagefolder", classes=5, per_class=2, seed=1).dataset
    code = _field(tmp / "store", tmp / "out5", five)
    assert code == 0
    other = make_fake_dataset(tmp / "o3", "imagefolder", classes=3, per_class=3, seed=5).dataset  # same names, 9 images
    file3 = run_extraction(other, tmp / "o3.npz", model="mstta-tiny", pretrained="none", device="cpu", workers=0)
    return {"tmp": tmp, "three": three, "five": five, "file5": _key(five).path(tmp / "store"), "other3": file3.path}


def _field(store: Path, out: Path, dataset: str, capsys=None, *extra) -> int:
    from mstta.cli import main

    return main(["field", "--datasets", dataset, "--store", str(store), "--out", str(out), *FIELD, *extra])


def _planted(world, tmp_path, how: str) -> Path:
    """A store holding, under the 3-class folder's name, the 5-class file changed by `how`."""
    store = tmp_path / "store"
    path = _key(world["three"]).path(store)
    path.parent.mkdir(parents=True)
    shutil.copy(world["other3" if how == "same-classes-other-listing" else "file5"], path)
    if how == "cut":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif how in ("claims-the-asked-dataset", "same-classes-other-listing"):  # self-consistent: its meta rewritten
        fs = load_features(path)
        meta = {**fs.meta, "dataset": world["three"]}
        save_features(path, fs.features, fs.text, fs.labels, fs.classnames, meta, dtype=np.float32)
    return path


@pytest.mark.parametrize(
    "how,expected",
    [
        ("cut", "not a valid .npz"),  # was zipfile.BadZipFile, exit 1
        ("another-dataset", "holds other features than its name says: dataset"),  # was used, exit 0
        ("claims-the-asked-dataset", "holds 5 classes (class_0, class_1, class_2), but"),  # was used, exit 0
        ("same-classes-other-listing", "holds another stream of images than"),  # another shift's file
    ],
)
@pytest.mark.parametrize("command", ["field", "run"])
def test_a_lying_store_file_is_one_line_naming_it(world, tmp_path, capsys, how, expected, command):
    path = _planted(world, tmp_path, how)
    before = path.read_bytes()
    argv = [command, "--datasets", world["three"], "--store", tmp_path / "store", "--out", tmp_path / "out"]
    argv += FIELD if command == "field" else [*RUN, "--no-plots"]
    code, out, err = run_bench(capsys, *argv)
    lines = [ln for ln in err.strip().splitlines() if "RANDOM weights" not in ln]
    assert code == 2, err
    assert len(lines) == 1 and str(path) in lines[0] and expected in lines[0] and "delete it" in lines[0], err
    assert "Traceback" not in err and path.read_bytes() == before  # never rewritten
    results = tmp_path / "out" / "results.json"
    assert not results.exists() or json.loads(results.read_text())["runs"] == []


def test_the_store_file_of_the_asked_dataset_is_used(world, tmp_path, capsys):
    """The neighbour: the 5-class folder's own file, moved into another store, is replayed as is."""
    path = _key(world["five"]).path(tmp_path / "store")
    path.parent.mkdir(parents=True)
    shutil.copy(world["file5"], path)
    code = _field(tmp_path / "store", tmp_path / "out", world["five"])
    err = capsys.readouterr().err
    assert code == 0, err
    runs = json.loads((tmp_path / "out" / "results.json").read_text())["runs"]
    assert [r["classes"] for r in runs] == [5] and runs[0]["features"] == str(path)


def _edited(results: Path, tmp_path: Path, edit) -> Path:
    """A copy of a results folder's results.json with one edit applied to its data."""
    out = tmp_path / "edited"
    out.mkdir()
    data = json.loads(results.read_text())
    edit(data)
    (out / "results.json").write_text(json.dumps(data))
    return out


def _set(field, value, where="runs"):
    return lambda d: d[where][0].__setitem__(field, value)


@pytest.mark.parametrize(
    "edit,expected",
    [
        (_set("accuracy", "99 %"), "runs[0] 'accuracy' is '99 %', not a number in [0, 100]"),  # was TypeError
        (_set("accuracy", 250.0), "'accuracy' is 250.0, not a number in [0, 100]"),
        (_set("accuracy", float("nan")), "'accuracy' is nan"),
        (_set("seed", [1]), "'seed' is [1], not a non-negative integer"),
        (_set("label_tuned", "no"), "'label_tuned' is 'no', not true or false"),
        (_set("ece", {"x": 1}), "'ece' is {'x': 1}"),
        (_set("marks", "none"), "'marks' is 'none', not a list of strings"),
        (lambda d: d["runs"][0].pop("method"), "runs[0] has no 'method'"),
        (lambda d: d["runs"].append(7), "runs[1] is int, not an object"),
        (lambda d: d.__setitem__("missing", {"a": 1}), "'missing' is dict, not a list"),
        (lambda d: d["missing"].append({"dataset": "x", "backbone": "b", "pretrained": "p", "reason": 3}), "reason"),
    ],
)
def test_a_results_file_with_a_field_of_the_wrong_type_is_one_line(world, tmp_path, capsys, edit, expected):
    out = _edited(world["tmp"] / "out5" / "results.json", tmp_path, edit)
    before = (out / "results.json").read_bytes()
    code, _, err = run_bench(capsys, "field", "--report-only", "--no-plots", "--out", out)
    assert code == 2, err
    assert err.count("\n") == 1 and str(out / "results.json") in err and expected in err, err
    assert "Traceback" not in err and (out / "results.json").read_bytes() == before
    assert not (out / "report.md").exists()


def test_a_results_file_as_written_rebuilds_its_report(world, tmp_path, capsys):
    """The neighbour: the file unchanged (numbers as the run wrote them, nulls included) reports."""
    out = _edited(world["tmp"] / "out5" / "results.json", tmp_path, lambda d: None)
    code, _, err = run_bench(capsys, "field", "--report-only", "--no-plots", "--out", out)
    assert code == 0, err
    assert "zero-shot" in (out / "report.md").read_text().lower()


def test_a_shard_of_another_width_is_encoded_again(world, tmp_path, monkeypatch):
    """An extraction's shard with the right name, stamp and positions but features of another width
    (was a ValueError in the merge on resume) is discarded before encoding and encoded again."""
    import mstta.features.extract as ex
    import mstta.features.shards as shards

    real_savez, calls = np.savez, {"n": 0}

    def savez_then_stop(fh, **arrays):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real_savez(fh, **arrays)

    monkeypatch.setattr(shards.np, "savez", savez_then_stop)
    out = tmp_path / "f.npz"
    opts = dict(model="mstta-tiny", pretrained="none", device="cpu", workers=0, views=2, augment="crop", shard_size=2)
    with pytest.raises(KeyboardInterrupt):
        ex.run_extraction(world["three"], out, cache_dir=tmp_path / "c", **opts)
    monkeypatch.setattr(shards.np, "savez", real_savez)
    shard = tmp_path / ".f.npz.work" / "shard-000000.npz"
    with np.load(shard) as z:
        arrays = {k: z[k] for k in z.files}
    n, v, d = arrays["features"].shape
    arrays["features"] = np.ones((n, v, d + 8), np.float16)  # another model's width, same stamp
    with open(shard, "wb") as fh:
        np.savez(fh, **arrays)
    res = ex.run_extraction(world["three"], out, cache_dir=tmp_path / "c", **opts)
    fs = load_features(out)
    assert res.n == 6 and fs.features.shape == (6, 2, d) and fs.text.shape[1] == d
    assert not (fs.features[:, :, 0] == fs.features[0, 0, 0]).all()  # shard 0 encoded again, not ones


def test_a_damaged_mixed_in_stream_is_one_line_not_a_warning_per_dataset(world, tmp_path, capsys):
    """Issue 32 point 5: a tampered digits store (its mixed-in photos' feature file cut) printed one
    warning per shift, then the same error; the mixed-in stream is read before any cell: one line."""
    store = tmp_path / "store"
    shutil.copytree(world["tmp"] / "store", store)
    mix = make_fake_dataset(tmp_path / "mix", "imagefolder", classes=2, per_class=2, seed=2).dataset
    path = _key(mix).path(store)
    path.parent.mkdir(parents=True)
    data = world["file5"].read_bytes()
    path.write_bytes(data[: len(data) // 2])
    argv = ["field", "--datasets", f"{world['five']},{world['three']}", "--store", store, "--out", tmp_path / "out"]
    argv += [*FIELD[:-2], "--open", "mixed", "--mix-with", mix]
    code, _, err = run_bench(capsys, *argv)
    lines = [ln for ln in err.strip().splitlines() if "RANDOM weights" not in ln]
    assert code == 2 and len(lines) == 1, err
    assert str(path) in lines[0] and "not a valid .npz" in lines[0] and "Traceback" not in err
    assert not _key(world["three"]).path(store).exists()  # refused before any extraction
