"""`imagefolder:PATH`: any folder with one sub-folder per class (class name = folder name)."""

from __future__ import annotations

from pathlib import Path

from .common import TestSplit, layout_error, list_class_dirs, require_dir, scan_class_folders

LAYOUT = "PATH/<class name>/<images> (one folder per class; '_' in a folder name becomes a space in prompts)"


def load_folder(key: str, path: Path) -> TestSplit:
    """Every image under PATH/<class>/, labels in sorted folder-name order."""
    require_dir(path, key, LAYOUT)
    dirs = list_class_dirs(path)
    if not dirs:
        raise layout_error(key, f"{path} holds no class folders", LAYOUT)
    return TestSplit(key, scan_class_folders(key, dirs, LAYOUT), [d.name for d in dirs], layout=LAYOUT)
