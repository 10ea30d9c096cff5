"""The cells of every Markdown report: numbers (mean ± sample std, signed gains, — for none),
Markdown tables and row labels. `report`, `efficiencyreport`, `sweep` and `fieldreport` build on it.
"""

from __future__ import annotations

import statistics
from typing import Iterable, Sequence

from .context import held_rows, row_title

DASH = "—"


def stats(values: Sequence[float]) -> tuple[float, float | None, int] | None:
    """(mean, sample std or None for one value, n) or None for no values."""
    if not values:
        return None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None), len(values)


def fmt(value: float | None, signed: bool = False) -> str:
    """A number with two decimals (signed: with its sign), — for none."""
    if value is None:
        return DASH
    return f"{value:+.2f}" if signed else f"{value:.2f}"


def fmt_stats(s: tuple[float, float | None, int] | None) -> str:
    """`mean ± std` of a `stats` triple (the mean alone for one value), — for none."""
    if s is None:
        return DASH
    mean, std, _ = s
    return fmt(mean) if std is None else f"{mean:.2f} ± {std:.2f}"


def diff(a: float | None, b: float | None) -> float | None:
    """a − b, or None when either is missing."""
    return None if a is None or b is None else a - b


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """A Markdown table; first column left-aligned, the rest right-aligned."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join([":---"] + ["---:"] * (len(header) - 1)) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def method_label(m: str, bench: str | None = None) -> str:
    """A row's title, marked ‡ when it is held against the paper's row in table `bench` ('ood',
    'cross'; None: in either)."""
    return f"{row_title(m)} ‡" if m in held_rows(bench) else row_title(m)


def backbone_label(name: str, pretrained: str) -> str:
    """A backbone's label in a report (`Backbone.label`)."""
    from .store import Backbone

    return Backbone(name, pretrained).label
