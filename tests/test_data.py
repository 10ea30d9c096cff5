"""Dataset loaders: every layout of datasets.md on tiny fake datasets, aliases, and one-line layout errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers_cli import run_bench
from helpers_data import ALL_KEYS, make_fake_dataset, make_image

from mstta.data import ALIASES, layout_of, list_datasets, load_split, resolve_key
from mstta.data.templates import templates_for
from mstta.errors import UserError


@pytest.mark.parametrize("key", ALL_KEYS)
def test_every_layout_reads_as_the_peers(tmp_path, key):
    fake = make_fake_dataset(tmp_path, key, classes=3, per_class=2)
    split = load_split(fake.dataset, fake.data_root)
    assert split.classnames == fake.classnames
    assert sorted(split.items) == sorted(fake.items)
    assert split.templates == templates_for(split.key)
    assert all(p.suffix.lower() in (".jpg", ".jpeg", ".png") and not p.name.startswith(".") for p, _ in split.items)


def test_registry_has_the_15_datasets():
    assert len(list_datasets()) == 15 and set(ALL_KEYS) - {"imagefolder"} == set(list_datasets())


@pytest.mark.parametrize(
    "name, key",
    [
        ("I", "imagenet"),
        ("A", "imagenet_a"),
        ("V", "imagenet_v2"),
        ("R", "imagenet_r"),
        ("S", "imagenet_sketch"),
        ("a", "imagenet_a"),
        ("fgvc", "fgvc_aircraft"),
        ("Oxford-Pets", "oxford_pets"),
        ("imagenet-a", "imagenet_a"),
        ("imagefolder:/x/y", "imagefolder:/x/y"),
    ],
)
def test_aliases(name, key):
    assert resolve_key(name) == key and set(ALIASES) >= {"I", "A", "V", "R", "S"}


def test_unknown_dataset_lists_choices():
    with pytest.raises(UserError, match="unknown dataset; choose one of: imagenet"):
        resolve_key("cifar10")


def test_imagenet_v2_label_is_the_folder_number(tmp_path):
    """Folders 0..11: '10' sorts before '2' as text, but its label is 10."""
    fake = make_fake_dataset(tmp_path, "imagenet_v2", classes=12, per_class=1)
    split = load_split("V", tmp_path)
    by_folder = {p.parent.name: label for p, label in split.items}
    assert by_folder == {str(c): c for c in range(12)} and split.classnames == fake.classnames


def test_imagenet_v2_wnid_folders_fallback(tmp_path):
    """BoostAdapter's layout: wnid-named folders, sorted, names looked up in classnames.txt."""
    fake = make_fake_dataset(tmp_path, "imagenet_a", classes=3, per_class=1)
    src = tmp_path / "imagenet-adversarial"
    dst = tmp_path / "imagenetv2"
    shutil.copytree(src / "imagenet-a", dst / "imagenetv2-matched-frequency-format-val")
    shutil.copy(src / "classnames.txt", dst / "classnames.txt")
    split = load_split("imagenet_v2", tmp_path)
    assert split.classnames == fake.classnames and len(split) == 3


def test_imagenet_sketch_peer_folder_fallback(tmp_path):
    fake = make_fake_dataset(tmp_path, "imagenet_sketch")
    base = tmp_path / "imagenet-sketch"
    (base / "images").rename(base / "ImageNet-Sketch")
    split = load_split("S", tmp_path)
    assert split.classnames == fake.classnames and len(split) == len(fake.items)


# --- layout errors: one line, exact path, the layout --------------------------------------------------


def _break(tmp_path: Path, key: str, how: str) -> str:
    """Damage a fresh fake dataset; returns the path the error must name."""
    fake = make_fake_dataset(tmp_path, key, classes=3, per_class=2)
    first = fake.items[0][0]
    if how == "no-folder":
        folder = {"oxford_pets": "oxford_pets", "imagenet_a": "imagenet-adversarial", "fgvc_aircraft": "fgvc_aircraft"}[
            key
        ]
        shutil.rmtree(tmp_path / folder)
        return str(tmp_path / folder)
    if how == "no-split":
        path = {
            "oxford_pets": tmp_path / "oxford_pets" / "split_zhou_OxfordPets.json",
            "imagenet_a": tmp_path / "imagenet-adversarial" / "classnames.txt",
            "fgvc_aircraft": tmp_path / "fgvc_aircraft" / "images_variant_test.txt",
        }[key]
        path.unlink()
        return str(path)
    if how == "missing-image":
        first.unlink()
        return str(first)
    if how == "empty-class":
        for p in first.parent.iterdir():
            p.unlink()
        return str(first.parent)
    raise ValueError(how)


