"""The online adaptation engine: all state of one stream in one resettable object.

The engine holds tensors and its config only (never the CLIP model), so it is cheap to copy into
a UI session or a test snapshot. Device comes from the text classifier; math runs in float32.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from . import functional as Fn
from .cache_rules import EMPTY_TIME, entropy_gate, entropy_slot, fifo_slot
from .config import EngineConfig
from .errors import UserError
from .methods import Method, get_method


@dataclass
class StepResult:
    """What one step produced: final and CLIP logits [C], CLIP entropy (nats), the query [d]."""

    logits: torch.Tensor
    clip_logits: torch.Tensor
    entropy: float
    feature: torch.Tensor

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


def _log_weight(a: float, beta: float) -> float:
    """Bias of a filled slot in the fused exp kernel: ln(a) - beta (-inf when a = 0)."""
    return math.log(a) - beta if a > 0 else float("-inf")


class Engine:
    """Online test-time adaptation over CLIP features, one sample per `step()`.

    `step(features)` takes a feature `[d]` or a multi-view sample `[V, d]` (view 0 = the original
    image) and applies, in the paper's order (Algorithm 1):
      1. CLIP logits, entropy and pseudo-label (views aggregated per `view_mode`);
      2. mean shift toward the k nearest earlier raw features (MS methods; the bank gets the
         current feature afterwards);
      3. cache updates (positive; TDA's negative) before any cache logits are read;
      4. final logits = CLIP + lam * (positive - negative cache logits), with BoostAdapter's
         boosted views added to a throw-away copy of the positive cache.
    """

    def __init__(self, text: torch.Tensor, method: str | Method = "ms-tta",
                 config: EngineConfig | None = None, device: str | torch.device | None = None):
        self.method = get_method(method) if isinstance(method, str) else method
        self.config = config if config is not None else EngineConfig()
        text = torch.as_tensor(text)
        if text.dim() != 2 or text.shape[0] < 2:
            raise UserError(f"text classifier must be [C, d] with C >= 2 classes, got shape {tuple(text.shape)}")
        self.text = Fn.normalize(text.to(device=device or text.device, dtype=torch.float32))
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
        """Forget everything adapted so far: empty bank and caches."""
        cfg, C, d, dev = self.config, self.num_classes, self.dim, self.device
        self.n_seen = 0
        cap = cfg.bank_size if cfg.bank_size is not None else 1024
        self._bank = torch.zeros(cap if self.method.mean_shift else 0, d, device=dev)
        self._bank_norm = torch.zeros(self._bank.shape[0], device=dev)
        self._bank_time = torch.zeros(self._bank.shape[0], dtype=torch.long, device=dev)
        self._bank_n = 0
        self._bank_ptr = 0
        q = cfg.capacity if self.method.cache else 0
        self._pos_keys = torch.zeros(C, q, d, device=dev)
        self._pos_valid = torch.zeros(C, q, device=dev)
        self._pos_bias = torch.full((C * q,), float("-inf"), device=dev)  # ln(a) - beta where filled
        self._pos_ent = np.full((C, q), np.inf)
        qn = cfg.neg_capacity if self.method.negative else 0
        self._neg_keys = torch.zeros(C, qn, d, device=dev)
        self._neg_vals = torch.zeros(C, qn, C, device=dev)
        self._neg_valid = torch.zeros(C, qn, device=dev)
        self._neg_bias = torch.full((C * qn,), float("-inf"), device=dev)
        self._neg_ent = np.full((C, qn), np.inf)
        self._neg_time = np.full((C, qn), EMPTY_TIME, dtype=np.int64)

    def cache_fill(self) -> np.ndarray:
        """Entries per class in the positive cache, [C] ints."""
        return np.isfinite(self._pos_ent).sum(1)

    def cache_entropy(self) -> np.ndarray:
        """Entropy of every positive-cache slot, [C, Q] (+inf = empty slot); a copy."""
        return self._pos_ent.copy()

    @property
    def bank_len(self) -> int:
        return self._bank_n

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume a stream (tensors and host arrays; copies)."""
        return copy.deepcopy({k: v for k, v in vars(self).items() if k.startswith("_") or k == "n_seen"})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for k, v in copy.deepcopy(state).items():
            setattr(self, k, v)

    # ------------------------------------------------------------------ step
    @torch.inference_mode()
    def step(self, features: torch.Tensor | np.ndarray) -> StepResult:
        """Adapt to one sample and predict it. `[d]` or `[V, d]` -> StepResult (see class doc)."""
        cfg, m = self.config, self.method
        x = torch.as_tensor(features).to(self.device, torch.float32)
        if x.dim() == 1:
            x = x.unsqueeze(0)
        if x.dim() != 2 or x.shape[1] != self.dim:
            raise UserError(f"feature shape {tuple(features.shape)} does not match the classifier's dimension {self.dim}")
        x = Fn.normalize(x)
        view_logits = Fn.clip_logits(x, self.text, cfg.logit_scale)            # [V, C]
        if x.shape[0] == 1 or cfg.view_mode == "original":
            f, clip = x[0], view_logits[0]
            h_t, probs = Fn.entropy(clip), None
        else:
            f, clip, h_t, probs = Fn.aggregate_views(x, view_logits, cfg.view_ratio)
        h = float(h_t)
        self.n_seen += 1
        if not m.cache:
            return StepResult(clip, clip, h, f)

        boost = self._boost_views(x, view_logits) if m.boost else None
        q = self._shift(f.unsqueeze(0))[0] if m.mean_shift else f
        if boost is not None and m.mean_shift:
            boost = (self._shift(boost[0]), boost[1], boost[2])
        if m.mean_shift:
            self._bank_append(f)
        p = int(clip.argmax())
        self._insert_positive(p, h, q)
        if m.negative and entropy_gate(h, self.num_classes, cfg.neg_entropy_lower, cfg.neg_entropy_upper):
            if probs is None:
                probs = torch.softmax(clip, dim=-1)
            self._insert_negative(p, h, q, Fn.negative_mask(probs, cfg.neg_mask_lower, cfg.neg_mask_upper))

        pos = self._positive_logits(q)
        if boost is not None:
            pos = self._boosted(q, pos, *boost)
        cache = pos - self._negative_logits(q) if m.negative else pos
        return StepResult(clip + cfg.lam * cache, clip, h, q)

    # ------------------------------------------------------------------ parts
    def _shift(self, q: torch.Tensor) -> torch.Tensor:
        """Mean shift of queries [n, d] toward their k nearest bank features, Eq. (9)-(11)."""
        n = self._bank_n
        if n == 0:
            return q
        cfg = self.config
        bank, norms = self._bank[:n], self._bank_norm[:n]
        for _ in range(cfg.ms_steps):
            idx = Fn.knn_indices((q @ bank.T) / norms, cfg.k, self._bank_time[:n])
            q = Fn.mean_shift(q, bank[idx].sum(1), idx.shape[1], cfg.alpha)
        return q

    def _bank_append(self, f: torch.Tensor) -> None:
        cap = self._bank.shape[0]
        if self.config.bank_size is not None:
            slot = self._bank_ptr
            self._bank_ptr = (slot + 1) % cap
            self._bank_n = min(self._bank_n + 1, cap)
        else:
            if self._bank_n == cap:
                self._bank = torch.cat([self._bank, torch.zeros_like(self._bank)])
                self._bank_norm = torch.cat([self._bank_norm, torch.zeros_like(self._bank_norm)])
                self._bank_time = torch.cat([self._bank_time, torch.zeros_like(self._bank_time)])
            slot = self._bank_n
            self._bank_n += 1
        self._bank[slot] = f
        self._bank_norm[slot] = f.norm()
        self._bank_time[slot] = self.n_seen

    def _insert_positive(self, p: int, h: float, key: torch.Tensor) -> None:
        j = entropy_slot(self._pos_ent[p], h)
        if j >= 0:
            self._pos_ent[p, j] = h
            self._pos_keys[p, j] = key
            self._pos_valid[p, j] = 1.0
            self._pos_bias[p * self.config.capacity + j] = _log_weight(self.config.cache_alpha, self.config.beta)

    def _insert_negative(self, p: int, h: float, key: torch.Tensor, value: torch.Tensor) -> None:
        if self.method.neg_policy == "fifo":
            j = fifo_slot(self._neg_time[p])
        else:
            j = entropy_slot(self._neg_ent[p], h)
        if j >= 0:
            self._neg_ent[p, j] = h
            self._neg_time[p, j] = self.n_seen
            self._neg_keys[p, j] = key
            self._neg_vals[p, j] = value
            self._neg_valid[p, j] = 1.0
            self._neg_bias[p * self.config.neg_capacity + j] = _log_weight(self.config.neg_alpha, self.config.neg_beta)

    def _positive_logits(self, q: torch.Tensor) -> torch.Tensor:
        """Positive cache logits: a * sum_slots affinity(q, key) per class (values one-hot). [d] -> [C].

        The exp kernel is fused: a * exp(-beta (1 - s)) = exp(beta s + ln a - beta), with the
        bias -inf on empty slots, so one addmv + exp covers the whole cache.
        """
        cfg = self.config
        keys = self._pos_keys.view(-1, self.dim)
        if cfg.kernel == "exp":
            w = torch.exp(torch.addmv(self._pos_bias, keys, q, alpha=cfg.beta))
        else:
            w = cfg.cache_alpha * torch.mv(keys, q) * self._pos_valid.view(-1)
        return w.view(self.num_classes, -1).sum(1)

    def _negative_logits(self, q: torch.Tensor) -> torch.Tensor:
        """TDA's negative cache logits: a_neg * exp(-b_neg (1 - qK^T)) V (fused as above). [d] -> [C]."""
        w = torch.exp(torch.addmv(self._neg_bias, self._neg_keys.view(-1, self.dim), q, alpha=self.config.neg_beta))
        return w @ self._neg_vals.view(-1, self.num_classes)

    def _boost_views(self, x: torch.Tensor, view_logits: torch.Tensor):
        """BoostAdapter's boosting views: the floor(ratio*V) lowest-entropy images (original
        included), each with its own pseudo-label and entropy; None when there are none."""
        n = Fn.num_selected(x.shape[0], self.config.view_ratio)
        if x.shape[0] < 2 or n == 0:
            return None
        ent = Fn.entropy(view_logits)
        sel = torch.argsort(ent, stable=True)[:n]
        return x[sel], view_logits[sel].argmax(-1).tolist(), ent[sel].tolist()

    def _boosted(self, q: torch.Tensor, pos: torch.Tensor, keys: torch.Tensor,
                 labels: list[int], ents: list[float]) -> torch.Tensor:
        """Positive logits from a throw-away copy of the cache with capacity Q + delta holding the
        boosting views too (BoostAdapter); only the classes the views touch change."""
        cfg = self.config
        cap = cfg.capacity + cfg.delta
        pos = pos.clone()
        for c in sorted(set(labels)):
            row_ent = np.full(cap, np.inf)
            row_ent[: cfg.capacity] = self._pos_ent[c]
            row_keys = [self._pos_keys[c, j] for j in range(cfg.capacity)] + [None] * cfg.delta
            for key, lab, h in zip(keys, labels, ents):
                if lab != c:
                    continue
                j = entropy_slot(row_ent, h)
                if j >= 0:
                    row_ent[j], row_keys[j] = h, key
            live = [row_keys[j] for j in range(cap) if np.isfinite(row_ent[j])]
            if live:
                aff = Fn.cache_affinity(q, torch.stack(live), cfg.kernel, cfg.beta)
                pos[c] = cfg.cache_alpha * aff.sum()
        return pos
