"""The online adaptation engine: all state of one stream in one resettable object.

The engine holds tensors and its config only (never the CLIP model), so it is cheap to copy into
a UI session or a test snapshot. Device comes from the text classifier; math runs in float32.
The whole state lives on the engine's device and a step never waits on the host (no `.item()`,
no `.tolist()`, no branch on a tensor's value; BoostAdapter's per-view cache copies excepted),
so on CUDA the step of a bounded bank can be captured once as a CUDA graph and replayed.
"""
from __future__ import annotations

import contextlib
import copy
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from . import functional as Fn
from .cache_rules import EMPTY_TIME, entropy_gate_t, entropy_slot, entropy_slot_t, fifo_slot_t
from .config import EngineConfig
from .errors import UserError
from .methods import Method, get_method
from .safety import check_memory, human_bytes

log = logging.getLogger(__name__)

UNBOUNDED_START = 1024  # first bank allocation when bank_size is None (it doubles when full)
GRAPH_WARMUP = 3        # eager steps on a side stream before a CUDA graph is captured


@dataclass
class StepResult:
    """What one step produced, as device tensors: final and CLIP logits [C], the CLIP entropy
    (nats, a 0-d tensor), the query [d]. Python numbers are made only when a caller asks."""

    logits: torch.Tensor
    clip_logits: torch.Tensor
    entropy_tensor: torch.Tensor
    feature: torch.Tensor

    @property
    def entropy(self) -> float:
        return float(self.entropy_tensor)

    @property
    def prediction(self) -> int:
        return int(self.logits.argmax())

    @property
    def clip_prediction(self) -> int:
        return int(self.clip_logits.argmax())

    def topk(self, k: int = 3, clip: bool = False) -> list[tuple[int, float]]:
        """Top-k (class index, softmax probability) of the final (or CLIP) logits."""
        probs = torch.softmax((self.clip_logits if clip else self.logits).float(), dim=-1)
        vals, idx = probs.topk(min(k, probs.numel()))
        return list(zip(idx.tolist(), vals.tolist()))


@contextlib.contextmanager
def _single_threaded(device: torch.device):
    """Run a CPU step's small ops on one intra-op thread: thread hand-offs cost more than the work
    and collapse under a competing load. Restored afterwards, so an encoder keeps its threads."""
    before = torch.get_num_threads() if device.type == "cpu" else 1
    if before != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if before != 1:
            torch.set_num_threads(before)


