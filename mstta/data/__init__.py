"""Test splits of the 15 benchmark datasets in the CoOp/TDA layout, plus `imagefolder:PATH`.

    split = load_split("oxford_pets", data_root)     # or "A", "imagefolder:/photos"
    split.items        # [(image path, label)], split.classnames, split.templates

Layouts, labels and class names follow the peers exactly (see the layout in each error message).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..errors import UserError
from .aircraft import LAYOUT as AIRCRAFT_LAYOUT
from .aircraft import load_aircraft
from .common import LISTINGS, TestSplit
from .coop import COOP, coop_layout, load_coop
from .folder import load_folder
from .imagenet import IMAGENET, imagenet_layout, load_imagenet
from .templates import DEFAULT_TEMPLATES, templates_for

FOLDER_PREFIX = "imagefolder:"

DATASETS: dict[str, Callable[[str, Path], TestSplit]] = {
    **{k: load_imagenet for k in IMAGENET},
    "fgvc_aircraft": load_aircraft,
    **{k: load_coop for k in COOP},
}

ALIASES = {
    "I": "imagenet",
    "A": "imagenet_a",
    "V": "imagenet_v2",
    "R": "imagenet_r",
    "S": "imagenet_sketch",
    "fgvc": "fgvc_aircraft",
}


def list_datasets() -> list[str]:
    """Registered dataset keys (aliases and `imagefolder:PATH` are accepted too)."""
    return list(DATASETS)


def layout_of(key: str) -> str:
    """One-line description of a registered dataset's expected layout under --data-root."""
    if key in IMAGENET:
        return imagenet_layout(key)
    if key in COOP:
        return coop_layout(key)
    return AIRCRAFT_LAYOUT


def resolve_key(name: str) -> str:
    """A dataset name as typed (alias, any case, '-' or '_') -> its registry key, or `imagefolder:PATH` as is."""
    if name.startswith(FOLDER_PREFIX):
        if not name[len(FOLDER_PREFIX) :].strip():
            raise UserError("--dataset imagefolder:PATH needs a folder, e.g. --dataset imagefolder:/data/photos")
        return name
    if name in ALIASES:
        return ALIASES[name]
    if len(name) == 1 and name.upper() in ALIASES:
        return ALIASES[name.upper()]
    key = name.strip().lower().replace("-", "_")
    key = ALIASES.get(key, key)
    if key not in DATASETS:
        raise UserError(
            f"--dataset {name}: unknown dataset; choose one of: {', '.join(DATASETS)}, "
            f"the short names {', '.join(ALIASES)}, or imagefolder:PATH"
        )
    return key


def check_listing(listing: str, flag: str = "--listing") -> str:
    """A valid listing name, or a one-line error naming the choices."""
    if listing not in LISTINGS:
        raise UserError(
            f"{flag} {listing}: unknown listing; choose one of: {', '.join(LISTINGS)} "
            "(full = every image; peer = the peers' list, which drops names containing 'sh')"
        )
    return listing


def load_split(name: str, data_root: str | Path | None = None, listing: str = "full") -> TestSplit:
    """The test split of dataset `name` under `data_root` (not needed for imagefolder:PATH).

    `listing`: `full` (every image) or `peer` (ImageNet-A/R/Sketch/V2 as TDA and BoostAdapter list
    them, without names containing "sh"; every other dataset is read from its split file, the same
    under both listings)."""
    check_listing(listing)
    key = resolve_key(name)
    if key.startswith(FOLDER_PREFIX):
        split = load_folder(key, Path(key[len(FOLDER_PREFIX) :]).expanduser())
        split.templates = list(DEFAULT_TEMPLATES)
        return split
    if data_root is None or str(data_root) == "":
        raise UserError(f"--data-root is required for dataset {key}: the folder that holds {layout_of(key)}")
    root = Path(data_root).expanduser()
    if not root.is_dir():
        raise UserError(
            f"--data-root {root}: folder not found; pass the folder that holds the datasets "
            f"(for {key}: {layout_of(key)})"
        )
    split = load_imagenet(key, root, listing) if key in IMAGENET else DATASETS[key](key, root)
    split.templates = templates_for(key)
    return split


__all__ = [
    "ALIASES",
    "DATASETS",
    "LISTINGS",
    "TestSplit",
    "check_listing",
    "layout_of",
    "list_datasets",
    "load_split",
    "resolve_key",
]
