"""docs/limits.md's table of the families' sections says the bounds the code enforces (issue 32
point 5: it bounded DPE's `lr_text`/`lr_image` at 10⁶ while `dpe.Params` refused anything above 1).
Each numeric range of the table is parsed and checked against the family's `Params`: its ends are
accepted (closed) or refused (open), and the nearest values outside them are refused."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from mstta.engine.families import CACHE, FAMILIES
from mstta.errors import UserError

LIMITS = Path(__file__).resolve().parent.parent / "docs" / "limits.md"
SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹", "0123456789")


def _number(text: str) -> float:
    """'10⁶' -> 1e6, '2⁴⁰' -> 2**40, '4,096' -> 4096, '1e-6' -> 1e-6."""
    text = text.strip().replace(",", "")
    m = re.fullmatch(r"(\d+)([⁰¹²³⁴⁵⁶⁷⁸⁹]+)", text)
    if m:
        return float(int(m.group(1)) ** int(m.group(2).translate(SUPERSCRIPT)))
    return float(text)


def _range(text: str) -> tuple[float, float, bool, bool, bool] | None:
    """(low, high, low open, high open, integer) of 'integer 1 … 256', '(0, 10⁶]', '0 … 1'; None otherwise."""
    integer = text.startswith("integer ")
    text = text.removeprefix("integer ").removeprefix("finite, ").strip()
    m = re.fullmatch(r"([(\[])\s*([^,]+),\s*([^\])]+)([)\]])", text)
    if m:
        return _number(m.group(2)), _number(m.group(3)), m.group(1) == "(", m.group(4) == ")", integer
    m = re.fullmatch(r"(\S+) … (\S+)", text)
    if m:
        return _number(m.group(1)), _number(m.group(2)), False, False, integer
    return None


def family_bounds() -> list[tuple[str, str, tuple]]:
    """(section, key, range) of every numeric range in the families' table."""
    out = []
    for line in LIMITS.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        section = cells[0].strip("`") if len(cells) == 3 else ""
        if section not in FAMILIES:
            continue
        for clause in cells[1].split(";"):
            keys = re.findall(r"`([a-z_0-9]+)`", clause)
            rng = _range(re.sub(r"^(\s*`[a-z_0-9]+`,?)+", "", clause).strip())
            out += [(section, key, rng) for key in keys if rng is not None]
    return out


BOUNDS = family_bounds()


def test_every_family_has_its_bounds_in_the_table():
    assert {s for s, _, _ in BOUNDS} == set(FAMILIES) - {CACHE}  # the cache family's keys: the table above it
    assert ("dpe", "lr_text", (0.0, 1.0, False, False, False)) in BOUNDS  # the row issue 32 found wrong


def _accepts(section: str, key: str, value) -> bool:
    try:
        FAMILIES[section].Params(**{key: value})
    except UserError:
        return False
    return True


@pytest.mark.parametrize("section,key,rng", BOUNDS, ids=[f"{s}.{k}" for s, k, _ in BOUNDS])
def test_the_documented_bound_is_the_codes(section, key, rng):
    low, high, low_open, high_open, integer = rng
    if integer:
        low, high = int(low), int(high)
        assert _accepts(section, key, low) and _accepts(section, key, high)
        assert not _accepts(section, key, low - 1) and not _accepts(section, key, high + 1)
        return
    assert _accepts(section, key, low) != low_open, f"{section}.{key} = {low}"
    assert _accepts(section, key, high) != high_open, f"{section}.{key} = {high}"
    assert not _accepts(section, key, math.nextafter(high, math.inf)), f"{section}.{key} above {high}"
    assert not _accepts(section, key, math.nextafter(low, -math.inf)), f"{section}.{key} below {low}"
