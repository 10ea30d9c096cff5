"""Value checks shared by every config dataclass: each refusal is one line naming the key, the value
(shortened) and the range it must be in (docs/limits.md gives each bound's reason)."""

from __future__ import annotations

import math
import reprlib
from typing import Any

from .errors import UserError


def check(ok: bool, key: str, value: Any, expected: str) -> None:
    if not ok:
        raise UserError(f"bad value for '{key}': {show(value)}; expected {expected}")


def check_int(obj: Any, key: str, low: int, high: int, extra: str = "") -> None:
    """An integer field in [low, high] (bool is not an integer here)."""
    v = getattr(obj, key)
    ok = isinstance(v, int) and not isinstance(v, bool) and low <= v <= high
    check(ok, key, v, f"an integer in [{low}, {high:,}]{extra} (bounds: docs/limits.md)")


def check_num(obj: Any, key: str, low: float, high: float, low_open: bool = False) -> None:
    """A finite number in [low, high] ((low, high] with `low_open`); NaN and infinities refused."""
    v = getattr(obj, key)
    ok = (
        isinstance(v, (int, float))
        and not isinstance(v, bool)
        and math.isfinite(v)
        and (low < v if low_open else low <= v)
        and v <= high
    )
    check(ok, key, v, f"a finite number in {'(' if low_open else '['}{low:g}, {high:g}] (bounds: docs/limits.md)")


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60
_REPR.maxlevel = 1
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 4


def show(value: Any) -> str:
    """A short repr for error messages (a YAML alias bomb, a huge string or an integer of 10^5 digits
    stays one short line)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"{'-' if value < 0 else ''}an integer of {value.bit_length():,} bits"
    return _REPR.repr(value)
