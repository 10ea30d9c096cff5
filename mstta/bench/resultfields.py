"""The type of every field a results file holds (`results.json`, `sweep_<param>.json`), checked on
load: a hand-edited or foreign file ("accuracy": "99 %", a list as a seed, NaN) is one line naming
the file, the entry and the field, never a traceback in the report or a wrong table.

Fields not listed here are kept as they are (any JSON value); listed ones must have their type.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

from ..errors import UserError


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _percent(v: Any) -> bool:
    return _number(v) and 0 <= v <= 100


def _gain(v: Any) -> bool:
    return _number(v) and -100 <= v <= 100


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _text(v: Any) -> bool:
    return isinstance(v, str)


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


def _texts(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _mapping(v: Any) -> bool:
    return isinstance(v, dict)


# field -> (check, what it must be: said in the error)
PERCENT = (_percent, "a number in [0, 100]")
FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    **{k: (_text, "a string") for k in ("dataset", "backbone", "pretrained", "method", "reason")},
    "seed": (_count, "a non-negative integer"),
    **{k: PERCENT for k in ("accuracy", "zero_shot_accuracy", "clip_view_accuracy")},
    **{k: (_gain, "a number in [-100, 100]") for k in ("gain_over_clip", "gain_over_clip_views")},
    **{
        k: (_optional(_percent), "a number in [0, 100] or null")
        for k in (
            "ece",
            "first_half",
            "second_half",
            "orders_mean",
            "orders_std",
            "worst10",
            "auroc",
            "fpr95",
            "known_accuracy",
            "mixed_auroc",
            "mixed_fpr95",
            "mixed_known_accuracy",
        )
    },
    **{
        k: (_optional(lambda v: _number(v) and v >= 0), "a non-negative number or null")
        for k in ("nll", "fps", "adapt_fps", "samples_per_s", "seconds", "peak_memory_mb", "mix_share")
    },
    **{k: (_count, "a non-negative integer") for k in ("n", "classes", "views", "store_views", "orders", "ece_bins")},
    **{k: (_optional(_count), "a non-negative integer or null") for k in ("limit", "state_bytes", "samples")},
    **{
        k: (_optional(_text), "a string or null")
        for k in (
            "fingerprint",
            "text",
            "text_requested",
            "family",
            "benchmark",
            "protocol",
            "listing",
            "augment",
            "view_mode",
            "precision",
            "memory_kind",
            "device",
            "features",
            "finished_at",
            "mix_with",
            "param",
            "sweep_method",
            "views_made",
        )
    },
    "label_tuned": (lambda v: isinstance(v, bool), "true or false"),
    "value": (lambda v: _number(v) or isinstance(v, str), "a number or a string"),
    "marks": (_texts, "a list of strings"),
    **{k: (_optional(_mapping), "an object or null") for k in ("hyperparameters", "versions", "tuned")},
}
LISTS = {  # each list of the file -> the fields every entry must have
    "runs": ("dataset", "backbone", "pretrained", "method", "seed", "accuracy"),
    "missing": ("dataset", "backbone", "pretrained", "reason"),
    "efficiency": ("backbone", "pretrained", "method"),
}


def check_results(path: Path, data: dict[str, Any], key: tuple[str, ...]) -> None:
    """Every entry of every list an object with its required fields (`LISTS`, plus the store's `key`
    for runs), and every listed field of the type `FIELDS` gives it; one UserError naming the first."""
    for name, required in LISTS.items():
        entries = data.get(name, [])
        if not isinstance(entries, list):
            raise _bad(path, f"'{name}' is {type(entries).__name__}, not a list")
        need = tuple(dict.fromkeys(required + (key if name == "runs" else ())))
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise _bad(path, f"{name}[{i}] is {type(entry).__name__}, not an object")
            missing = [k for k in need if k not in entry]
            if missing:
                raise _bad(path, f"{name}[{i}] has no '{missing[0]}'")
            for field, value in entry.items():
                check, what = FIELDS.get(field, (None, ""))
                if check is not None and not check(value):
                    shown = repr(value)[:40]
                    raise _bad(path, f"{name}[{i}] '{field}' is {shown}, not {what}")


def _bad(path: Path, why: str) -> UserError:
    return UserError(f"{path}: {why}; not a results file this version wrote: move it away or pass another --out")
