"""The one palette: the annotated frame (`app.annotate`) and the page's charts (`app.ui.plots`)
draw each side in the same colour. Hex strings; `rgb(hex)` for Pillow."""

from __future__ import annotations

CLIP = "#3b82f6"  # zero-shot CLIP: blue
METHODS = ("#f59e0b", "#10b981", "#db2777", "#0891b2")  # raced methods in order: orange (the first), green, pink, cyan
AGREEMENT = "#8b5cf6"  # violet: agreement belongs to neither side
AGREE = "#16a34a"  # the agree badge / banner
DISAGREE = "#dc2626"  # the DISAGREE badge / banner and frame border
MARK = "#fad200"  # the random-weights banner (black text on it)
MUTED = "#9ca3af"  # a top-k list's lower ranks


def rgb(color: str) -> tuple[int, int, int]:
    """'#3b82f6' -> (59, 130, 246)."""
    value = color.lstrip("#")
    return int(value[0:2], 16), int(value[2:4], 16), int(value[4:6], 16)


def method_color(i: int) -> str:
    """The colour of the i-th raced method (0 = the first, shown as "the adapted method")."""
    return METHODS[i % len(METHODS)]
