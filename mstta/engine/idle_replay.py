"""The cache family's replay under `forget.rule=idle`, exactly the online step's caches without stepping.

The idle rule (`mstta.engine.forget`, the project's adaptation of DynaPrompt's LRU) empties a slot
not *used* (the live slot of largest kernel weight for a step's query, `cache.Cache._mark_used`)
nor inserted for `idle` steps, so a slot's life depends on every later query's weights. The
replay walks the stream in chunks: the entries alive at the chunk's start and the chunk's own
samples that may enter (`IdleCache.columns`) are every entry that can be alive in it, so one GEMM
per chunk gives every weight the chunk's steps read; a host scan over the chunk's steps (expiries,
the slot rule, each step's use: its query's top weight where that entry is live and alone, else
the largest weight of the live entries) fixes each entry's interval; the chunk's logits are its
weights masked by those intervals. Per step, the engine's order: expire, insert, read (and mark)
weights. The pool weighs the next chunk while it computes this chunk's logits (`replay_idle`); where
the stream is short against the cache's slots, so nearly every earlier sample is live, every chunk's
weights over every earlier sample that may enter are made ahead on the pool instead, and the scan
takes its columns from them (`_made_ahead`: no product waits for a scan).
"""

from __future__ import annotations

import functools
import math
from collections import deque
from collections.abc import Sequence

import numpy as np
import torch

from ..threads import ahead, chunk_workers, map_chunks, small_ops
from .cache_rules import EMPTY_TIME, entropy_slot, fifo_slot

# The chain's weights made ahead (`_made_ahead`) where each span's weights over every earlier sample
# that may be cached are at most AHEAD_WASTE times the columns the chain's could have (the live entries
# are at most C * Q), and all of them fit AHEAD_BYTES. Measured (`tda` / `ms-tta`, C = 1000, Q = 3,
# 2-vCPU AMD EPYC, replay wall time against `none`'s, paired; docs/engine.md): at 2,000 samples (1.00
# of the chain's columns) 1.00 / 1.08 where the chain takes 1.21 / 1.20; at 4,000 (1.05) 1.06 / 1.05
# against 1.06 / 1.11; at 5,000 (1.16) 1.08 / 1.04 against 1.03 / 1.03.
AHEAD_WASTE = 1.1
AHEAD_BYTES = 256 * 2**20


