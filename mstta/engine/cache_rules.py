"""Which slot a new cache entry takes: the rules shared by the online engine and the replay scan.

Each rule is written for one class row, twice side by side: on host rows (the replay's scan
over a whole stream, BoostAdapter's throw-away per-view copies) and as device tensor ops (the
online engine's step, with no host round trip). A test checks the two agree on random rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

EMPTY_TIME = -1


def entropy_slot(row_entropy: Sequence[float], row_time: Sequence[int], h: float) -> int:
    """Lowest-entropy rule (§3.1, Alg. 1) as TDA's code keeps it (tda_runner.py:28-39
    `update_cache`: a list sorted by entropy, stable, whose last item is replaced when `h` is
    strictly lower): the first empty slot (+inf), else the highest-entropy entry, of equal ones
    the latest inserted (`row_time`), if `h` is strictly lower; -1 = not inserted. Plain Python
    over a row of Q slots (lists or arrays): the replay's scan calls it once per sample."""
    worst = max(row_entropy)
    j = max((i for i, e in enumerate(row_entropy) if e == worst), key=row_time.__getitem__)  # first of the latest
    return j if h < row_entropy[j] else -1


def fifo_slot(row_time: Sequence[int]) -> int:
    """First-in-first-out rule (BoostAdapter's negative cache, `update_cache(..., fifo=True)`):
    the first empty slot, else the oldest entry (time -1 marks an empty slot)."""
    return min(range(len(row_time)), key=row_time.__getitem__)


def entropy_gate(h: float, num_classes: int, lower: float, upper: float) -> bool:
    """TDA's negative-cache admission: lower < H / log2(C) < upper (H in nats, as TDA's
    `get_entropy` divides by log2(C))."""
    hn = h / math.log2(num_classes)
    return bool(lower < hn < upper)


def entropy_slot_t(
    row_entropy: torch.Tensor, row_time: torch.Tensor, h: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """`entropy_slot` as tensor ops: of the highest-entropy slots the latest (all empty slots have
    time -1: the first wins). rows [R, Q], times [R, Q], h [R] -> (slot [R], inserted [R] bool)."""
    top = row_entropy == row_entropy.amax(-1, keepdim=True)
    j = torch.where(top, row_time, EMPTY_TIME - 1).argmax(-1)
    return j, h < row_entropy.gather(-1, j.unsqueeze(-1)).squeeze(-1)


def fifo_slot_t(row_time: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`fifo_slot` as tensor ops: rows [R, Q] -> (slot [R], inserted [R] all true)."""
    j = row_time.argmin(-1)
    return j, torch.ones_like(j, dtype=torch.bool)


def entropy_gate_t(h: torch.Tensor, num_classes: int, lower: float, upper: float) -> torch.Tensor:
    """`entropy_gate` as tensor ops (in float64, as the host rule): h [R] -> [R] bool."""
    hn = h.double() / math.log2(num_classes)
    return (lower < hn) & (hn < upper)
