"""FGVC-Aircraft: `variants.txt` (label = line index) + `images_variant_test.txt` ('<image_id> <variant>')."""

from __future__ import annotations

from pathlib import Path

from .common import TestSplit, check_items, layout_error, read_lines, require_dir

LAYOUT = (
    "<root>/fgvc_aircraft/{variants.txt, images_variant_test.txt, images/<image_id>.jpg} "
    "(the data/ folder of fgvc-aircraft-2013b, renamed)"
)


def load_aircraft(key: str, root: Path) -> TestSplit:
    """Test split of FGVC-Aircraft as the peers read it (variant names may contain spaces)."""
    base = require_dir(root / "fgvc_aircraft", key, LAYOUT)
    image_dir = require_dir(base / "images", key, LAYOUT)
    classnames = [ln.strip() for ln in read_lines(base / "variants.txt", key, LAYOUT)]
    index = {name: i for i, name in reversed(list(enumerate(classnames)))}
    test_file = base / "images_variant_test.txt"
    items = []
    for n, line in enumerate(read_lines(test_file, key, LAYOUT), 1):
        image_id, sep, name = line.strip().partition(" ")
        if not sep or name.strip() not in index:
            raise layout_error(key, f"{test_file} line {n}: {line.strip()!r} names no variant of variants.txt", LAYOUT)
        items.append((image_dir / f"{image_id}.jpg", index[name.strip()]))
    check_items(key, items, LAYOUT)
    return TestSplit(key, items, classnames, layout=LAYOUT)
