"""The engine's state records, S streams at once: the feature bank and the two caches; and
`FeatureBank`, one stream's bank as the other families' `+ms` rows keep it.

Each record is a small dataclass of device tensors with a leading stream dimension; the online
engine (S = 1) and `MultiEngine` (S streams) hold the same records and step them with the same
code. Writes are masked per stream (`ok`), so a stream that skips a step, or whose sample is not
admitted, keeps its slots, with no host round trip.
"""

from __future__ import annotations

import functools
import heapq
import math
from dataclasses import dataclass, fields

import numpy as np
import torch

from . import functional as Fn
from . import fused
from .cache_rules import EMPTY_TIME, entropy_slot, entropy_slot_t, fifo_slot, fifo_slot_t
from .forget import timeliness_slot, timeliness_slot_t
from .host import host_view

UNBOUNDED_START = 1024  # first bank allocation when bank_size is None (it doubles when full)
NEVER = torch.iinfo(torch.long).max  # `Cache.expire_host`: a stream with no live slot


@dataclass
class Bank:
    """The raw features of earlier samples, §4.1: a ring buffer of R rows per stream holding each
    feature as its direction (`rows`, in `bank_dtype`) and norm, its sample index (`time`, -1 =
    empty) and its kNN bias (0 filled, -inf empty: the mask lives in the state, so a step never
    builds one over the whole bank); `start` [S], the sample index of the stream's last reset
    (`forget`): the features since then fill the rows from the first on."""

    rows: torch.Tensor  # [S, R, d] f / |f|
    norm: torch.Tensor  # [S, R] |f|
    time: torch.Tensor  # [S, R] long
    bias: torch.Tensor  # [S, R] 0 or -inf
    start: torch.Tensor  # [S] long

    @classmethod
    def empty(cls, streams: int, rows: int, dim: int, dtype: torch.dtype, device) -> Bank:
        return cls(
            torch.zeros(streams, rows, dim, dtype=dtype, device=device),
            torch.ones(streams, rows, device=device),
            torch.full((streams, rows), EMPTY_TIME, dtype=torch.long, device=device),
            torch.full((streams, rows), float("-inf"), device=device),
            torch.zeros(streams, dtype=torch.long, device=device),
        )

    def clear(self, s: int) -> None:
        self.rows[s] = 0
        self.norm[s] = 1
        self.time[s] = EMPTY_TIME
        self.bias[s] = float("-inf")
        self.start[s] = 0

    def forget(self, cut: torch.Tensor, clock: torch.Tensor, rows: int | None = None) -> None:
        """Empty the streams where cut [S] (bool) at sample clock [S], on the device: their rows masked
        out of the kNN, the next feature written to the first row. `rows`: only the first rows can
        be filled (the eager step's known fill; None = all). On CUDA one kernel (`fused.vacate`)."""
        if fused.wanted(cut.device) and fused.vacate(self, cut, rows, clock):
            return
        c = cut.unsqueeze(-1)
        time, bias = (self.time, self.bias) if rows is None else (self.time[:, :rows], self.bias[:, :rows])
        time.masked_fill_(c, EMPTY_TIME)  # in place: a view of the rows (and a captured graph's addresses)
        bias.masked_fill_(c, float("-inf"))
        self.start.copy_(torch.where(cut, clock, self.start))

    def grown(self) -> Bank:
        """Twice the rows (an unbounded bank that is full), the new ones empty."""
        more = Bank.empty(self.rows.shape[0], self.rows.shape[1], self.rows.shape[2], self.rows.dtype, self.rows.device)
        rows = (torch.cat([a, b], 1) for a, b in zip(tensors(self)[:4], tensors(more)[:4]))
        return Bank(*rows, self.start)

    def append(
        self, f: torch.Tensor, clock: torch.Tensor, bounded: bool, ok: torch.Tensor | None, restarts: bool = False
    ) -> None:
        """Each stream's feature f [S, d] enters its row clock - start (mod R when bounded; `restarts`:
        resets can happen, else start is 0), Alg. 1."""
        pos = clock - self.start if restarts else clock
        at = slots(self.rows, pos % self.rows.shape[1] if bounded else pos)
        norm = f.norm(dim=-1, keepdim=True)
        write_rows(self.rows, at, ok, f / norm.clamp_min(1e-12))  # = F.normalize
        write_rows(self.norm, at, ok, norm.squeeze(-1))
        write_rows(self.time, at, ok, clock)
        write_rows(self.bias, at, ok, torch.zeros_like(norm.squeeze(-1)))


