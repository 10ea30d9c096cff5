"""Value checks shared by every config dataclass: each refusal is one line naming the key, the value
(shortened) and the range it must be in (docs/limits.md gives each bound's reason)."""

from __future__ import annotations

import math
import reprlib
from typing import Any

from .errors import UserError

MAX_SEED = 2**63 - 1  # torch.Generator.manual_seed takes a 64-bit integer; seeds are >= 0
MAX_WEIGHT = 1e6  # lam, alphas, betas, logit_scale (TDA's are <= 10; CLIP's scale 100):
# keeps every logit far inside float32 (1e6 x 1e6 x 256 << 3.4e38)


def check(ok: bool, key: str, value: Any, expected: str) -> None:
    if not ok:
        raise UserError(f"bad value for '{key}': {show(value)}; expected {expected}")


def is_int_in(value: Any, low: int, high: int | None = None) -> bool:
    """The one integer-range test: an int (bool is not one here) in [low, high] (no upper bound: None)."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value and (high is None or value <= high)


def int_range(low: int, high: int | None = None) -> str:
    """How every integer-range refusal words its range."""
    return f"an integer >= {low:,}" if high is None else f"an integer in [{low:,}, {high:,}]"


def int_in(value: Any, name: str, low: int, high: int | None = None, extra: str = "") -> int:
    """A flag's or argument's integer in [low, high] (`high` None: no upper bound), returned; else a
    one-line UserError "NAME VALUE: expected an integer in [low, high]EXTRA" (None is the caller's to allow)."""
    if not is_int_in(value, low, high):
        raise UserError(f"{name} {show(value)}: expected {int_range(low, high)}{extra}")
    return value


def check_int(obj: Any, key: str, low: int, high: int, extra: str = "") -> None:
    """A config dataclass's integer field in [low, high] (the message names the key, as `check_num`'s)."""
    v = getattr(obj, key)
    check(is_int_in(v, low, high), key, v, f"{int_range(low, high)}{extra} (bounds: docs/limits.md)")


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


def check_seed(value: Any, flag: str) -> int:
    """A seed: an integer in [0, 2^63 - 1] (what torch.Generator.manual_seed takes), else a UserError."""
    shown = show(value)
    if isinstance(value, str):
        try:
            value = int(value.strip()) if len(value) <= 40 else None
        except ValueError:
            value = None
    if not is_int_in(value, 0, MAX_SEED):
        raise UserError(f"{flag} {shown}: expected an integer seed in [0, 2^63 - 1], e.g. {flag} 1")
    return value
