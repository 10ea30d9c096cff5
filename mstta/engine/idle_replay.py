"""The cache family's replay under `forget.rule=idle`, exactly the online step's caches without stepping.

The idle rule (`mstta.engine.forget`, the project's adaptation of DynaPrompt's LRU) empties a slot
not *used* (the live slot of largest kernel weight for a step's query, `cache.Cache._mark_used`)
nor inserted for `idle` steps, so a slot's life depends on every later query's weights. The
replay walks the stream in chunks: the entries alive at the chunk's start and the chunk's own
samples are every entry that can be alive in it, so one GEMM per chunk gives every weight the
chunk's steps read; a host scan over the chunk's steps (expiries, the slot rule, each step's use
from its query's top weights) fixes each entry's interval; the chunk's logits are its weights
masked by those intervals. Per step, the engine's order: expire, insert, read (and mark) weights.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import torch

from ..threads import map_chunks, workers
from .cache_rules import EMPTY_TIME, entropy_slot, fifo_slot


class IdleCache:
    """One cache (positive, or TDA's negative) over a stream under the idle rule: its class rows on
    the host (entropy, insertion time, owner sample, last use), each sample's slot while cached,
    and the expiry deadlines in the order they were set (each is `idle` after a use or an insert,
    so they never decrease). `weights(q, keys, bias)` is the engine's fused kernel of this cache."""

    def __init__(self, labels, lab_t, h, capacity, num_classes, policy, gate, idle, weights, log_w, values=None):
        n = len(labels)
        self.labels, self.lab_t, self.h, self.gate, self.idle = labels.tolist(), lab_t, h.tolist(), gate, idle
        self.Q, self.C, self.fifo = capacity, num_classes, policy == "fifo"
        self.weights, self.log_w, self.values = weights, log_w, values
        self.ent = [[math.inf] * capacity for _ in range(num_classes)]
        self.when = [[EMPTY_TIME] * capacity for _ in range(num_classes)]
        self.owner = [[-1] * capacity for _ in range(num_classes)]
        self.used = [[EMPTY_TIME] * capacity for _ in range(num_classes)]
        self.slot = [-1] * n  # c * Q + j while the sample is cached (the engine's slot order), else -1
        self.slots = np.full(n, -1, dtype=np.int64)  # the same as an array (a query's whole row)
        self.cached: set[int] = set()  # the samples cached now
        self.end = np.full(n, -1, dtype=np.int64)  # sample s cached over [s, end[s]); -1: never
        self.deadlines: deque = deque()  # (step, class, slot, owner)

    def logits(self, q: torch.Tensor, a: int, b: int) -> torch.Tensor:
        """Cache logits of samples [a, b) [b - a, C]; the cache's state advanced to step b."""
        live = sorted(self.cached)
        cols = [*live, *(range(a, b) if self.gate is None else (t for t in range(a, b) if self.gate[t]))]
        if not cols:
            return torch.zeros(b - a, self.C, device=q.device)
        at = torch.as_tensor(cols, device=q.device)
        keys, bias = q[at], torch.full((len(cols),), self.log_w, device=q.device)
        uses = math.isfinite(self.log_w)  # a = 0: no slot is live to the engine's use

        def weigh(ab):
            w = self.weights(q[ab[0] : ab[1]], keys, bias)
            return (w, *(_top_two(w) if uses else ()))

        pieces = _pieces(a, b)
        parts = map_chunks(weigh, pieces, q.device)
        if uses:
            rows = [(w, i) for w, *_ in parts for i in range(w.shape[0])]
            self._scan(a, b, cols, rows, *([x for p in parts for x in p[k]] for k in (1, 2, 3)))
        else:
            self._scan(a, b, cols, None, None, None, None)
        end = self.end[cols]
        dying = np.nonzero(end[: len(live)] < b)[0]  # entries alive at a that leave within the chunk
        mine = torch.as_tensor(end[len(live) :], device=q.device)  # the chunk's own: [s, end[s])
        dy, dy_end = torch.as_tensor(dying, device=q.device), torch.as_tensor(end[dying], device=q.device)
        first = at[len(live) :]
        value = self.lab_t[at] if self.values is None else self.values[at]  # each column's class, or its value row

        def read(i):
            (r0, r1), w = pieces[i], parts[i][0]
            t = torch.arange(r0, r1, device=q.device).unsqueeze(1)
            w[:, len(live) :].mul_((first <= t) & (t < mine))
            if len(dying):
                w.index_copy_(1, dy, w.index_select(1, dy) * (t < dy_end))
            if self.values is None:
                return torch.zeros(r1 - r0, self.C, device=q.device).index_add_(1, value, w)
            return w @ value

        return torch.cat(map_chunks(read, range(len(pieces)), q.device))

    def _scan(self, a, b, cols, rows, top, at, second) -> None:
        """Steps a..b-1 on the host rows: expiries, the slot rule, each step's use (`Cache._mark_used`:
        the live slot of largest weight; of equal ones the first slot): the column of the query's top
        weight when it is live and alone (above the second), else read from its whole row."""
        gate, dl, slot, Q, idle = self.gate, self.deadlines, self.slot, self.Q, self.idle
        used, owner = self.used, self.owner
        for t in range(a, b):
            if dl and dl[0][0] <= t:
                self._expire(t)
            if gate is None or gate[t]:
                self._insert(t)
            if rows is None:
                continue
            r = t - a
            s = slot[cols[at[r]]]
            if s < 0 or not top[r] > second[r]:
                s = self._use_whole(cols, rows[r][0][rows[r][1]])
                if s < 0:
                    continue
            c, j = divmod(s, Q)
            used[c][j] = t
            dl.append((t + idle, c, j, owner[c][j]))

    def _expire(self, t: int) -> None:
        """`Cache.expire`: every live slot whose last use is `idle` or more steps before t empties."""
        dl = self.deadlines
        while dl and dl[0][0] <= t:
            due, c, j, s = dl.popleft()
            if self.owner[c][j] == s and self.used[c][j] + self.idle == due:
                self._vacate(c, j, t)

    def _vacate(self, c: int, j: int, t: int) -> None:
        """Slot j of class row c empties at step t (its entry's interval ends)."""
        s = self.owner[c][j]
        self.end[s], self.slot[s], self.slots[s] = t, -1, -1
        self.cached.discard(s)
        self.owner[c][j], self.ent[c][j], self.when[c][j], self.used[c][j] = -1, math.inf, EMPTY_TIME, EMPTY_TIME

    def _insert(self, t: int) -> None:
        """`Cache.insert`'s slot rule (entropy, or first in, first out) on class row labels[t]."""
        c, h = self.labels[t], self.h[t]
        ent, when, owner = self.ent[c], self.when[c], self.owner[c]
        j = fifo_slot(when) if self.fifo else entropy_slot(ent, when, h)
        if j < 0:
            return
        if owner[j] >= 0:
            self._vacate(c, j, t)
        owner[j], ent[j], when[j], self.used[c][j] = t, h, t, t
        self.slot[t] = self.slots[t] = c * self.Q + j
        self.end[t] = len(self.slot)
        self.cached.add(t)
        self.deadlines.append((t + self.idle, c, j, t))

    def _use_whole(self, cols: list[int], row: torch.Tensor) -> int:
        """The live slot of largest weight in a query's whole row (of equal ones the first slot); -1: none live."""
        slot = self.slots[cols]
        w = np.where(slot >= 0, row.cpu().numpy(), -np.inf)
        top = w.max()
        if not top > -np.inf:
            return -1
        return int(slot[w == top].min())


def _top_two(w: torch.Tensor) -> tuple[list[float], list[int], list[float]]:
    """Each row's largest weight, its column, and the largest of the other columns (-inf: none)."""
    top, at = w.max(-1)
    col = at.unsqueeze(1)
    w.scatter_(1, col, float("-inf"))
    second = w.max(-1).values
    w.scatter_(1, col, top.unsqueeze(1))
    return top.tolist(), at.tolist(), second.tolist()


def _pieces(a: int, b: int) -> list[tuple[int, int]]:
    """Rows [a, b) in one piece per pool worker (the chunk's GEMMs spread over the cores)."""
    size = max(16, -(-(b - a) // workers()))
    return [(r, min(b, r + size)) for r in range(a, b, size)]