@dataclass
class Cache:
    """One cache (§3.1 positive, or TDA's negative), Q class-major slots per class per stream:
    keys, entropies (+inf = empty), insertion times (-1 = empty), the fused kernel's bias (ln a -
    beta filled, -inf empty), for the negative cache the values (one-hot otherwise) and, under
    `forget.rule=idle`, the step each slot was last marked used (`mstta.engine.forget`; -1 before a
    mark; read only while the slot is live): its last use is the later of that and its insertion
    (`last_use`)."""

    keys: torch.Tensor  # [S, C*Q, d]
    ent: torch.Tensor  # [S, C, Q]
    time: torch.Tensor  # [S, C, Q] long
    bias: torch.Tensor  # [S, C*Q]
    values: torch.Tensor | None  # [S, C*Q, C] or None (one-hot of the slot's class)
    used: torch.Tensor | None = None  # [S, C, Q] long: the step of the slot's last mark (idle rule), -1 none

    @classmethod
    def empty(
        cls, streams: int, classes: int, capacity: int, dim: int, device, values: bool, used: bool = False
    ) -> Cache:
        e = classes * capacity
        return cls(
            torch.zeros(streams, e, dim, device=device),
            torch.full((streams, classes, capacity), float("inf"), device=device),
            torch.full((streams, classes, capacity), EMPTY_TIME, dtype=torch.long, device=device),
            torch.full((streams, e), float("-inf"), device=device),
            torch.zeros(streams, e, classes, device=device) if values else None,
            torch.full((streams, classes, capacity), EMPTY_TIME, dtype=torch.long, device=device) if used else None,
        )

    def clear(self, s: int) -> None:
        S, C, Q = self.ent.shape
        fresh = Cache.empty(
            1, C, Q, self.keys.shape[2], self.keys.device, self.values is not None, self.used is not None
        )
        for mine, new in zip(tensors(self), tensors(fresh)):
            mine[s] = new[0]

    def forget(self, gone: torch.Tensor) -> None:
        """Empty the slots where gone ([S] bool: whole streams, or [S, C, Q]) on the device (whole
        streams on CUDA: one kernel, `fused.vacate`)."""
        S, C, Q = self.ent.shape
        if gone.dim() == 1 and fused.wanted(gone.device) and fused.vacate(self, gone):
            return
        g = gone.view(S, 1, 1).expand(S, C, Q) if gone.dim() == 1 else gone
        self._vacate(g)

    def expire(self, clock: torch.Tensor | int, idle: int, ok: torch.Tensor | None = None) -> None:
        """The idle rule (`mstta.engine.forget`): empty every live slot unused for `idle` steps at clock [S]
        (an int: every stream's; only in the stepping streams, `ok` [S]; None = all), in place (an
        empty slot may be emptied again: that changes nothing). On CUDA one kernel (`fused.expire`)."""
        if not isinstance(clock, int) and fused.wanted(clock.device) and fused.expire(self, clock, idle, ok):
            return
        gone = self.last_use() <= (clock - idle if isinstance(clock, int) else (clock - idle).view(-1, 1, 1))
        if ok is not None:
            gone &= ok.view(-1, 1, 1)
        self._vacate(gone)

    def expire_host(self, clock: np.ndarray, idle: int, due: np.ndarray) -> np.ndarray:
        """`expire` where the host reads the state (a CPU device: numpy views, `host_view`), in the
        streams `due` [S] (bool) at clock [S] -> the earliest step at which a slot of each stream can
        next expire [S]: a slot's use only moves later and a new entry is used at its clock. (One
        stream's runner calls `expire_one`.)"""
        time = host_view(self, "time")
        last = np.maximum(host_view(self, "used"), time)
        self._vacate_host(np.flatnonzero((last <= (clock - idle)[:, None, None]) & due[:, None, None]))
        return np.minimum(np.where(time >= 0, last, NEVER).min((1, 2)), clock) + idle

    def expire_one(self, now: int, idle: int) -> int:
        """`expire_host` of one stream at step `now` -> its next bound, by a heap of (a lower bound of
        the slot's last use, flat slot) over its live slots (`_due`: built by a full scan, an insertion
        on the host pushes its slot, `insert_one`). Items whose bound has passed are read: an emptied
        slot's or an earlier entry's (its bound is below the slot's insertion) is dropped, an expired
        one emptied, a used one pushed again at its last use; the top then bounds every live slot's
        last use. A restored state or a rewound clock drops the heap (`drop_host_state`). Size: the
        live slots and the entries replaced over the last `idle` steps."""
        time, used = host_view(self, "time"), host_view(self, "used")
        heap = self.__dict__.get("_due")
        if heap is None:  # a full scan
            flat = time.reshape(-1)
            live = np.flatnonzero(flat >= 0)
            heap = list(zip(np.maximum(used.reshape(-1)[live], flat[live]).tolist(), live.tolist()))
            heapq.heapify(heap)
            self.__dict__["_due"] = heap
        cut, gone = now - idle, []
        while heap and heap[0][0] <= cut:
            last, slot = heapq.heappop(heap)
            t = time.item(slot)
            if t < 0 or last < t:  # emptied, or an earlier entry of the slot (its own item is in)
                continue
            last = max(used.item(slot), t)
            if last <= cut:
                gone.append(slot)
            else:
                heapq.heappush(heap, (last, slot))
        self._vacate_host(np.array(gone, dtype=np.int64))
        return (heap[0][0] if heap else now) + idle

    def _vacate_host(self, flat: np.ndarray) -> None:
        """`_vacate` of the slots at flat indices [n] into [S, C, Q] (numpy views)."""
        if len(flat):
            host_view(self, "ent").reshape(-1)[flat] = np.inf
            host_view(self, "time").reshape(-1)[flat] = EMPTY_TIME
            host_view(self, "bias").reshape(-1)[flat] = -np.inf

    def drop_host_state(self) -> None:
        """Forget what the host derived from the state (`expire_one`'s heap): a restored state."""
        self.__dict__.pop("_due", None)

    def last_use(self) -> torch.Tensor:
        """Each slot's last use [S, C, Q]: the later of its insertion and its last mark (idle rule)."""
        return torch.maximum(self.used, self.time)

    def _vacate(self, g: torch.Tensor) -> None:
        """Empty the slots where g [S, C, Q] (bool), in place: +inf entropy, no insertion time, -inf bias
        (an empty slot's last mark, `used`, is read by nothing: an insertion there comes later)."""
        self.ent.masked_fill_(g, float("inf"))
        self.time.masked_fill_(g, EMPTY_TIME)
        self.bias.view_as(g).masked_fill_(g, float("-inf"))

    def insert(
        self,
        p: torch.Tensor,
        h: torch.Tensor,
        key: torch.Tensor,
        clock: torch.Tensor,
        log_w: float,
        fifo: bool = False,
        ok: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        timeliness: tuple[int, float] | None = None,
    ) -> None:
        """Each stream's sample (pseudo-label p [S], entropy h [S], key [S, d], value [S, C]) into
        class p's slots: lowest-entropy rule (§3.1, TDA `update_cache`: the first empty slot, else
        over the highest-entropy entry when h is strictly lower), RoTTA's timeliness score where
        `timeliness` = (horizon, weight) (`mstta.engine.forget.timeliness_slot_t`) or first in, first out
        (BoostAdapter `update_cache(..., fifo=True)`); only where `ok` [S] (None = every stream)."""
        S, C, Q = self.ent.shape
        j, fits = self._slot(p, h, clock, fifo, timeliness)
        ok = fits if ok is None else fits & ok
        at = slots(self.keys, p * Q + j)
        write_rows(self.ent.view(S, C * Q), at, ok, h)
        write_rows(self.time.view(S, C * Q), at, ok, clock)
        write_rows(self.keys, at, ok, key)
        write_rows(self.bias, at, ok, torch.full_like(h, log_w))
        if self.values is not None:
            write_rows(self.values, at, ok, value)

    def _slot(self, p, h, clock, fifo: bool, timeliness) -> tuple[torch.Tensor, torch.Tensor]:
        """Each stream's slot in its class row p [S] and whether the sample enters (`insert`'s rules);
        on CUDA the timeliness and entropy rules as one kernel (`fused.timeliness_slot_fused`)."""
        S, C, Q = self.ent.shape
        if not fifo and fused.wanted(h.device):  # the entropy rule: the timeliness rule at weight 0
            hit = fused.timeliness_slot_fused(self, p, h, clock, *(timeliness or (1, 0.0)), math.log(C))
            if hit is not None:
                return hit
        row = p.view(S, 1, 1).expand(S, 1, Q)
        row_time = self.time.gather(1, row).squeeze(1)
        if fifo:
            return fifo_slot_t(row_time)
        if timeliness is not None:
            row_ent = self.ent.gather(1, row).squeeze(1)
            return timeliness_slot_t(row_ent, row_time, h, clock, *timeliness, math.log(C))
        return entropy_slot_t(self.ent.gather(1, row).squeeze(1), row_time, h)

    def insert_one(
        self,
        p: int,
        h: float,
        key: np.ndarray,
        clock: int,
        log_w: float,
        fifo: bool = False,
        value=None,
        timeliness: tuple[int, float] | None = None,
    ) -> None:
        """`insert` of one stream's sample where the host reads the state (a CPU record, S = 1): the
        slot chosen by the host rules of the replay's scan (`entropy_slot`, `fifo_slot`,
        `timeliness_slot`) on the class row's Q slots, written through numpy views. key [d];
        value: None, or a callable giving the value row [C] (made only when the sample is inserted)."""
        C, Q = self.ent.shape[1:]
        ent, when = host_view(self, "ent")[0, p], host_view(self, "time")[0, p]
        row_time = when.tolist()
        if fifo:
            j = fifo_slot(row_time)
        elif timeliness is not None:
            j = timeliness_slot(ent.tolist(), row_time, h, clock, *timeliness, math.log(C))
        else:
            j = entropy_slot(ent.tolist(), row_time, h)
        if j < 0:
            return
        at = p * Q + j
        ent[j], when[j] = h, clock
        if (due := self.__dict__.get("_due")) is not None:  # the idle rule's heap (`expire_one`)
            heapq.heappush(due, (clock, at))
        host_view(self, "keys")[0, at] = key
        host_view(self, "bias")[0, at] = log_w
        if self.values is not None:
            host_view(self, "values")[0, at] = value()

    def logits(
        self, q: torch.Tensor, beta: float, kernel: str, a: float, clock=None, ok=None, host: bool = False
    ) -> torch.Tensor:
        """Cache logits, Eq. (3)/(13): sum over live slots of the kernel's weight (fused, one batched
        GEMM + exp) times the slot's value. q [S, d] -> [S, C]. Under the idle rule the live slot of
        largest weight is marked used at `clock` [S] (where `ok`; `host`: the host reads the weights,
        and clock and ok are numpy arrays)."""
        w = Fn.cache_weights(q, self.keys, self.bias, beta, kernel, a)
        if self.used is not None:
            self._mark_used(w, clock, ok, host)
        if self.values is None:
            return w.view(w.shape[0], self.ent.shape[1], -1).sum(-1)
        return torch.bmm(w.unsqueeze(1), self.values).squeeze(1)

    def _mark_used(self, w: torch.Tensor, clock, ok, host: bool) -> None:
        """The idle rule's use (`mstta.engine.forget`): the live slot of largest kernel weight [S, C*Q]
        (of equal ones the first) marked at clock [S] where ok [S] (None: every stream). A cache with
        no live slot marks its first slot, an empty one: harmless (an insertion there is later; an
        expiry empties it again). `host`: `_mark_host`, clock and ok on the host (numpy); on CUDA one kernel
        (`fused.mark_used`)."""
        if host:
            self._mark_host(w.numpy(), clock, ok)
            return
        if fused.wanted(w.device) and fused.mark_used(self, w, clock, ok):
            return
        S, C, Q = self.ent.shape
        at = torch.where(self.bias > float("-inf"), w, float("-inf")).argmax(-1)  # bias: -inf empty
        write_rows(self.used.view(S, C * Q), slots(self.keys, at), ok, clock)

    def _mark_host(self, w: np.ndarray, clock: np.ndarray, ok: np.ndarray | None) -> None:
        """`_mark_used` where the host reads the state (a CPU device: numpy views, `host_view`): where
        every stream's largest weight is positive, that is its slot (an empty slot weighs 0); where no
        stream has a live slot, nothing is marked."""
        if len(w) == 1:  # one stream: scalar reads (its flat index is the slot's)
            if ok is None or ok[0]:
                j = int(w.argmax())
                if not w.item(j) > 0:
                    bias = host_view(self, "bias")
                    if bias.max() == -np.inf:  # no live slot: no use
                        return
                    j = int(np.where(bias > -np.inf, w, -np.inf).argmax())
                used = host_view(self, "used")  # [1, C, Q]
                used[0, j // used.shape[2], j % used.shape[2]] = clock[0]
            return
        used = host_view(self, "used").reshape(w.shape)
        at, rows = w.argmax(-1), np.arange(len(w))
        if not (w[rows, at] > 0).all():
            bias = host_view(self, "bias")
            if not (bias > -np.inf).any():  # no live slot anywhere: no use
                return
            at = np.where(bias > -np.inf, w, -np.inf).argmax(-1)
        if ok is not None:
            rows, at, clock = rows[ok], at[ok], clock[ok]
        used[rows, at] = clock


def tensors(record) -> list[torch.Tensor]:
    """The record's tensors, in field order (an absent `values` left out)."""
    return [t for t in (getattr(record, f.name) for f in fields(record)) if t is not None]


def slots(dst: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Row of each stream's slot index[s] in dst [S, E, ...] seen as [S*E, ...]."""
    S, E = dst.shape[:2]
    return index if S == 1 else index + _offsets(S, E, index.device)


@functools.lru_cache(maxsize=64)
def _offsets(streams: int, rows: int, device: torch.device) -> torch.Tensor:
    return torch.arange(streams, device=device) * rows


def write_rows(dst: torch.Tensor, at: torch.Tensor, ok: torch.Tensor | None, new: torch.Tensor) -> None:
    """dst[s, slot s] = new[s] for each stream s where ok[s] (None: all), in place, on the device.
    dst [S, E, ...], at [S] from `slots`, ok [S] bool or None, new [S, ...]."""
    flat = dst.view(-1, *dst.shape[2:])
    if new.dtype != dst.dtype:
        new = new.to(dst.dtype)
    if ok is not None:
        new = torch.where(ok.view(-1, *([1] * (new.dim() - 1))), new, flat.index_select(0, at))
    flat.index_copy_(0, at, new)


@dataclass(frozen=True)
class ShiftSettings:
    """What a `+ms` row's mean shift reads of `EngineConfig` (`EngineConfig.shift_settings()`): k,
    alpha, ms_steps and the bank's bound (None = unbounded)."""

    k: int
    alpha: float
    steps: int
    bank_size: int | None


class FeatureBank:
    """One stream's earlier raw features (§4.1), FIFO past `bank_size` rows, in the classifier's
    dtype: directions and norms, as `Bank` keeps them, and each row's sample index."""

    def __init__(self, rows: int, dim: int, dtype: torch.dtype, device: torch.device):
        self.dirs = torch.zeros(rows, dim, dtype=dtype, device=device)
        self.norm = torch.ones(rows, dtype=dtype, device=device)
        self.time = torch.zeros(rows, dtype=torch.long, device=device)
        self.count = 0  # features appended since the reset

    @classmethod
    def for_settings(cls, s: ShiftSettings, dim: int, dtype: torch.dtype, device: torch.device) -> FeatureBank:
        """An empty bank of `s.bank_size` rows (unbounded: UNBOUNDED_START, doubled when full)."""
        return cls(s.bank_size if s.bank_size is not None else UNBOUNDED_START, dim, dtype, device)

    def fill(self, bounded: bool) -> int:
        return min(self.count, self.dirs.shape[0]) if bounded else self.count

    def append(self, f: torch.Tensor, bounded: bool) -> None:
        if self.count >= self.dirs.shape[0] and not bounded:  # unbounded: double when full
            for name in ("dirs", "norm", "time"):
                t = getattr(self, name)
                setattr(self, name, torch.cat([t, torch.zeros_like(t)]))
        at = self.count % self.dirs.shape[0]
        norm = f.norm()
        self.dirs[at] = f / norm.clamp_min(1e-12)
        self.norm[at] = norm
        self.time[at] = self.count
        self.count += 1

    def shift(self, v: torch.Tensor, s: ShiftSettings) -> torch.Tensor:
        """Mean shift of rows v [n, d] toward their k nearest bank features, Eq. (9)-(11), `s.steps`
        times; the identity at alpha = 0 (exactly: MS's normalisation would otherwise rescale a
        view mean) and before any earlier sample."""
        n = self.fill(s.bank_size is not None)
        if n == 0 or s.alpha == 0:
            return v
        dirs, norm, age = self.dirs[:n], self.norm[:n], self.time[:n]
        for _ in range(s.steps):
            v = Fn.shift_by_sims(v, v @ dirs.T, dirs, norm, age, s.k, s.alpha, masked=False)
        return v