@pytest.mark.parametrize(
    "key, how",
    [
        ("oxford_pets", "no-folder"),
        ("oxford_pets", "no-split"),
        ("oxford_pets", "missing-image"),
        ("imagenet_a", "no-folder"),
        ("imagenet_a", "no-split"),
        ("imagenet_a", "empty-class"),
        ("fgvc_aircraft", "no-folder"),
        ("fgvc_aircraft", "no-split"),
        ("fgvc_aircraft", "missing-image"),
    ],
)
def test_layout_errors_name_the_path_and_layout(tmp_path, key, how):
    expected = _break(tmp_path, key, how)
    with pytest.raises(UserError) as err:
        load_split(key, tmp_path)
    msg = str(err.value)
    assert "\n" not in msg and expected in msg and "expected layout" in msg and layout_of(key) in msg


def test_coop_split_problems(tmp_path):
    make_fake_dataset(tmp_path, "dtd")
    split_file = tmp_path / "dtd" / "split_zhou_DescribableTextures.json"
    data = json.loads(split_file.read_text())
    data["test"] = [row for row in data["test"] if row[1] != 1]  # label 1 has no item: its name is unknown
    split_file.write_text(json.dumps(data))
    with pytest.raises(UserError, match="label 1 has no test item"):
        load_split("dtd", tmp_path)
    split_file.write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        load_split("dtd", tmp_path)
    split_file.write_text(json.dumps({"train": []}))
    with pytest.raises(UserError, match="has no 'test' list"):
        load_split("dtd", tmp_path)


def test_aircraft_unknown_variant(tmp_path):
    make_fake_dataset(tmp_path, "fgvc_aircraft")
    test_file = tmp_path / "fgvc_aircraft" / "images_variant_test.txt"
    test_file.write_text(test_file.read_text() + "1234567 Concorde\n")
    with pytest.raises(UserError, match="line 7: '1234567 Concorde' names no variant"):
        load_split("fgvc_aircraft", tmp_path)


def test_wnid_without_class_name(tmp_path):
    make_fake_dataset(tmp_path, "imagenet_r")
    make_image(tmp_path / "imagenet-rendition" / "imagenet-r" / "n99999999" / "x.jpg", 1)
    with pytest.raises(UserError, match="class folder n99999999 has no line in .*classnames.txt"):
        load_split("R", tmp_path)


@pytest.mark.parametrize("root, expected", [(None, "--data-root is required"), ("missing", "folder not found")])
def test_data_root_problems(tmp_path, root, expected):
    with pytest.raises(UserError, match=expected):
        load_split("oxford_pets", None if root is None else tmp_path / root)


def test_imagefolder_problems(tmp_path):
    with pytest.raises(UserError, match="folder not found"):
        load_split(f"imagefolder:{tmp_path / 'nope'}")
    (tmp_path / "flat").mkdir()
    make_image(tmp_path / "flat" / "a.jpg", 0)
    with pytest.raises(UserError, match="holds no class folders"):
        load_split(f"imagefolder:{tmp_path / 'flat'}")


# --- the CLI: exit 2, one stderr line, no traceback ----------------------------------------------------


def _cli(capsys, *args) -> tuple[int, str]:
    code, _, err = run_bench(capsys, "extract", *args)
    return code, err


@pytest.mark.parametrize(
    "key, how",
    [
        ("oxford_pets", "no-folder"),
        ("oxford_pets", "no-split"),
        ("oxford_pets", "missing-image"),
        ("imagenet_a", "empty-class"),
    ],
)
def test_cli_dataset_errors_exit_2(tmp_path, capsys, key, how):
    expected = _break(tmp_path / "data", key, how)
    code, err = _cli(
        capsys,
        "--dataset",
        key,
        "--data-root",
        tmp_path / "data",
        "--model",
        "mstta-tiny",
        "--pretrained",
        "none",
        "--out",
        tmp_path / "out",
        "--cache-dir",
        tmp_path / "cache",
    )
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("mstta-bench: error: dataset ")
    assert expected in lines[0] and "Traceback" not in err and not (tmp_path / "out").exists()


def test_cli_all_images_unreadable_exit_2(tmp_path, capsys):
    fake = make_fake_dataset(tmp_path, "imagefolder", classes=2, per_class=1)
    for path, _ in fake.items:
        path.write_bytes(b"\x89PNG broken")
    code, err = _cli(
        capsys,
        "--dataset",
        fake.dataset,
        "--model",
        "mstta-tiny",
        "--pretrained",
        "none",
        "--out",
        tmp_path / "o.npz",
        "--cache-dir",
        tmp_path / "cache",
        "--workers",
        0,
    )
    lines = [ln for ln in err.strip().splitlines() if "RANDOM weights" not in ln]
    assert code == 2 and len(lines) == 1 and "none of the 2 images could be read" in lines[0]
    assert str(fake.items[0][0].parent.parent) in lines[0] and not (tmp_path / "o.npz").exists()
