"""CoOp-style datasets: a `split_zhou_*.json` whose `test` list holds [relative_path, label, class_name]."""

from __future__ import annotations

from pathlib import Path

from .common import TestSplit, check_items, layout_error, names_by_label, read_json, require_dir

# key -> (dataset folder, image folder inside it ('' = the dataset folder), split file)
COOP = {
    "caltech101": ("caltech-101", "101_ObjectCategories", "split_zhou_Caltech101.json"),
    "stanford_cars": ("stanford_cars", "", "split_zhou_StanfordCars.json"),
    "dtd": ("dtd", "images", "split_zhou_DescribableTextures.json"),
    "eurosat": ("eurosat", "2750", "split_zhou_EuroSAT.json"),
    "oxford_flowers": ("oxford_flowers", "jpg", "split_zhou_OxfordFlowers.json"),
    "food101": ("food-101", "images", "split_zhou_Food101.json"),
    "oxford_pets": ("oxford_pets", "images", "split_zhou_OxfordPets.json"),
    "sun397": ("sun397", "SUN397", "split_zhou_SUN397.json"),
    "ucf101": ("ucf101", "UCF-101-midframes", "split_zhou_UCF101.json"),
}


def coop_layout(key: str) -> str:
    folder, images, split = COOP[key]
    img = f"<root>/{folder}/{images}/" if images else f"<root>/{folder}/"
    return f"{img}<relative_path> and <root>/{folder}/{split} with a 'test' list of [relative_path, label, class_name]"


def load_coop(key: str, root: Path) -> TestSplit:
    """Test split of a CoOp-style dataset, paths/labels/names exactly as its split JSON stores them."""
    folder, images, split = COOP[key]
    layout = coop_layout(key)
    base = require_dir(root / folder, key, layout)
    image_dir = require_dir(base / images, key, layout) if images else base
    split_path = base / split
    data = read_json(split_path, key, layout)
    test = data.get("test") if isinstance(data, dict) else None
    if not isinstance(test, list):
        raise layout_error(key, f"{split_path} has no 'test' list", layout)
    items, pairs = [], []
    for i, row in enumerate(test):
        if not (isinstance(row, list) and len(row) == 3 and isinstance(row[0], str) and isinstance(row[2], str)):
            raise layout_error(key, f"{split_path}: test[{i}] is not [relative_path, label, class_name]", layout)
        try:
            label = int(row[1])
        except (TypeError, ValueError):
            raise layout_error(key, f"{split_path}: test[{i}] has a non-integer label {row[1]!r}", layout) from None
        if label < 0:
            raise layout_error(key, f"{split_path}: test[{i}] has a negative label {label}", layout)
        items.append((image_dir / row[0], label))
        pairs.append((label, row[2]))
    if not items:
        raise layout_error(key, f"{split_path}: the 'test' list is empty", layout)
    classnames = names_by_label(key, pairs, split_path, layout)
    check_items(key, items, layout)
    return TestSplit(key, items, classnames, layout=layout)
