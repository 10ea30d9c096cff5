"""`--listing peer`: the peers' file lists (TDA/BoostAdapter `listdir_nohidden` drops every name
containing "sh"), on generated ImageNet-A/R/Sketch/V2-style folders whose names contain "sh"."""

from __future__ import annotations

import json

import pytest
from helpers_cli import run_bench
from helpers_data import make_fake_dataset, make_image

from mstta.data import load_split
from mstta.data.common import peer_listed
from mstta.data.imagenet import IMAGENET

# ImageNet-A's real file names carry the class name: "0.000116_digital clock _ digital clock_0.86.jpg"
SH_NAMES = ("0.01_fish _ fish_0.9.jpg", "0.02_shoe shop_0.8.jpg", "0.03_washer_0.7.jpg", "SH_upper_0.6.jpg")


def _sh_dataset(root, key: str):
    """A 3-class, 3-image-per-class dataset plus, per class, the SH_NAMES files: 4 per class, of
    which 3 contain "sh" (the upper-case one does not: the peers' test is case-sensitive)."""
    fake = make_fake_dataset(root, key, classes=3, per_class=3)
    folders = sorted({p.parent for p, _ in fake.items})
    for i, folder in enumerate(folders):
        for j, name in enumerate(SH_NAMES):
            make_image(folder / name, 1000 + 10 * i + j)
    return fake, folders


@pytest.mark.parametrize("key", ["imagenet_a", "imagenet_r", "imagenet_sketch", "imagenet_v2"])
def test_exact_counts_under_both_listings(tmp_path, key):
    fake, folders = _sh_dataset(tmp_path, key)
    full = load_split(key, tmp_path)
    peer = load_split(key, tmp_path, listing="peer")
    assert len(full) == 3 * 3 + 3 * len(SH_NAMES) == 21
    assert len(peer) == 3 * 3 + 3 * 1 == 12  # only "SH_upper" survives of the four
    assert not any("sh" in p.name for p, _ in peer.items)
    assert {p.name for p, _ in full.items} - {p.name for p, _ in peer.items} == {n for n in SH_NAMES if "sh" in n}
    assert peer.classnames == full.classnames  # labels unchanged: no wnid contains "sh"
    assert sorted(peer.items) == sorted(i for i in full.items if peer_listed(i[0].name))


def test_class_folders_are_filtered_too(tmp_path):
    """The peers list class folders with the same filter; a folder named with "sh" is dropped (and
    the later labels move up), exactly as `enumerate(listdir_nohidden(image_dir, sort=True))`."""
    make_fake_dataset(tmp_path, "imagenet_a", classes=3, per_class=2)
    base = tmp_path / IMAGENET["imagenet_a"][0]
    odd = base / "imagenet-a" / "n00000sh1"
    make_image(odd / "img.jpg", 5)
    with open(base / "classnames.txt", "a") as fh:
        fh.write("n00000sh1 odd class\n")
    full, peer = load_split("A", tmp_path), load_split("A", tmp_path, "peer")
    assert full.num_classes == 4 and full.classnames[0] == "odd class"  # sorted first
    assert peer.num_classes == 3 and "odd class" not in peer.classnames
    assert {lbl for _, lbl in peer.items} == {0, 1, 2}


@pytest.mark.parametrize("key", ["dtd", "fgvc_aircraft", "imagenet"])
def test_other_datasets_read_the_same_under_both(tmp_path, key):
    """Split-file datasets (and ImageNet, read by torchvision in the peers) are not filtered."""
    make_fake_dataset(tmp_path, key, classes=2, per_class=2)
    assert load_split(key, tmp_path).items == load_split(key, tmp_path, "peer").items


def test_extract_listing_peer_counts(tmp_path, capsys):
    _sh_dataset(tmp_path / "data", "imagenet_a")
    counts = {}
    for listing in ("full", "peer"):
        code, out, err = run_bench(
            capsys,
            "extract",
            "--dataset",
            "A",
            "--data-root",
            tmp_path / "data",
            "--model",
            "mstta-tiny",
            "--pretrained",
            "none",
            "--views",
            "1",
            "--workers",
            "0",
            "--out",
            tmp_path / "f",
            "--listing",
            listing,
            "--json",
        )
        assert code == 0, err
        counts[listing] = json.loads(out)
    assert counts["full"]["n"] == 21 and counts["peer"]["n"] == 12
    assert counts["peer"]["out"].endswith("_peer.npz") and counts["full"]["out"] != counts["peer"]["out"]


def test_run_listing_peer_reports_samples_against_the_paper(tmp_path, capsys):
    _sh_dataset(tmp_path / "data", "imagenet_a")
    common = [
        "run",
        "--data-root",
        tmp_path / "data",
        "--datasets",
        "A",
        "--backbone",
        "mstta-tiny",
        "--views",
        "2",
        "--methods",
        "zero-shot,ms-tta",
        "--store",
        tmp_path / "f",
        "--workers",
        "0",
        "--no-progress",
        "--fps-samples",
        "0",
        "--no-plots",
    ]
    code, _, err = run_bench(capsys, *common, "--out", tmp_path / "peer", "--listing", "peer")
    assert code == 0, err
    runs = json.loads((tmp_path / "peer" / "results.json").read_text())["runs"]
    assert {r["n"] for r in runs} == {12} and {r["listing"] for r in runs} == {"peer"}
    assert all(r["features"].endswith("-peer.npz") for r in runs)
    md = (tmp_path / "peer" / "report.md").read_text()
    row = next(ln for ln in md.splitlines() if ln.startswith("| ImageNet-A | peer |"))
    assert row == "| ImageNet-A | peer | 12 | 3 | 7,500 | 200 | DIFFERS (-7,488 samples, -197 classes) |"
    code, _, err = run_bench(capsys, *common, "--out", tmp_path / "full")
    assert code == 0, err
    assert {r["n"] for r in json.loads((tmp_path / "full" / "results.json").read_text())["runs"]} == {21}


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--datasets", "A", "--listing", "peers"],
        ["sweep", "--param", "k=2", "--listing", "nope"],
        ["tsne", "--dataset", "A", "--listing", "x"],
        ["extract", "--dataset", "A", "--listing", "sh"],
    ],
)
def test_unknown_listing_one_line_with_choices(tmp_path, capsys, argv):
    code, _, err = run_bench(capsys, *argv, "--out", tmp_path / "o.png" if argv[0] == "tsne" else tmp_path / "o")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "--listing" in err and "full" in err and "peer" in err
    assert not (tmp_path / "o").exists()
