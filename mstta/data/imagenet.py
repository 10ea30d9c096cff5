"""ImageNet and its variants: one folder per class, class names from `classnames.txt` ('<wnid> <name>')."""

from __future__ import annotations

from pathlib import Path

from .common import (
    TestSplit,
    first_existing,
    layout_error,
    list_class_dirs,
    peer_listed,
    read_wnid_names,
    require_file,
    scan_class_folders,
)

# key -> (dataset folder, image folders tried in order: documented layout first, then peer fallbacks)
IMAGENET = {
    "imagenet": ("imagenet", ["images/val"]),
    "imagenet_a": ("imagenet-adversarial", ["imagenet-a"]),
    "imagenet_r": ("imagenet-rendition", ["imagenet-r"]),
    "imagenet_sketch": ("imagenet-sketch", ["images", "ImageNet-Sketch"]),
    "imagenet_v2": ("imagenetv2", ["imagenetv2-matched-frequency-format-val"]),
}


def imagenet_layout(key: str) -> str:
    folder, subs = IMAGENET[key]
    classes = "<0..999>" if key == "imagenet_v2" else "<wnid>"
    return (
        f"<root>/{folder}/{subs[0]}/{classes}/<images> and <root>/{folder}/classnames.txt "
        "('<wnid> <class name>' per line)"
    )


def _open_clip_imagenet_names() -> list[str]:
    """CLIP's 1000 ImageNet names in sorted-wnid order (the list TDA hard-codes)."""
    from open_clip.zero_shot_metadata import IMAGENET_CLASSNAMES

    return list(IMAGENET_CLASSNAMES)


def _names_for_wnids(key: str, dirs: list[Path], names_file: Path, layout: str) -> list[str]:
    table = dict(reversed(read_wnid_names(names_file, key, layout)))
    missing = [d.name for d in dirs if d.name not in table]
    if missing:
        raise layout_error(key, f"class folder {missing[0]} has no line in {names_file}", layout)
    return [table[d.name] for d in dirs]


def _load_v2(key: str, base: Path, image_dir: Path, layout: str, listing: str) -> TestSplit:
    """Folders 0..999: label = int(folder name), name = line `label` of classnames.txt; wnid folders as a fallback."""
    names_file = require_file(base / "classnames.txt", key, layout)
    dirs = list_class_dirs(image_dir)
    if dirs and not all(d.name.isdigit() for d in dirs):
        return TestSplit(
            key,
            scan_class_folders(key, dirs, layout, listing),
            _names_for_wnids(key, dirs, names_file, layout),
            layout=layout,
        )
    names = [name for _, name in read_wnid_names(names_file, key, layout)]
    dirs = sorted(dirs, key=lambda d: int(d.name))
    if not dirs:
        raise layout_error(key, f"{image_dir} holds no class folders", layout)
    bad = [d for d in dirs if int(d.name) >= len(names)]
    if bad:
        raise layout_error(
            key, f"class folder {bad[0]} has no line {int(bad[0].name)} in {names_file} ({len(names)} lines)", layout
        )
    items = []
    for d in dirs:
        part = scan_class_folders(key, [d], layout, listing)
        items.extend((p, int(d.name)) for p, _ in part)
    return TestSplit(key, items, names, layout=layout)


def load_imagenet(key: str, root: Path, listing: str = "full") -> TestSplit:
    """Test split of ImageNet / -A / -R / -Sketch (label = sorted-wnid position) or -V2 (label = folder number).

    `listing="peer"` reads the variants as TDA and BoostAdapter list them: their `listdir_nohidden`
    drops class folders and images whose names contain "sh" (e.g. TDA datasets/imagenet_a.py:40-45,
    imagenetv2.py:40-42); ImageNet itself is read through torchvision there, unfiltered.
    """
    folder, subs = IMAGENET[key]
    layout = imagenet_layout(key)
    base = root / folder
    image_dir = first_existing([base / s for s in subs], key, layout)
    listing = "full" if key == "imagenet" else listing
    if key == "imagenet_v2":
        return _load_v2(key, base, image_dir, layout, listing)
    dirs = [d for d in list_class_dirs(image_dir) if listing == "full" or peer_listed(d.name)]
    if not dirs:
        raise layout_error(key, f"{image_dir} holds no class folders", layout)
    items = scan_class_folders(key, dirs, layout, listing)
    names_file = base / "classnames.txt"
    if key == "imagenet" and not names_file.is_file() and len(dirs) == 1000:
        return TestSplit(key, items, _open_clip_imagenet_names(), layout=layout)
    require_file(names_file, key, layout)
    return TestSplit(key, items, _names_for_wnids(key, dirs, names_file, layout), layout=layout)
