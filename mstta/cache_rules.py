"""Which slot a new cache entry takes: the rules shared by the online engine and the replay scan.

They work on small host-side arrays (one class row), so the online engine and the vectorised
replay make bit-identical decisions from the same entropies.
"""
from __future__ import annotations

import numpy as np

EMPTY_TIME = -1


def entropy_slot(row_entropy: np.ndarray, h: float) -> int:
    """Lowest-entropy rule (§3.1, Alg. 1; TDA): the first empty slot (+inf), else the
    highest-entropy entry if `h` is strictly lower; -1 = not inserted."""
    j = int(row_entropy.argmax())
    return j if h < row_entropy[j] else -1


def fifo_slot(row_time: np.ndarray) -> int:
    """First-in-first-out rule (BoostAdapter's negative cache): the first empty slot, else the
    oldest entry (time -1 marks an empty slot)."""
    return int(row_time.argmin())


def entropy_gate(h: float, num_classes: int, lower: float, upper: float) -> bool:
    """TDA's negative-cache admission: lower < H / log2(C) < upper (H in nats)."""
    hn = h / np.log2(num_classes)
    return bool(lower < hn < upper)