class Engine:
    """Online test-time adaptation over CLIP features, one sample per `step()`.

    `step(features)` takes a feature `[d]` or a multi-view sample `[V, d]` (view 0 = the original
    image) and applies, in the paper's order (Algorithm 1):
      1. CLIP logits, entropy and pseudo-label (views aggregated per `view_mode`);
      2. mean shift toward the k nearest earlier raw features (MS methods; the bank gets the
         current feature afterwards);
      3. cache updates (positive; TDA's negative) before any cache logits are read;
      4. final logits = CLIP + lam * (positive - negative cache logits), Eq. (13), with
         BoostAdapter's boosting views added to a throw-away copy of the positive cache.

    `cuda_graph`: None = capture the step as a CUDA graph when it can be (a CUDA device, a bounded
    bank, a method without BoostAdapter's boosting; a failed capture logs a warning and runs
    eagerly); True = require it (an error otherwise); False = always run eagerly.
    """

    def __init__(self, text: torch.Tensor, method: str | Method = "ms-tta",
                 config: EngineConfig | None = None, device: str | torch.device | None = None,
                 cuda_graph: bool | None = None):
        self.method = get_method(method) if isinstance(method, str) else method
        self.config = config if config is not None else EngineConfig()
        text = torch.as_tensor(text)
        if text.dim() != 2 or text.shape[0] < 2:
            raise UserError(f"text classifier must be [C, d] with C >= 2 classes, got shape {tuple(text.shape)}")
        self.text = Fn.normalize(text.to(device=device or text.device, dtype=torch.float32))
        can_graph = self.device.type == "cuda" and self.config.bank_size is not None and not self.method.boost
        if cuda_graph and not can_graph:
            raise UserError("cuda_graph=True needs a CUDA device, a bounded bank (bank_size) and a method "
                            "without boosting views; pass cuda_graph=None to choose automatically")
        self.cuda_graph = can_graph if cuda_graph is None else bool(cuda_graph)
        self._graph_required = bool(cuda_graph)
        self.reset()

    # ------------------------------------------------------------------ state
    @property
    def num_classes(self) -> int:
        return self.text.shape[0]

    @property
    def dim(self) -> int:
        return self.text.shape[1]

    @property
    def device(self) -> torch.device:
        return self.text.device

    def reset(self) -> None:
        """Forget everything adapted so far: empty bank and caches (memory checked first)."""
        cfg, C, d, dev, m = self.config, self.num_classes, self.dim, self.device, self.method
        rows = (cfg.bank_size if cfg.bank_size is not None else UNBOUNDED_START) if m.mean_shift else 0
        q = cfg.capacity if m.cache else 0
        qn = cfg.neg_capacity if m.negative else 0
        self._check_memory(rows, q, qn)
        self.n_seen = 0
        self._graphs: dict[int, Any] = {}
        self._clock = torch.zeros(1, dtype=torch.long, device=dev)           # samples seen, on the device
        self._bank = torch.zeros(rows, d, device=dev)                        # raw features (ring buffer)
        self._bank_norm = torch.ones(rows, device=dev)
        self._bank_time = torch.full((rows,), EMPTY_TIME, dtype=torch.long, device=dev)  # -1 = empty
        self._pos_keys = torch.zeros(C * q, d, device=dev)                   # class-major slots
        self._pos_ent = torch.full((C, q), float("inf"), device=dev)         # +inf = empty
        self._pos_time = torch.full((C, q), EMPTY_TIME, dtype=torch.long, device=dev)  # sample index
        self._pos_bias = torch.full((C * q,), float("-inf"), device=dev)     # ln(a) - beta where filled
        self._neg_keys = torch.zeros(C * qn, d, device=dev)
        self._neg_vals = torch.zeros(C * qn, C, device=dev)
        self._neg_ent = torch.full((C, qn), float("inf"), device=dev)
        self._neg_time = torch.full((C, qn), EMPTY_TIME, dtype=torch.long, device=dev)
        self._neg_bias = torch.full((C * qn,), float("-inf"), device=dev)

    def _check_memory(self, rows: int, q: int, qn: int) -> None:
        C, d = self.num_classes, self.dim
        parts = [(rows * (d + 2) * 4, f"bank {rows} x {d} dims (bank_size)"),
                 (C * q * (d + 2) * 4, f"positive cache: capacity {q} x {C} classes x {d} dims"),
                 (C * qn * (d + C + 3) * 4, f"negative cache: neg_capacity {qn} x {C} classes x ({d} dims + {C} classes)")]
        used = [(b, w) for b, w in parts if b > 0]
        total = sum(b for b, _ in used)
        what = "the engine's state (" + "; ".join(w for _, w in used) + ")"
        check_memory(total, what)
        if self.device.type == "cuda":
            have = torch.cuda.get_device_properties(self.device).total_memory
            if total > 0.8 * have:
                raise UserError(f"{what} needs {human_bytes(total)}; this GPU has {human_bytes(have)}; lower it")

    def cache_fill(self) -> np.ndarray:
        """Entries per class in the positive cache, [C] ints."""
        return np.isfinite(self.cache_entropy()).sum(1)

    def cache_entropy(self) -> np.ndarray:
        """Entropy of every positive-cache slot, [C, Q] (+inf = empty slot); a host copy."""
        return self._pos_ent.cpu().numpy().astype(np.float64)

    @property
    def bank_len(self) -> int:
        """Raw features in the bank (known on the host: no device round trip)."""
        if not self.method.mean_shift:
            return 0
        return self.n_seen if self.config.bank_size is None else min(self.n_seen, self.config.bank_size)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume a stream (tensors and counters; copies)."""
        return copy.deepcopy({k: v for k, v in vars(self).items()
                              if (k.startswith("_") and isinstance(v, torch.Tensor)) or k == "n_seen"})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from `state_dict()`: copied into the current tensors when their shapes match (a
        captured CUDA graph stays valid), else the tensors are replaced (and graphs dropped)."""
        fits = all(not isinstance(v, torch.Tensor) or (isinstance(getattr(self, k, None), torch.Tensor)
                   and getattr(self, k).shape == v.shape and getattr(self, k).dtype == v.dtype)
                   for k, v in state.items())
        if fits:
            self._restore(state)
            return
        for k, v in copy.deepcopy(state).items():
            setattr(self, k, v)
        self._graphs = {}  # captured graphs point at the replaced tensors

    # ------------------------------------------------------------------ step
    @torch.inference_mode()
    def step(self, features: torch.Tensor | np.ndarray) -> StepResult:
        """Adapt to one sample and predict it. `[d]` or `[V, d]` -> StepResult (see class doc)."""
        x = torch.as_tensor(features)
        shape = tuple(x.shape)
        if x.dim() == 1:
            x = x.unsqueeze(0)
        if x.dim() != 2 or x.shape[1] != self.dim or x.shape[0] == 0:
            raise UserError(f"feature shape {shape} does not match the classifier: expected [{self.dim}] or [V, {self.dim}]")
        x = x.to(self.device, torch.float32)
        if self.cuda_graph:
            out = self._graph_step(x)
        else:
            with _single_threaded(self.device):
                out = self._step(x, self.bank_len)
        self.n_seen += 1
        return StepResult(*out)

    def _step(self, x: torch.Tensor, bank_rows: int):
        """One step on the device state; `bank_rows` = the bank rows to search (the filled prefix
        when eager; all rows, with the empty ones masked, under a CUDA graph). [V, d] -> outputs."""
        cfg, m = self.config, self.method
        f, clip, h, probs = Fn.form_queries(x.unsqueeze(0), self.text, cfg.logit_scale, cfg.view_mode, cfg.view_ratio)
        if m.cache:
            q = self._shift(f, bank_rows) if m.mean_shift else f
            boost = self._boost_views(x, bank_rows) if m.boost else None
            if m.mean_shift:
                self._bank_append(f)
            p = clip.argmax(-1)
            self._insert_positive(p, h, q)
            if m.negative:
                self._insert_negative(p, h, q, Fn.negative_mask(probs, cfg.neg_mask_lower, cfg.neg_mask_upper))
            pos = self._positive_logits(q, boost)
            neg = self._negative_logits(q) if m.negative else None
            logits = Fn.final_logits(clip, pos, neg, cfg.lam)
        else:
            q, logits = f, clip
        self._clock += 1
        return logits[0], clip[0], h[0], q[0]

    # ------------------------------------------------------------------ parts
    def _shift(self, q: torch.Tensor, rows: int) -> torch.Tensor:
        """Mean shift of queries [n, d] toward their k nearest bank features, Eq. (9)-(11)."""
        if rows == 0:
            return q
        cfg = self.config
        bank, norm, time = self._bank[:rows], self._bank_norm[:rows], self._bank_time[:rows]
        usable = time >= 0 if rows > self.bank_len else None  # graph mode: empty slots masked
        for _ in range(cfg.ms_steps):
            q = Fn.mean_shift_step(q, bank, norm, time, cfg.k, cfg.alpha, usable)
        return q

    def _bank_append(self, f: torch.Tensor) -> None:
        """The current raw feature enters the bank after the shift (first in, first out when bounded)."""
        cap = self._bank.shape[0]
        if self.config.bank_size is None and self.n_seen == cap:
            self._bank = torch.cat([self._bank, torch.zeros_like(self._bank)])
            self._bank_norm = torch.cat([self._bank_norm, torch.ones_like(self._bank_norm)])
            self._bank_time = torch.cat([self._bank_time, torch.full_like(self._bank_time, EMPTY_TIME)])
            cap *= 2
        slot = self._clock % cap if self.config.bank_size is not None else self._clock
        self._bank.index_copy_(0, slot, f)
        self._bank_norm.index_copy_(0, slot, f.norm(dim=-1))
        self._bank_time.index_copy_(0, slot, self._clock)

    def _insert_positive(self, p: torch.Tensor, h: torch.Tensor, key: torch.Tensor) -> None:
        """§3.1 / Alg. 1: into class p's first empty slot, else over its highest-entropy entry
        when h is strictly lower (TDA `update_cache`); as tensor ops."""
        cfg = self.config
        j, ok = entropy_slot_t(self._pos_ent.index_select(0, p), self._pos_time.index_select(0, p), h)
        flat = p * cfg.capacity + j
        self._write(self._pos_ent.view(-1), flat, ok, h)
        self._write(self._pos_time.view(-1), flat, ok, self._clock)
        self._write(self._pos_keys, flat, ok, key)
        self._write(self._pos_bias, flat, ok, torch.full_like(h, Fn.log_weight(cfg.cache_alpha, cfg.beta)))

    def _insert_negative(self, p: torch.Tensor, h: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
        """TDA's negative cache: admitted when lower < H/log2(C) < upper; lowest-entropy rule (TDA)
        or first in, first out (BoostAdapter `update_cache(..., fifo=True)`)."""
        cfg = self.config
        if self.method.neg_policy == "fifo":
            j, ok = fifo_slot_t(self._neg_time.index_select(0, p))
        else:
            j, ok = entropy_slot_t(self._neg_ent.index_select(0, p), self._neg_time.index_select(0, p), h)
        ok = ok & entropy_gate_t(h, self.num_classes, cfg.neg_entropy_lower, cfg.neg_entropy_upper)
        flat = p * cfg.neg_capacity + j
        self._write(self._neg_ent.view(-1), flat, ok, h)
        self._write(self._neg_time.view(-1), flat, ok, self._clock)
        self._write(self._neg_keys, flat, ok, key)
        self._write(self._neg_vals, flat, ok, value)
        self._write(self._neg_bias, flat, ok, torch.full_like(h, Fn.log_weight(cfg.neg_alpha, cfg.neg_beta)))

    @staticmethod
    def _write(dst: torch.Tensor, index: torch.Tensor, ok: torch.Tensor, new: torch.Tensor) -> None:
        """dst[index] = new where ok (rows of dst), in place, without leaving the device."""
        old = dst.index_select(0, index)
        mask = ok.view(-1, *([1] * (old.dim() - 1)))
        dst.index_copy_(0, index, torch.where(mask, new.to(dst.dtype), old))

    def _positive_logits(self, q: torch.Tensor, boost) -> torch.Tensor:
        """Positive cache logits, Eq. (5)-(6): a * sum_slots affinity(q, key) per class (values
        one-hot), one fused addmm + exp over the whole cache. [1, d] -> [1, C]."""
        cfg = self.config
        w = Fn.cache_weights(q, self._pos_keys, self._pos_bias, cfg.beta, cfg.kernel, cfg.cache_alpha)
        pos = w.view(self.num_classes, -1).sum(-1).unsqueeze(0)
        return pos if boost is None else self._boosted(q, pos, *boost)

    def _negative_logits(self, q: torch.Tensor) -> torch.Tensor:
        """TDA's negative cache logits: a_neg * exp(-b_neg (1 - q K^T)) V (fused). [1, d] -> [1, C]."""
        cfg = self.config
        w = Fn.cache_weights(q, self._neg_keys, self._neg_bias, cfg.neg_beta, "exp", cfg.neg_alpha)
        return w @ self._neg_vals

    def _boost_views(self, x: torch.Tensor, bank_rows: int):
        """BoostAdapter's regional bootstrapping (runner.py `select_confident_samples(ori_feat,
        ori_output, 0.1)`): the floor(ratio*V) lowest-entropy views (original included), each
        with its own pseudo-label and entropy, mean-shifted against the bank for MS methods (before
        the current sample enters it, like the query); None when there are none."""
        cfg = self.config
        n = Fn.num_selected(x.shape[0], cfg.view_ratio)
        if x.shape[0] < 2 or n == 0:
            return None
        x = Fn.normalize(x)
        view_logits = Fn.clip_logits(x, self.text, cfg.logit_scale)
        ent = Fn.entropy(view_logits)
        sel = torch.argsort(ent, stable=True)[:n]
        keys = self._shift(x[sel], bank_rows) if self.method.mean_shift else x[sel]
        return keys, view_logits[sel].argmax(-1).tolist(), ent[sel].tolist()

    def _boosted(self, q: torch.Tensor, pos: torch.Tensor, keys: torch.Tensor,
                 labels: list[int], ents: list[float]) -> torch.Tensor:
        """Positive logits from a throw-away copy of the cache with capacity Q + delta holding the
        boosting views too (BoostAdapter runner.py: `cur_pos_cache = copy.deepcopy(pos_cache)`,
        `update_cache(..., shot_capacity + delta)`); only the classes the views touch change.
        Host-side per class (allowed: BoostAdapter's copies are per sample)."""
        cfg = self.config
        cap, Q = cfg.capacity + cfg.delta, cfg.capacity
        pos = pos.clone()
        touched = sorted(set(labels))
        host_ent = self._pos_ent[touched].cpu().numpy().astype(np.float64)
        host_time = self._pos_time[touched].cpu().numpy()
        for row, c in enumerate(touched):
            row_ent = np.concatenate([host_ent[row], np.full(cfg.delta, np.inf)])
            row_time = np.concatenate([host_time[row], np.full(cfg.delta, EMPTY_TIME)])
            row_keys: list[torch.Tensor | None] = [self._pos_keys[c * Q + j] for j in range(Q)] + [None] * cfg.delta
            for i, (key, lab, h) in enumerate(zip(keys, labels, ents)):
                if lab != c:
                    continue
                j = entropy_slot(row_ent, row_time, h)
                if j >= 0:  # the views come after every cached entry, in view order (appended)
                    row_ent[j], row_time[j], row_keys[j] = h, np.iinfo(np.int64).max - len(ents) + i, key
            live = [row_keys[j] for j in range(cap) if np.isfinite(row_ent[j])]
            if live:
                bias = torch.full((len(live),), Fn.log_weight(cfg.cache_alpha, cfg.beta), device=q.device)
                w = Fn.cache_weights(q, torch.stack(live), bias, cfg.beta, cfg.kernel, cfg.cache_alpha)
                pos[0, c] = w.sum()
        return pos

    # ------------------------------------------------------------------ CUDA graph
    def _graph_step(self, x: torch.Tensor):
        """The step captured once per input shape as a CUDA graph over the static state (the whole
        ring buffer, empty rows masked) and replayed; outputs are copied out of its buffers."""
        g = self._graphs.get(x.shape[0])
        if g is None:
            try:
                g = self._graphs[x.shape[0]] = self._capture(x)
            except RuntimeError as exc:  # automatic mode: an uncapturable step runs eagerly instead
                if self._graph_required:
                    raise
                log.warning("CUDA graph capture failed (%s); the engine runs eagerly", exc)
                self.cuda_graph = False
                return self._step(x, self.bank_len)
        static_in, graph, static_out = g
        static_in.copy_(x)
        graph.replay()
        return tuple(t.clone() for t in static_out)

    def _capture(self, x: torch.Tensor):
        saved = self.state_dict()
        try:
            return self._record(x, saved)
        except BaseException:
            self._restore(saved)
            raise

    def _record(self, x: torch.Tensor, saved: dict[str, Any]):
        static_in = x.clone()
        rows = self._bank.shape[0]
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(GRAPH_WARMUP):
                self._step(static_in, rows)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        self._restore(saved)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = self._step(static_in, rows)
        self._restore(saved)  # capture records the kernels without running them; keep state exact
        return static_in, graph, static_out

    @torch.inference_mode()
    def _restore(self, state: dict[str, Any]) -> None:
        """Copy saved values into the existing state tensors (a graph keeps their addresses)."""
        for k, v in state.items():
            cur = getattr(self, k)
            if isinstance(cur, torch.Tensor):
                cur.copy_(v)
            else:
                setattr(self, k, copy.deepcopy(v))