def replay_idle(caches: list[IdleCache], q: torch.Tensor, spans: list[tuple[int, int]], final) -> list:
    """[final(i, [each cache's logits of span i]) for each span] over the queries q [N, d]: with every
    span's weights made ahead where they may be (`_made_ahead`), else span after span: a span's
    weights (each cache's in row pieces, as many as the pool's workers allow beside the other jobs:
    one where the chunks run in turn, as on a GPU) are computed on the pool beside the last span's
    logits and final (one job), the scan between them on this thread (one intra-op thread: small
    host-driven ops)."""
    made = _made_ahead(caches, q, spans)
    if made is not None:
        return _replay_ahead(caches, q, spans, final, made)
    out, parts = [], max(1, chunk_workers(q.device) // (len(caches) + 1))
    with small_ops(q.device):
        weighed = _weighed(caches, q, spans[0], parts, [])[0]
        for i, (a, b) in enumerate(spans):
            reads = [c.scan(a, b, w) for c, w in zip(caches, weighed)]
            logits = functools.partial(lambda i, reads: final(i, [r() for r in reads]), i, reads)
            if i + 1 == len(spans):
                out.append(logits())
            else:
                weighed, done = _weighed(caches, q, spans[i + 1], parts, [logits])
                out += done
    return out


def _made_ahead(caches: list[IdleCache], q: torch.Tensor, spans: list[tuple[int, int]]):
    """Per span, per cache, a function giving the span's weights over every sample before the span's
    end that may enter the cache (`IdleCache.weigh_pool`), or None where none may: every product started on
    the pool now, none depending on the scan. None (the chain weighs each span once the last is
    scanned) where chunks run in turn, or where these columns would be more than AHEAD_WASTE times the
    most the chain's could be (the entries live at the span's start, at most C * Q, and the span's own)
    or take more than AHEAD_BYTES."""
    if chunk_workers(q.device) == 1:
        return None
    made = bound = 0
    for c in caches:
        for a, b in spans:
            k, before = c.pool_count(b), c.pool_count(a)
            made, bound = made + (b - a) * k, bound + (b - a) * (min(before, len(c.ent)) + k - before)
    if made > AHEAD_WASTE * bound or 4 * made > AHEAD_BYTES:
        return None
    jobs = [(c, a, b) for a, b in spans for c in caches]
    waiting = ahead(lambda job: job[0].weigh_pool(q, *job[1:]), jobs, q.device)
    return [waiting[i : i + len(caches)] for i in range(0, len(waiting), len(caches))]


def _replay_ahead(caches: list[IdleCache], q: torch.Tensor, spans: list[tuple[int, int]], final, made) -> list:
    """`replay_idle` with every span's weights made ahead (`_made_ahead`): per span, each cache's
    columns taken from them, the scan on this thread, the logits left to the pool."""
    done = []
    with small_ops(q.device):
        for i, (a, b) in enumerate(spans):
            reads = [c.scan(a, b, c.from_pool(a, b, wait())) for c, wait in zip(caches, made[i])]
            made[i] = None  # the span's products are no longer needed
            done += ahead(lambda job: final(job[0], [r() for r in job[1]]), [(i, reads)], q.device)
    return [d() for d in done]


def _weighed(caches: list[IdleCache], q: torch.Tensor, span: tuple[int, int], parts: int, extra: list):
    """(each cache's weights of span for its `scan`, [each job of extra's result]): the caches' weights
    in `parts` row pieces each (at least 16 rows), and the extra jobs, on the pool at once."""
    a, b = span
    size = max(16, -(-(b - a) // parts))
    pieces = [(r, min(b, r + size)) for r in range(a, b, size)]
    cols = [c.columns(a, b) for c in caches]
    jobs = [functools.partial(c.weigh, q, col, *p) for c, col in zip(caches, cols) if col is not None for p in pieces]
    done = map_chunks(lambda job: job(), jobs + extra, q.device)
    weighed, k = [], 0
    for col in cols:
        if col is None:
            weighed.append(None)
            continue
        ws, k = done[k : k + len(pieces)], k + len(pieces)
        w = ws[0][0] if len(ws) == 1 else torch.cat([x[0] for x in ws])
        weighed.append((*col, w, None if ws[0][1] is None else [y for x in ws for y in x[1]]))
    return weighed, done[k:]


class IdleCache:
    """One cache (positive, or TDA's negative) over a stream under the idle rule: its slots on the
    host as flat rows (slot c * Q + j: entropy, insertion time, owner sample, last use), each
    sample's slot while cached, and the expiry deadlines in the order they were set (each is `idle`
    after a use or an insert, so they never decrease). `weights(q, keys, bias)` is the engine's
    fused kernel of this cache."""

    def __init__(self, labels, lab_t, h, capacity, num_classes, policy, gate, idle, weights, log_w, values=None):
        n, slots = len(labels), num_classes * capacity
        self.labels, self.lab_t, self.h, self.gate, self.idle = labels.tolist(), lab_t, h.tolist(), gate, idle
        self.Q, self.C, self.fifo = capacity, num_classes, policy == "fifo"
        self.weights, self.log_w, self.values = weights, log_w, values
        self.ent, self.when = [math.inf] * slots, [EMPTY_TIME] * slots
        self.owner, self.used = [-1] * slots, [EMPTY_TIME] * slots
        self.slot = [-1] * n  # c * Q + j while the sample is cached (the engine's slot order), else -1
        self.slots = np.full(n, -1, dtype=np.int64)  # the same as an array (the live columns of a chunk)
        self.cached: set[int] = set()  # the samples cached now
        self.end = np.full(n, -1, dtype=np.int64)  # sample s cached over [s, end[s]); -1: never
        self.deadlines: deque = deque()  # (step, slot, owner)

    def columns(self, a: int, b: int):
        """The entries that can be alive over samples [a, b): those cached at step a, then the span's own
        that may enter (`_entrants`): (their samples, how many were cached, the samples as a tensor on the
        labels' device); None: no column."""
        live = np.sort(np.fromiter(self.cached, np.int64, len(self.cached)))
        cols = np.concatenate([live, np.asarray(self._entrants(a, b), dtype=np.int64)])
        return (cols, len(live), torch.from_numpy(cols).to(self.lab_t.device)) if len(cols) else None

    def _entrants(self, a: int, b: int) -> Sequence[int]:
        """The span's own samples (gated) that may enter the cache: all where the cache has more slots than
        the span has samples (or is first in, first out); else those below their row's worst entry at step
        a or at or after the row's earliest deadline at a. Until then a full row stays full (an entry that
        enters at s >= a expires at s + idle at the soonest, after every deadline set before a) and its
        worst entry never rises (`entropy_slot` replaces the worst by a lower one)."""
        own = range(a, b) if self.gate is None else [t for t in range(a, b) if self.gate[t]]
        if self.fifo or len(self.ent) > b - a:
            return own
        Q, ent, used, owner, rows = self.Q, self.ent, self.used, self.owner, {}
        for c in {self.labels[t] for t in own}:
            live = [used[j] + self.idle for j in range(c * Q, c * Q + Q) if owner[j] >= 0]
            rows[c] = (max(ent[c * Q : c * Q + Q]), min(live, default=math.inf))
        return [t for t in own if self.h[t] < rows[self.labels[t]][0] or t >= rows[self.labels[t]][1]]

    @functools.cached_property
    def _gated(self) -> tuple[np.ndarray, np.ndarray]:
        """A gated cache's pool, made on its first use (the weights made ahead only): (how many gated
        samples come before each t [n + 1], the gated samples)."""
        gate = np.asarray(self.gate, dtype=bool)
        return np.concatenate([[0], np.cumsum(gate)]), np.flatnonzero(gate)

    def pool_count(self, t: int) -> int:
        """How many samples before t may enter the cache (gated; all where nothing gates)."""
        return t if self.gate is None else int(self._gated[0][t])

    def weigh_pool(self, q: torch.Tensor, a: int, b: int) -> torch.Tensor | None:
        """The weights of samples [a, b) over every sample before b that may enter the cache [b - a, K]
        (`pool_count`), as `weigh` makes them; None: no such sample."""
        k = self.pool_count(b)
        if k == 0:
            return None
        keys = q[:k] if self.gate is None else q[torch.from_numpy(self._gated[1][:k]).to(q.device)]
        return self.weights(q[a:b], keys, torch.full((k,), self.log_w, device=q.device))

    def from_pool(self, a: int, b: int, w: torch.Tensor | None):
        """`weigh`'s columns of samples [a, b) (`columns`) taken from their weights over the pool
        (`weigh_pool`), with each row's alone top; None: no column."""
        col = self.columns(a, b)
        if col is None:
            return None
        cols, _, at = col
        where = at if self.gate is None else torch.as_tensor(self._gated[0][cols], device=at.device)
        w = w.index_select(1, where)
        return (*col, w, _top_alone(w, at).tolist() if math.isfinite(self.log_w) else None)

    def weigh(self, q: torch.Tensor, columns, r0: int, r1: int):
        """(the weights of samples [r0, r1) over `columns`' entries [r1 - r0, E], each row's alone top
        (`_top_alone`) or None where no slot is live to a use (a = 0))."""
        at = columns[2]
        w = self.weights(q[r0:r1], q[at], torch.full((len(at),), self.log_w, device=q.device))
        return w, (_top_alone(w, at).tolist() if math.isfinite(self.log_w) else None)

    def scan(self, a: int, b: int, weighed):
        """The cache's state advanced to step b by `_scan`; returns the span's logits [b - a, C] to come
        (a function: its weights masked by the entries' intervals)."""
        if weighed is None:  # nothing cached nor cachable: no step changes the state (old deadlines are stale)
            return lambda: torch.zeros(b - a, self.C, device=self.lab_t.device)
        cols, alive, at, w, top = weighed
        self._scan(a, b, top, w, cols)
        end = self.end[cols]
        return lambda: self._read(a, at, alive, w, end)

    def _read(self, a, at, alive, w, end) -> torch.Tensor:
        """Logits of the span [a, a + rows of w) from its weights w over the columns' samples `at` (a
        tensor): the span's own samples count over [s, end[s]), the entries cached at its start until end[s]."""
        dev = w.device
        b = a + w.shape[0]
        t = torch.arange(a, b, device=dev).unsqueeze(1)
        w[:, alive:].mul_((at[alive:] <= t) & (t < torch.as_tensor(end[alive:], device=dev)))
        dying = np.nonzero(end[:alive] < b)[0]  # entries cached at a that leave within the span
        if len(dying):
            dy = torch.as_tensor(dying, device=dev)
            w.index_copy_(1, dy, w.index_select(1, dy) * (t < torch.as_tensor(end[dying], device=dev)))
        if self.values is None:
            return torch.zeros(b - a, self.C, device=dev).index_add_(1, self.lab_t[at], w)
        return w @ self.values[at]

    def _scan(self, a, b, top, w, cols) -> None:
        """Steps a..b-1 on the host rows: expiries (`Cache.expire`: a slot whose last use is `idle` or
        more steps back empties; the deadlines come in the order they were set), the slot rule
        (`Cache.insert`: entropy, or first in, first out), each step's use (`Cache._mark_used`: the live
        slot of largest weight; of equal ones the first slot): top[r], the sample whose column holds row
        r's weight above every other column (-1: a tie), when it is cached, else the largest of row w[r]'s
        live columns (`_live`, found again only when an entry comes or leaves; cols: the columns'
        samples). No use where top is None. One Python step per sample, its common cases inline."""
        labels, hs, gate, Q, fifo, idle = self.labels, self.h, self.gate, self.Q, self.fifo, self.idle
        ent, when, slot, used, owner, dl = self.ent, self.when, self.slot, self.used, self.owner, self.deadlines
        slots, end, cached, n, inf = self.slots, self.end, self.cached, len(self.slot), math.inf
        popleft, push, leave = dl.popleft, dl.append, cached.discard
        live, wn = None, None  # the live columns by slot (None: to find) and w on the host, once a step needs them
        for t in range(a, b):
            while dl and dl[0][0] <= t:
                due, s, x = popleft()
                if owner[s] == x and used[s] + idle == due:  # x's slot, unused since: it empties
                    end[x] = t
                    slot[x] = slots[x] = -1
                    leave(x)
                    owner[s], ent[s], when[s], used[s] = -1, inf, EMPTY_TIME, EMPTY_TIME
                    live = None
            if gate is None or gate[t]:
                base, h = labels[t] * Q, hs[t]
                if fifo:
                    s = base + fifo_slot(when[base : base + Q])
                elif not h < (worst := max(row := ent[base : base + Q])):  # `entropy_slot`: not inserted
                    s = -1
                elif worst == inf:  # `entropy_slot` with an empty slot: the first
                    s = base + row.index(inf)
                else:
                    s = base + entropy_slot(row, when[base : base + Q], h)
                if s >= 0:
                    live = None
                    if owner[s] >= 0:
                        self._vacate(s, t)
                    owner[s], ent[s], when[s], used[s] = t, h, t, t
                    slot[t] = slots[t] = s
                    end[t] = n
                    cached.add(t)
                    push((t + idle, s, t))
            if top is None:
                continue
            x = top[t - a]
            s = slot[x] if x >= 0 else -1
            if s < 0:  # the top weight's entry is not cached, or ties: the largest weight of the live columns
                if live is None:
                    live, live_slot = self._live(cols)
                    wn = w.cpu().numpy() if wn is None else wn
                if not len(live):
                    continue
                s = int(live_slot[wn[t - a, live].argmax()])  # of equal weights the first: the first slot
            if used[s] != t:  # (a slot inserted at t has its deadline already)
                used[s] = t
                push((t + idle, s, owner[s]))

    def _vacate(self, s: int, t: int) -> None:
        """Slot s empties at step t (its entry's interval ends): a replaced entry (the scan's expiry is inline)."""
        x = self.owner[s]
        self.end[x], self.slot[x], self.slots[x] = t, -1, -1
        self.cached.discard(x)
        self.owner[s], self.ent[s], self.when[s], self.used[s] = -1, math.inf, EMPTY_TIME, EMPTY_TIME

    def _live(self, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the live columns of cols (their samples) ordered by their slots, those slots): `Cache._mark_used`'s
        order, where of equal weights the first slot is used."""
        slot = self.slots[cols]
        live = np.nonzero(slot >= 0)[0]
        live = live[np.argsort(slot[live])]
        return live, slot[live]


def top_by_topk(device: torch.device) -> bool:
    """Whether `_top_alone` takes a row's two largest weights by one `topk` (off the CPU: one kernel where
    the other way takes four) or by numpy's `argmax` and `max` (on a CPU, where torch's `topk`, `max` and
    `argmax` take 5x as long: 613, 426 and 504 against 105 µs on a [256, 1,700] chunk, AMD EPYC)."""
    return device.type != "cpu"


def _top_alone(w: torch.Tensor, samples: torch.Tensor) -> torch.Tensor:
    """Per row of w, the sample of the column holding its largest weight when every other column's is
    lower, else -1 (a tie: the scan reads the live columns). By `top_by_topk`: the two largest of each
    row, or the largest and its column from numpy's `argmax` and the others' largest from `max` with
    that column set to -inf (w is left as it was)."""
    if top_by_topk(w.device):
        top, at = w.topk(min(2, w.shape[1]), -1)
        others = top[:, 1] if w.shape[1] > 1 else torch.full_like(top[:, 0], float("-inf"))  # none: -inf
        return torch.where(top[:, 0] > others, samples[at[:, 0]], -1)
    wn, rows = w.numpy(), np.arange(w.shape[0])
    at = wn.argmax(-1)
    top = wn[rows, at]
    wn[rows, at] = -np.inf
    alone = top > wn.max(-1)
    wn[rows, at] = top
    return torch.from_numpy(np.where(alone, samples.numpy()[at], -1))
