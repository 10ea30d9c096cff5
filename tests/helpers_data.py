"""Tiny fake datasets in every layout `mstta.data` reads (a few generated images per class)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from mstta.data.coop import COOP
from mstta.data.imagenet import IMAGENET

ALL_KEYS = list(IMAGENET) + ["fgvc_aircraft"] + list(COOP) + ["imagefolder"]


@dataclass
class FakeDataset:
    """What `make_fake_dataset` built: the --dataset / --data-root values and the expected split."""

    dataset: str  # value for --dataset (a key, or imagefolder:PATH)
    data_root: Path  # value for --data-root
    classnames: list[str]  # expected class names by label
    items: list[tuple[Path, int]]  # every test image and its label


def make_image(path: str | Path, seed: int, size: tuple[int, int] = (24, 20)) -> Path:
    """A small random RGB image (format from the suffix: .jpg/.JPEG/.png)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, size=3)
    noise = rng.integers(-40, 40, size=(size[1], size[0], 3))
    Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8)).save(p)
    return p


def _wnid(c: int) -> str:
    return f"n{1000000 + 37 * c:08d}"


def _images(folder: Path, label: int, per_class: int, seed: int, ext: str = ".jpg") -> list[tuple[Path, int]]:
    return [(make_image(folder / f"img_{label}_{j}{ext}", seed + 100 * label + j), label) for j in range(per_class)]


def _clutter(folder: Path) -> None:
    """Entries a loader must skip: a hidden file and a non-image file."""
    (folder / ".hidden.jpg").write_bytes(b"not an image")
    (folder / "notes.txt").write_text("not an image\n")


def _imagenet(root: Path, key: str, classes: int, per_class: int, seed: int) -> FakeDataset:
    folder, subs = IMAGENET[key]
    base = root / folder
    image_dir = base / subs[0]
    items: list[tuple[Path, int]] = []
    names = [f"class_{c} name" for c in range(classes)]
    if key == "imagenet_v2":  # folders 0..C-1, names by line number
        lines = [f"{_wnid(c)} {names[c]}" for c in range(classes)]
        for c in range(classes):
            items += _images(image_dir / str(c), c, per_class, seed)
    else:  # wnid folders in sorted order; classnames.txt lists extra wnids too, in another order
        extra = [f"n0999999{i} unused class {i}" for i in range(2)]
        lines = extra + [f"{_wnid(c)} {names[c]}" for c in reversed(range(classes))]
        for c in range(classes):
            items += _images(image_dir / _wnid(c), c, per_class, seed, ".JPEG")
        (image_dir / "README.txt").write_text("skipped\n")
    _clutter(image_dir / (str(0) if key == "imagenet_v2" else _wnid(0)))
    (base / "classnames.txt").write_text("\n".join(lines) + "\n")
    return FakeDataset(key, root, names, items)


def _aircraft(root: Path, classes: int, per_class: int, seed: int) -> FakeDataset:
    base = root / "fgvc_aircraft"
    names = [f"Boeing 7{c}7-{c}00" for c in range(classes)]
    (base).mkdir(parents=True, exist_ok=True)
    (base / "variants.txt").write_text("\n".join(names) + "\n")
    items, lines = [], []
    for c in range(classes):
        for j in range(per_class):
            image_id = f"{1000000 + 10 * c + j:07d}"
            items.append((make_image(base / "images" / f"{image_id}.jpg", seed + 100 * c + j), c))
            lines.append(f"{image_id} {names[c]}")
    (base / "images_variant_test.txt").write_text("\n".join(lines) + "\n")
    return FakeDataset("fgvc_aircraft", root, names, items)


def _coop(root: Path, key: str, classes: int, per_class: int, seed: int) -> FakeDataset:
    folder, images, split = COOP[key]
    base = root / folder
    image_dir = base / images if images else base
    prefix = "cars_test/" if key == "stanford_cars" else ""
    names = [f"{key}_class_{c}" for c in range(classes)]
    items, test = [], []
    for j in range(per_class):  # interleave classes: the split order is the JSON order
        for c in range(classes):
            rel = f"{prefix}{names[c]}/img_{c}_{j}.jpg"
            items.append((make_image(image_dir / rel, seed + 100 * c + j), c))
            test.append([rel, c, names[c]])
    base.mkdir(parents=True, exist_ok=True)
    (base / split).write_text(json.dumps({"train": [], "val": [], "test": test}))
    return FakeDataset(key, root, names, items)


def make_fake_dataset(root: str | Path, key: str, classes: int = 3, per_class: int = 2, seed: int = 0) -> FakeDataset:
    """Build dataset `key` (any registered key, or 'imagefolder') under `root` in its real layout."""
    root = Path(root)
    if key in IMAGENET:
        return _imagenet(root, key, classes, per_class, seed)
    if key == "fgvc_aircraft":
        return _aircraft(root, classes, per_class, seed)
    if key in COOP:
        return _coop(root, key, classes, per_class, seed)
    if key == "imagefolder":
        folder = root / "photos"
        names = [f"class_{c}" for c in range(classes)]
        items = []
        for c in range(classes):
            items += _images(folder / names[c], c, per_class, seed, ".png")
        _clutter(folder / names[0])
        return FakeDataset(f"imagefolder:{folder}", root, names, items)
    raise ValueError(f"unknown fake dataset key {key!r}; choose one of {', '.join(ALL_KEYS)}")
