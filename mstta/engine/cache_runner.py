"""The cache family's runner: the state of S independent streams and their step (Alg. 1), batched
over streams, behind `Engine` (S = 1) and `MultiEngine` (S streams) of a cache-family method; the
sibling of `family_runner.FamilyStreams` under `runner.Runner`. Like a family's functions, it reads
its family's own `Params` (`EngineConfig.family_params("cache")`) and its row's `Switches`
(`mstta.engine.families.cache`), never the family's keys off the whole config.

The whole state (bank, caches, a sample counter per stream) lives on the device and a step never
waits on the host (no `.item()`, no branch on a tensor's value; BoostAdapter's per-view cache
copies excepted), so on CUDA the step of a bounded bank can be captured once as a CUDA graph.
One exception where nothing waits: on a CPU device (`host_reads`) the host reads the detector's
state and cuts (`drift.drift_step_host`), when a slot can next expire and which slot a step uses
(`Cache.expire_host`, `Cache._mark_host`), so every reset is known there and the step skips what
it need not do; one stream's insertions take their slot by the replay scan's host rules
(`Cache.insert_one`). The results are the device path's bit for bit, but one stream's detector
(`drift.drift_step_one`, on numpy: its state to float64 rounding, its count and cuts the same;
tests/test_host_reads.py).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import fields
from typing import Any

import numpy as np
import torch

from ..errors import UserError
from ..safety import check_memory, human_bytes
from ..threads import small_ops
from . import functional as Fn
from . import graphs
from .boost import boosted_logits, select_views
from .cache import UNBOUNDED_START, Bank, Cache
from .cache_rules import entropy_gate, entropy_gate_t
from .config import EngineConfig
from .drift import Drift, drift_step_host, drift_step_one, drift_step_t
from .families import view_aggregator
from .families.base import CACHE, Method
from .families.cache import switches
from .forget import MAX_STEPS, periodic_reset_t
from .runner import Runner

log = logging.getLogger(__name__)

RECORDS = ("bank", "pos", "neg", "drift")  # drift: the scene-cut detector (forget.detect)
HOST = ("seen", "since")  # the state's host counters (numpy)


class Streams(Runner):
    """S streams of one cache-family method and config over one text classifier, stepped together:
    `p`, the family's `Params` (taken from the config once, here), and `sw`, the row's `Switches`,
    choose and weigh the parts of the step; the config gives the runner's own settings (views, bank,
    mean shift, logit scale, forget)."""

    def __init__(
        self,
        text: torch.Tensor,
        method: Method,
        config: EngineConfig | None,
        device: str | torch.device | None,
        cuda_graph: bool | None,
        streams: int,
        stream_length: int | None = None,  # other families' schedules; the cache family needs none
    ):
        super().__init__(text, method, config, device, streams)
        self.p = self.config.family_params(CACHE)  # the family's hyperparameters, read once
        self.sw = switches(method)  # the parts of the step this row runs
        can_graph = (
            self.device.type == "cuda"
            and self.config.bank_size is not None
            and not self.sw.boost
            and self.config.view_mode in ("confident", "original")
        )  # a family's view mode syncs
        if cuda_graph and not can_graph:
            raise UserError(
                "cuda_graph=True needs a CUDA device, a bounded bank (bank_size), a method "
                "without boosting views and view_mode confident or original; "
                "pass cuda_graph=None to choose automatically"
            )
        self.cuda_graph = can_graph if cuda_graph is None else bool(cuda_graph)
        self._graph_required = bool(cuda_graph)
        self.step_as_graph(self.cuda_graph)

    def step_as_graph(self, captured: bool) -> None:
        """What the host reads and does around the step: as under a CUDA graph where `captured` (on
        any device: `graphs.captured_step`, tests, `graphs.step_ops`), else as the eager step.
        Eager on a CPU the step may read the state (nothing to transfer): the detector's cuts, when
        a slot can next expire. The host then knows every reset (the bank's fill, the work to do);
        eager without the detector it does too (a periodic reset is the host's count). Under a graph
        it still knows RDumb's resets where no detector runs (the device clock is `seen`): they run
        eagerly before the replay (`before_graph`), so the captured step holds no op of the rule."""
        fg = self.config.forget
        self.host_reads = not captured and self.device.type == "cpu"
        self.host_resets = self.host_reads or (not captured and not fg.detect)
        self.resets_before = captured and fg.rule == "periodic" and not fg.detect

    # ------------------------------------------------------------------ state
    def reset(self, stream: int | None = None) -> None:
        """Forget everything adapted so far, of every stream (memory checked, state reallocated)
        or of one stream (its slots emptied in place: a captured CUDA graph stays valid)."""
        if stream is not None:
            for name in RECORDS:
                if getattr(self, name) is not None:
                    getattr(self, name).clear(stream)
            self.clock[stream] = 0
            self.seen[stream] = 0
            self.since[stream] = 0
            self.expiry[:, stream] = 0
            self.soonest = 0
            self._drop_host_state()  # the stream's clock starts over
            return
        cfg, C, d, dev, m, S = self.config, self.num_classes, self.dim, self.device, self.method, self.streams
        rows = (cfg.bank_size if cfg.bank_size is not None else UNBOUNDED_START) if m.mean_shift else 0
        q = self.p.capacity if self.sw.cache else 0
        qn = self.p.neg_capacity if self.sw.negative else 0
        self._check_memory(rows, q, qn)
        self.graphs: dict[int, Any] = {}
        self.seen = np.zeros(S, dtype=np.int64)  # samples seen, on the host
        self.since = np.zeros(S, dtype=np.int64)  # the sample of each stream's last reset the host knows of
        self.expiry = np.zeros((2, S), dtype=np.int64)  # idle rule, host reads: no slot of (pos, neg) expires before
        self.runs, self.soonest = 0, 0  # steps run (>= any stream's clock), the least of `expiry`
        self.clock = torch.zeros(S, dtype=torch.long, device=dev)  # the same, on the device
        self.bank = Bank.empty(S, rows, d, getattr(torch, cfg.bank_dtype), dev) if m.mean_shift else None
        idle = cfg.forget.rule == "idle"
        self.pos = Cache.empty(S, C, q, d, dev, values=False, used=idle) if self.sw.cache else None
        self.neg = Cache.empty(S, C, qn, d, dev, values=True, used=idle) if self.sw.negative else None
        self.drift = Drift.empty(S, d, dev, cfg.forget) if cfg.forget.detect else None
        self.last_cut = torch.zeros(S, dtype=torch.bool, device=dev)  # the last step's resets (forget)
        self._marked, self._active = False, None  # whether last_cut may hold a reset; the stepping streams

    def _check_memory(self, rows: int, q: int, qn: int) -> None:
        C, d, S = self.num_classes, self.dim, self.streams
        item = torch.empty(0, dtype=getattr(torch, self.config.bank_dtype)).element_size()
        per = f" per stream, {S} streams" if S > 1 else ""
        parts = [
            (S * rows * (d * item + 16), f"bank {rows} x {d} dims (bank_size){per}"),
            (S * C * q * (d + 3) * 4, f"positive cache: capacity {q} x {C} classes x {d} dims{per}"),
            (
                S * C * qn * (d + C + 4) * 4,
                f"negative cache: neg_capacity {qn} x {C} classes x ({d} dims + {C} classes){per}",
            ),
        ]
        used = [(b, w) for b, w in parts if b > 0]
        total = sum(b for b, _ in used)
        what = "the engine's state (" + "; ".join(w for _, w in used) + ")"
        check_memory(total, what)
        if self.device.type == "cuda":
            have = torch.cuda.get_device_properties(self.device).total_memory
            if total > 0.8 * have:
                raise UserError(f"{what} needs {human_bytes(total)}; this GPU has {human_bytes(have)}; lower it")

    def _fill(self, s: int) -> int:
        """Raw features in stream s's bank (known on the host)."""
        if not self.method.mean_shift:
            return 0
        n = int(self.seen[s] - self.since[s])  # rows written since the last reset (from the first row)
        return n if self.config.bank_size is None else min(n, self.config.bank_size)

    def _tensors(self) -> dict[str, torch.Tensor]:
        out = {"clock": self.clock}
        for name in RECORDS:
            rec = getattr(self, name)
            if rec is not None:
                out.update({f"{name}.{f.name}": t for f in fields(rec) if (t := getattr(rec, f.name)) is not None})
        return out

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume the streams (tensors and counters; copies)."""
        return copy.deepcopy({**self._tensors(), "seen": self.seen, "since": self.since})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from `state_dict()`: copied into the current tensors when their shapes match (a
        captured CUDA graph stays valid), else the tensors are replaced (and graphs dropped)."""
        mine = self._tensors()
        fits = mine.keys() == {k for k in state if k not in HOST} and all(
            mine[k].shape == v.shape and mine[k].dtype == v.dtype for k, v in state.items() if k not in HOST
        )
        if fits:
            self._restore(state)
        else:
            for k, v in copy.deepcopy(state).items():
                if "." in k:
                    rec, field = k.split(".")
                    setattr(getattr(self, rec), field, v)
                else:
                    setattr(self, k, v)
            self.graphs = {}  # captured graphs point at the replaced tensors
        self.expiry[:], self.soonest = 0, 0  # recomputed at the next step
        self._drop_host_state()
        self.runs = int(self.seen.max())

    def _drop_host_state(self) -> None:
        for rec in (self.pos, self.neg, self.drift):
            if rec is not None:
                rec.drop_host_state()

    @torch.inference_mode()
    def _restore(self, state: dict[str, Any]) -> None:
        """Copy saved values into the existing state tensors (a graph keeps their addresses)."""
        mine = self._tensors()
        for k, v in state.items():
            if k in HOST:
                setattr(self, k, np.array(v, dtype=np.int64))
            else:
                mine[k].copy_(v)

    # ------------------------------------------------------------------ step
    def run(self, x: torch.Tensor, active: np.ndarray | None):
        """One step of every stream (the skipped ones' state untouched): x [S, V, d] float32 on the
        device, active [S] bool on the host (None = all) -> (logits, clip, H, query), [S, ...]."""
        ok = None if active is None else torch.as_tensor(active).to(self.device, non_blocking=True)
        self._active = active  # the host's view of the stepping streams (`_periodic`)
        if self.cuda_graph:
            self.before_graph()
            out = graphs.run(self, x, ok)
            self.resets_before &= self.cuda_graph  # a failed capture: the eager step resets from the next step on
        else:
            with small_ops(self.device):
                out = self._step(x, ok, self._rows(active))
        self.seen += 1 if active is None else active
        self.runs += 1
        return out

    def _rows(self, active: np.ndarray | None) -> tuple[int, bool]:
        """Bank rows to search eagerly: the largest fill of the stepping streams, and whether some
        of them hold fewer (then the empty rows are masked by the bank's bias)."""
        fills = [self._fill(s) for s in range(self.streams) if active is None or active[s]]
        rows = max(fills, default=0)
        return rows, any(f < rows for f in fills) or (self.config.forget.resets and not self.host_resets)

    def _step(self, x: torch.Tensor, ok: torch.Tensor | None, rows: tuple[int, bool]):
        """The step on the device state, Alg. 1. `rows` = (bank rows searched, masked or not):
        eager, the filled prefix; under a CUDA graph, every row with the empty ones masked."""
        cfg, p, sw, shifts = self.config, self.p, self.sw, self.method.mean_shift
        if cfg.forget.active:
            self._forget(x, ok, rows[0])
            if self.host_resets and self._marked:  # a stream reset at this step: its bank fills anew
                rows = self._rows(self._active)
        aggregate = view_aggregator(cfg.view_mode, getattr(cfg, cfg.view_mode, None))
        f, clip, h, probs = Fn.form_queries(x, self.text, cfg.logit_scale, cfg.view_mode, cfg.view_ratio, aggregate)
        if not sw.cache:
            self.clock += 1 if ok is None else ok
            return clip, clip, h, f
        q = self._shift(f.unsqueeze(1), rows).squeeze(1) if shifts else f
        boost = select_views(x, self.text, cfg.logit_scale, cfg.view_ratio) if sw.boost else None
        if boost is not None and shifts:
            boost = (self._shift(boost[0], rows), *boost[1:])
        if shifts:
            self._grow_if_full()
            self.bank.append(f, self.clock, cfg.bank_size is not None, ok, cfg.forget.resets)
        self._insert(clip.argmax(-1), h, q, probs, ok)
        use = (self.seen, self._active, True) if self.host_reads else (self.clock, ok, False)  # seen: the clock
        pos = self.pos.logits(q, p.beta, p.kernel, p.cache_alpha, *use)
        if boost is not None:
            pos = boosted_logits(q, pos, self.pos, *boost, self._stepping(ok), p.delta, p.beta, p.kernel, p.cache_alpha)
        neg = self.neg.logits(q, p.neg_beta, "exp", p.neg_alpha, *use) if sw.negative else None
        self.clock += 1 if ok is None else ok
        return Fn.final_logits(clip, pos, neg, p.lam), clip, h, q

    def _insert(self, label, h, q, probs, ok: torch.Tensor | None) -> None:
        """The cache updates before any cache logits are read (Alg. 1): the positive cache, TDA's negative one
        (its entropy gate and its mask of the probabilities); forget's timeliness weights where set."""
        p, fg = self.p, self.config.forget
        tl = (fg.steps, fg.weight) if fg.rule == "timeliness" else None
        if self.host_reads and self.streams == 1:
            self._insert_one(label, h, q, probs, tl)
            return
        self.pos.insert(label, h, q, self.clock, Fn.log_weight(p.cache_alpha, p.beta), ok=ok, timeliness=tl)
        if self.sw.negative:
            gate = entropy_gate_t(h, self.num_classes, p.neg_entropy_lower, p.neg_entropy_upper)
            self.neg.insert(
                label,
                h,
                q,
                self.clock,
                Fn.log_weight(p.neg_alpha, p.neg_beta),
                self.sw.neg_policy == "fifo",
                gate if ok is None else gate & ok,
                Fn.negative_mask(probs, p.neg_mask_lower, p.neg_mask_upper),
                tl,
            )

    def _insert_one(self, label, h, q, probs, tl) -> None:
        """`_insert` of one stream where the host reads the state: the label, entropy and clock read
        as scalars, the slots chosen by the replay scan's host rules (`Cache.insert_one`); TDA's
        negative cache behind its entropy gate (`entropy_gate`, as `entropy_gate_t`)."""
        if self._active is not None and not self._active[0]:
            return
        p, c, hf, t = self.p, int(label), float(h), int(self.seen[0])  # seen: the clock
        key = q.numpy()[0]
        self.pos.insert_one(c, hf, key, t, Fn.log_weight(p.cache_alpha, p.beta), timeliness=tl)
        if self.sw.negative and entropy_gate(hf, self.num_classes, p.neg_entropy_lower, p.neg_entropy_upper):
            mask = lambda: Fn.negative_mask(probs, p.neg_mask_lower, p.neg_mask_upper).numpy()[0]
            fifo = self.sw.neg_policy == "fifo"
            self.neg.insert_one(c, hf, key, t, Fn.log_weight(p.neg_alpha, p.neg_beta), fifo, mask, tl)

    def _forget(self, x: torch.Tensor, ok: torch.Tensor | None, rows: int) -> None:
        """The forget section's resets and expiries before the step (`mstta.engine.forget`), on the device:
        a periodic reset (RDumb), a detected cut (view 0's feature into the detector), the
        idle rule's expiry; `last_cut` [S] records the streams reset at this step. Where the host
        knows the resets (`host_resets`), a step without one runs no reset op."""
        fg = self.config.forget
        cut = self._periodic(ok) if fg.rule == "periodic" and not self.resets_before else None
        if fg.detect:
            if cut is not None:  # the detector's reference starts over with the state
                self.drift.forget(cut)
            found = self._detect(x, ok)
            cut = found if cut is None else cut if found is None else cut | found
        if cut is not None:
            self._reset(cut, rows)
        elif self._marked and not self.resets_before:  # no stream resets at this step (host-known)
            self._unmark()
        if fg.rule == "idle" and (not self.host_reads or self.runs >= self.soonest):
            held = [(i, rec) for i, rec in enumerate((self.pos, self.neg)) if rec is not None]
            for i, rec in held:
                self._expire(i, rec, ok)
            self.soonest = min((int(self.expiry[i].min()) for i, _ in held), default=MAX_STEPS)

    def _reset(self, cut: torch.Tensor, rows: int | None) -> None:
        """Start over the streams where cut [S] (bool, on the device): the bank's rows (`rows`: those
        that can hold a feature; None = all) and the caches emptied; `last_cut` records them."""
        if self.bank is not None:
            self.bank.forget(cut, self.clock, rows)
        for rec in (self.pos, self.neg):
            if rec is not None:
                rec.forget(cut)
        self.last_cut.copy_(cut)
        self._marked = True
        if self.host_resets:  # the host's note: these streams' bank fills anew
            hit = cut.cpu().numpy()
            self.since[hit] = self.seen[hit]

    def _unmark(self) -> None:
        """The last step's reset mark cleared: no stream resets at this step."""
        self.last_cut.zero_()
        self._marked = False

    def before_graph(self) -> None:
        """RDumb's resets of this step where the host knows them under a CUDA graph (`resets_before`),
        eagerly before the replay: ops only at a reset and at the step after it (its mark cleared)."""
        if not self.resets_before:
            return
        due = self._periodic_due()
        if due.any():
            self._reset(torch.as_tensor(due, device=self.device), None)  # every row: the graph searches them all
            self.since[due] = self.seen[due]
        elif self._marked:
            self._unmark()

    def _expire(self, i: int, rec: Cache, ok: torch.Tensor | None) -> None:
        """The idle rule's expiry of cache i (0 positive, 1 negative); where the host reads the state,
        only at a step where a slot can expire (`Cache.expire_host`'s bound, kept in `expiry`)."""
        idle = self.config.forget.idle
        if not self.host_reads:
            rec.expire(self.clock, idle, ok)
            return
        if self.streams == 1:  # scalar reads
            if (self._active is None or self._active[0]) and self.seen[0] >= self.expiry[i, 0]:
                self.expiry[i, 0] = rec.expire_one(int(self.seen[0]), idle)
            return
        due = self.seen >= self.expiry[i]
        if self._active is not None:
            due &= self._active
        if due.any():  # seen: the device's clock
            self.expiry[i] = np.where(due, rec.expire_host(self.seen, idle, due), self.expiry[i])

    def _detect(self, x: torch.Tensor, ok: torch.Tensor | None) -> torch.Tensor | None:
        """The detector's cuts at this step, [S] bool on the device; None where the host knows there is none."""
        fg = self.config.forget
        if not self.host_reads:
            return drift_step_t(self.drift, x[:, 0], fg, ok)
        if self.streams == 1 and (self._active is None or self._active[0]):
            return torch.ones(1, dtype=torch.bool) if drift_step_one(self.drift, x, fg) else None
        hit = drift_step_host(self.drift, x[:, 0], fg, ok)
        return torch.as_tensor(hit, device=self.device) if hit.any() else None

    def _periodic(self, ok: torch.Tensor | None) -> torch.Tensor | None:
        """RDumb's reset at this step, [S] bool on the device. Where the host knows the resets (the
        device clock is `seen`, the stepping streams `_active`): None when no stream resets."""
        if not self.host_resets:
            cut = periodic_reset_t(self.clock, self.config.forget.every)
            return cut if ok is None else cut & ok
        due = self._periodic_due()
        return torch.as_tensor(due, device=self.device) if due.any() else None

    def _periodic_due(self) -> np.ndarray:
        """RDumb's reset at this step [S] (bool, numpy) from the host's count `seen` (the device clock)
        and stepping streams `_active`."""
        every = self.config.forget.every
        due = (self.seen > 0) & (self.seen % every == 0)
        return due if self._active is None else due & self._active

    def _stepping(self, ok: torch.Tensor | None) -> list[int]:
        return list(range(self.streams)) if ok is None else ok.nonzero().flatten().tolist()

    def _shift(self, q: torch.Tensor, rows: tuple[int, bool]) -> torch.Tensor:
        """Mean shift of queries [S, n, d] toward their k nearest bank features, Eq. (9)-(11)."""
        n, masked = rows
        if n == 0:
            return q
        b = self.bank
        bias = b.bias[:, None, :n] if masked else None
        for _ in range(self.config.ms_steps):
            q = Fn.mean_shift_step(
                q, b.rows[:, :n], b.norm[:, :n], b.time[:, None, :n], self.config.k, self.config.alpha, bias
            )
        return q

    def _grow_if_full(self) -> None:
        """An unbounded bank doubles when a stream has filled it (host-known: no sync)."""
        if self.config.bank_size is None and int((self.seen - self.since).max()) >= self.bank.rows.shape[1]:
            self.bank = self.bank.grown()
