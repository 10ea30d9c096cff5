"""Prompt templates (data in `mstta/resources/templates.json`): per-dataset sets as the peers use them."""
from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from .errors import UserError

TEMPLATES_FILE = Path(__file__).resolve().parent / "resources" / "templates.json"


@lru_cache(maxsize=1)
def _data() -> dict:
    """The parsed templates file (read once)."""
    return json.loads(TEMPLATES_FILE.read_text(encoding="utf-8"))


def template_set(name: str) -> list[str]:
    """A named set: `imagenet7`, `clip80` or `default`."""
    data = _data()
    if name == "default":
        return list(data["default"])
    if name not in data["sets"]:
        raise UserError(f"unknown template set '{name}'; choose one of: default, {', '.join(data['sets'])}")
    return list(data["sets"][name])


def templates_for(dataset_key: str) -> list[str]:
    """The templates a dataset is prompted with (datasets.md); unknown keys get DEFAULT_TEMPLATES."""
    entry = _data()["datasets"].get(dataset_key)
    if entry is None:
        return list(DEFAULT_TEMPLATES)
    return template_set(entry) if isinstance(entry, str) else list(entry)


def check_templates(templates: Sequence[str], where: str = "--template") -> list[str]:
    """Each template is a string with exactly one `{}` (the class name); else a one-line UserError."""
    out = list(templates)
    if not out:
        raise UserError(f"{where}: no templates given; pass at least one, e.g. --template 'a photo of a {{}}.'")
    for t in out:
        if not isinstance(t, str) or t.count("{}") != 1:
            raise UserError(f"{where} {t!r}: a template needs exactly one '{{}}' where the class name goes, "
                            "e.g. 'a photo of a {}.'")
    return out


def fill(template: str, classname: str) -> str:
    """`template` with `{}` replaced by the class name (underscores -> spaces, as the peers)."""
    return template.replace("{}", classname.replace("_", " "))


def template_hash(templates: Sequence[str]) -> str:
    """Short stable hash of an ordered template list (recorded in feature-file meta)."""
    return hashlib.sha256("\n".join(templates).encode("utf-8")).hexdigest()[:16]


DEFAULT_TEMPLATES: list[str] = list(_data()["default"])
