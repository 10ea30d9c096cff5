"""Prompt templates (data in `mstta/resources/templates.json`): per-dataset sets as the peers use them."""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from ..errors import UserError
from ..safety import check_input_file

TEMPLATES_FILE = Path(__file__).resolve().parent.parent / "resources" / "templates.json"


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
            raise UserError(
                f"{where} {t!r}: a template needs exactly one '{{}}' where the class name goes, "
                "e.g. 'a photo of a {}.'"
            )
    return out


def fill(template: str, classname: str) -> str:
    """`template` with `{}` replaced by the class name (underscores -> spaces, as the peers)."""
    return template.replace("{}", classname.replace("_", " "))


def template_hash(templates: Sequence[str]) -> str:
    """Short stable hash of an ordered template list (recorded in feature-file meta)."""
    return hashlib.sha256("\n".join(templates).encode("utf-8")).hexdigest()[:16]


DEFAULT_TEMPLATES: list[str] = list(_data()["default"])


# ---------------------------------------------------------------------- text sets (docs/field.md)
TEXT_SETS_FILE = Path(__file__).resolve().parent.parent / "resources" / "text_sets.json"
TEXT_SETS = ("peer", "photo", "tip7", "cupl", "user")  # `official` picks one per method row
MAX_CUPL_BYTES = 64 * 2**20  # a CuPL JSON file at most (DMN's ImageNet file is ~4 MB)
MAX_CUPL_PROMPTS = 1000  # prompts per class at most (CuPL's files hold ~50)
MAX_PROMPT_CHARS = 1000


@lru_cache(maxsize=1)
def _text_sets() -> dict:
    return json.loads(TEXT_SETS_FILE.read_text(encoding="utf-8"))


def set_templates(name: str, peer: Sequence[str]) -> list[str]:
    """The templates of a text set that is templates only (`peer`: the dataset's own, given)."""
    if name == "peer":
        return list(peer)
    if name in ("photo", "tip7"):
        return list(_text_sets()[name])
    raise UserError(f"text set '{name}' is not a template set; choose one of: peer, photo, tip7")


def official_sets(method_name: str, family: str) -> list[str]:
    """A method row's official text sets in order of preference (resources/text_sets.json: by
    method name, else by family, else the default)."""
    off = _text_sets()["official"]
    entry = off["methods"].get(method_name, off["families"].get(family, off["default"]))
    return [entry] if isinstance(entry, str) else list(entry)


def _norm_class(name: str) -> str:
    return " ".join(str(name).replace("_", " ").split()).lower()


def read_cupl(path: str | Path, classnames: Sequence[str], flag: str = "--cupl") -> list[list[str]]:
    """CuPL-style prompts from a JSON object {class name: [prompt, ...]} -> the prompts of each class
    in `classnames`' order. Names match ignoring case, '_' vs ' ' and repeated spaces. A file that
    names a class the dataset does not have, misses one, or is not such an object: one-line UserError."""
    p = Path(path).expanduser()
    try:
        size = check_input_file(flag, p, "a CuPL JSON file {class name: [prompts]}").stat().st_size
        if size > MAX_CUPL_BYTES:
            raise UserError(f"{flag} {p}: {size} bytes, above the {MAX_CUPL_BYTES // 2**20} MiB bound of a prompt file")
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{flag} {p}: file not found; pass a CuPL JSON file {{class name: [prompts]}}") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise UserError(f"{flag} {p}: not a readable JSON file ({' '.join(str(exc).split())[:80]})") from None
    if not isinstance(data, dict) or not data:
        raise UserError(f"{flag} {p}: expected a JSON object {{class name: [prompts]}}")
    by_name: dict[str, list[str]] = {}
    for name, prompts in data.items():
        if (
            not isinstance(prompts, list)
            or not prompts
            or len(prompts) > MAX_CUPL_PROMPTS
            or not all(isinstance(s, str) and s.strip() and len(s) <= MAX_PROMPT_CHARS for s in prompts)
        ):
            raise UserError(
                f"{flag} {p}: class {name!r} needs a list of 1 to {MAX_CUPL_PROMPTS} non-empty prompt "
                f"strings of at most {MAX_PROMPT_CHARS} characters"
            )
        by_name[_norm_class(name)] = list(prompts)
    want = [_norm_class(c) for c in classnames]
    extra = sorted(set(by_name) - set(want))
    missing = [c for c, w in zip(classnames, want) if w not in by_name]
    if extra:
        raise UserError(
            f"{flag} {p}: names {len(extra)} class(es) the dataset does not have (first: {extra[0]!r}); "
            "pass the prompt file of this dataset"
        )
    if missing:
        raise UserError(
            f"{flag} {p}: has no prompts for {len(missing)} of the dataset's {len(want)} classes "
            f"(first: {missing[0]!r}); pass the prompt file of this dataset"
        )
    return [by_name[w] for w in want]


def read_user_text(path: str | Path, num_classes: int, dim: int | None = None, flag: str = "--text-classifier"):
    """A user's own [C, d] text classifier (a .npy float array, e.g. CoOp's learned prompts encoded)
    -> float32 tensor, unit rows. Wrong shape, non-finite values or an all-zero row: one-line UserError."""
    import numpy as np
    import torch

    p = Path(path).expanduser()
    try:
        arr = np.load(p, allow_pickle=False, mmap_mode="r")
    except FileNotFoundError:
        raise UserError(f"{flag} {p}: file not found; pass a .npy file holding a [C, d] float array") from None
    except (OSError, ValueError, EOFError) as exc:
        raise UserError(
            f"{flag} {p}: not a .npy array ({' '.join(str(exc).split())[:80]}); save one with numpy.save"
        ) from None
    if not isinstance(arr, np.ndarray):
        raise UserError(f"{flag} {p}: not a single .npy array; save the [C, d] classifier with numpy.save")
    want = f"[{num_classes}, {dim if dim is not None else 'd'}]"
    if arr.ndim != 2 or arr.shape[0] != num_classes or (dim is not None and arr.shape[1] != dim):
        raise UserError(f"{flag} {p}: shape {list(arr.shape)}, expected {want} (classes x feature dims)")
    if arr.dtype.kind != "f" or arr.dtype.itemsize not in (2, 4, 8):
        raise UserError(f"{flag} {p}: dtype {arr.dtype}, expected float16/32/64")
    a = np.asarray(arr, dtype=np.float64)
    if not np.isfinite(a).all():
        raise UserError(f"{flag} {p}: holds non-finite values (NaN or inf); pass a finite classifier")
    if (np.abs(a).max(1) == 0).any():
        raise UserError(
            f"{flag} {p}: row {int(np.flatnonzero(np.abs(a).max(1) == 0)[0])} is all zeros; "
            "every class needs a direction"
        )
    return torch.nn.functional.normalize(torch.from_numpy(a), dim=-1).float()
