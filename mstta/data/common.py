"""Shared pieces of the dataset loaders: the `TestSplit` record and checked file/folder helpers."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError

LISTINGS = ("full", "peer")  # full: every image; peer: the peers' listing (drops names containing "sh")
IMAGE_EXTENSIONS = (
    ".jpg",
    ".jpeg",
    ".png",
    ".bmp",
    ".gif",
    ".webp",
    ".tif",
    ".tiff",
    ".ppm",
    ".pgm",
)  # the one list (library and demo)


@dataclass
class TestSplit:
    """A dataset's test split: (image path, label) items, class names by label, prompt templates."""

    key: str  # dataset key, e.g. oxford_pets or imagefolder:/data/x
    items: list[tuple[Path, int]]
    classnames: list[str]
    templates: list[str] = field(default_factory=list)
    layout: str = ""  # one-line description of the expected layout

    @property
    def num_classes(self) -> int:
        return len(self.classnames)

    def __len__(self) -> int:
        return len(self.items)


def layout_error(key: str, what: str, layout: str) -> UserError:
    """A one-line error naming the dataset, the problem (with its exact path) and the layout expected."""
    return UserError(f"dataset {key}: {what}; expected layout: {layout}")


def require_dir(path: Path, key: str, layout: str) -> Path:
    if not path.is_dir():
        raise layout_error(key, f"folder not found: {path}", layout)
    return path


def require_file(path: Path, key: str, layout: str) -> Path:
    if not path.is_file():
        raise layout_error(key, f"file not found: {path}", layout)
    return path


def first_existing(paths: list[Path], key: str, layout: str) -> Path:
    """The first folder that exists among `paths` (documented layout first, then fallbacks)."""
    for p in paths:
        if p.is_dir():
            return p
    raise layout_error(key, f"folder not found: {paths[0]}", layout)


def _visible(name: str) -> bool:
    return not name.startswith(".")


def list_class_dirs(path: Path) -> list[Path]:
    """Non-hidden sub-folders, sorted by name (README.txt and other files are skipped)."""
    return sorted((p for p in path.iterdir() if _visible(p.name) and p.is_dir()), key=lambda p: p.name)


def list_images(path: Path, listing: str = "full") -> list[Path]:
    """Every non-hidden image file in a folder (by extension), sorted by name; `listing="peer"`
    also drops the names the peers' listing drops (`peer_listed`)."""
    return sorted(
        (
            p
            for p in path.iterdir()
            if _visible(p.name)
            and p.suffix.lower() in IMAGE_EXTENSIONS
            and p.is_file()
            and (listing == "full" or peer_listed(p.name))
        ),
        key=lambda p: p.name,
    )


def peer_listed(name: str) -> bool:
    """Whether TDA's and BoostAdapter's `listdir_nohidden` keeps a name: it drops every name that
    contains "sh" (kdiAAA/TDA datasets/utils.py:74, taolinzhang/BoostAdapter datasets/utils.py:75:
    `not f.startswith('.') and 'sh' not in f`), so ImageNet-A's 7,500 images become 6,862."""
    return not name.startswith(".") and "sh" not in name


def scan_class_folders(key: str, class_dirs: list[Path], layout: str, listing: str = "full") -> list[tuple[Path, int]]:
    """Items of folder-per-class datasets (label = position in `class_dirs`); an empty class is an error."""
    items: list[tuple[Path, int]] = []
    for label, d in enumerate(class_dirs):
        images = list_images(d, listing)
        if not images:
            raise layout_error(key, f"class folder {d} holds no images (an empty class)", layout)
        items.extend((p, label) for p in images)
    return items


def read_lines(path: Path, key: str, layout: str) -> list[str]:
    """Non-empty lines of a text file, right-stripped; unreadable text is a one-line error."""
    require_file(path, key, layout)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise layout_error(key, f"cannot read {path} ({type(exc).__name__})", layout) from None
    return [ln.rstrip() for ln in text.splitlines() if ln.strip()]


def read_wnid_names(path: Path, key: str, layout: str) -> list[tuple[str, str]]:
    """`classnames.txt`: lines '<wnid> <class name>' (the name is everything after the first space)."""
    out = []
    for i, line in enumerate(read_lines(path, key, layout), 1):
        wnid, sep, name = line.strip().partition(" ")
        if not sep or not name.strip():
            raise layout_error(key, f"{path} line {i}: expected '<wnid> <class name>', got {line.strip()!r}", layout)
        out.append((wnid, name.strip()))
    return out


def read_json(path: Path, key: str, layout: str) -> Any:
    require_file(path, key, layout)
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise layout_error(key, f"{path} is not valid JSON ({' '.join(str(exc).split())[:80]})", layout) from None


def check_items(key: str, items: list[tuple[Path, int]], layout: str) -> None:
    """Every listed image exists and is readable; a test split is never empty."""
    if not items:
        raise layout_error(key, "the test split lists no images", layout)
    for path, _ in items:
        if not path.is_file():
            raise layout_error(key, f"image listed in the split not found: {path}", layout)
        if not os.access(path, os.R_OK):
            raise layout_error(key, f"image not readable (permission denied): {path}", layout)


def names_by_label(key: str, pairs: list[tuple[int, str]], source: Path, layout: str) -> list[str]:
    """Class-name list ordered by label from (label, name) pairs; every label 0..max needs a name."""
    names: dict[int, str] = {}
    for label, name in pairs:
        names.setdefault(label, name)
    count = max(names) + 1 if names else 0
    missing = [c for c in range(count) if c not in names]
    if missing:
        raise layout_error(
            key, f"{source}: label {missing[0]} has no test item, so its class name is unknown (an empty class)", layout
        )
    return [names[c] for c in range(count)]
