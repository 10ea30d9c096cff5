"""Replay: run a method over a whole stream of precomputed features.

Gives exactly the predictions of feeding the samples one by one to `Engine.step()`, but
vectorised where the semantics allow: everything a sample's cache decision depends on (its
CLIP pseudo-label, entropy, and mean-shifted feature, whose kNN bank holds only earlier raw
features) is known up front. So replay computes those in batches with the engine's own pieces
(`functional.form_queries`, `mean_shift_step`, `cache_weights`, `final_logits`), decides cache
membership with the engine's slot rules in one host-side scan (each cached entry lives over an
interval of the stream), and computes cache logits in chunks over the entries alive in each
chunk. The boosting methods' per-sample boosted caches do not decompose this way; they replay
online.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from . import functional as Fn
from .cache_rules import EMPTY_TIME, entropy_gate, entropy_slot, fifo_slot
from .config import EngineConfig
from .engine import Engine
from .methods import Method, get_method
from .threads import large_ops


@dataclass
class ReplayResult:
    """Per-sample outputs of a replay, all [N] numpy arrays."""

    predictions: np.ndarray       # final prediction
    clip_predictions: np.ndarray  # zero-shot CLIP prediction
    confidence: np.ndarray        # softmax probability of the final prediction
    clip_confidence: np.ndarray   # softmax probability of CLIP's prediction
    entropy: np.ndarray           # CLIP entropy (nats) used by the caches
    seconds: float                # adaptation time, loading excluded

    @property
    def samples_per_s(self) -> float:
        return len(self.predictions) / self.seconds if self.seconds > 0 else float("inf")


def replay(features: torch.Tensor, text: torch.Tensor, method: str | Method = "ms-tta",
           config: EngineConfig | None = None, device: str | torch.device | None = None,
           online: bool = False, chunk: int = 256) -> ReplayResult:
    """Run `method` over `features` [N, d] or [N, V, d] in stream order. `online=True` forces the
    per-sample engine loop (the reference the vectorised path must match)."""
    m = get_method(method) if isinstance(method, str) else method
    cfg = config if config is not None else EngineConfig()
    dev = torch.device(device) if device is not None else torch.as_tensor(text).device
    feats = _as_views(features)
    if cfg.view_mode == "original" and not m.boost:
        feats = feats[:, :1]  # only view 0 is ever read: same predictions, V times less memory
    feats = feats.to(dev)     # kept in its stored dtype; converted to float32 per chunk
    t0 = time.perf_counter()
    with torch.inference_mode():
        if online or m.boost:  # the engine's step: small ops, one thread (mstta.threads)
            out = _replay_online(feats, text, m, cfg, dev)
        else:
            with large_ops(dev):  # batched GEMMs: the threads a measured probe says gain now
                out = _replay_vectorised(feats, Fn.normalize(torch.as_tensor(text).to(dev, torch.float32)), m, cfg, chunk)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    seconds = time.perf_counter() - t0
    logits, clip, ent = out
    return ReplayResult(*_summarise(logits, clip), ent.cpu().numpy(), seconds)


def mean_shifted(features: torch.Tensor, text: torch.Tensor, config: EngineConfig | None = None,
                 chunk: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """(f, z) of a whole stream: each sample's query feature (views aggregated per `view_mode`,
    as the engine does) and its mean-shifted embedding, Eq. (9)-(11). [N, d] each."""
    cfg = config if config is not None else EngineConfig()
    feats = _as_views(features)
    t = Fn.normalize(torch.as_tensor(text).to(feats.device, torch.float32))
    with torch.inference_mode(), large_ops(feats.device):
        f = _queries(feats, t, cfg)[0]
        return f, _shift_all(f, cfg, chunk)


def _as_views(features) -> torch.Tensor:
    feats = torch.as_tensor(features)
    return feats.unsqueeze(1) if feats.dim() == 2 else feats


def _summarise(logits: torch.Tensor, clip: torch.Tensor):
    pf, pred = torch.softmax(logits, -1).max(-1)
    pc, cpred = torch.softmax(clip, -1).max(-1)
    return pred.cpu().numpy(), cpred.cpu().numpy(), pf.cpu().numpy(), pc.cpu().numpy()


def _replay_online(feats, text, m, cfg, dev):
    engine = Engine(text, m, cfg, device=dev)
    logits, clip, ent = [], [], []
    for x in feats:
        r = engine.step(x)
        logits.append(r.logits)
        clip.append(r.clip_logits)
        ent.append(r.entropy_tensor)
    return torch.stack(logits), torch.stack(clip), torch.stack(ent)


def _queries(feats: torch.Tensor, text: torch.Tensor, cfg: EngineConfig, rows: int = 16384):
    """Feature f, CLIP logits, entropy and probabilities of every sample, formed by the engine's
    own `form_queries`, in chunks of at most `rows` views (converted to float32 per chunk).
    [N, V, d] -> [N, ...]."""
    chunk = max(1, rows // feats.shape[1])
    parts = [Fn.form_queries(feats[a:a + chunk], text, cfg.logit_scale, cfg.view_mode, cfg.view_ratio)
             for a in range(0, feats.shape[0], chunk)]
    return tuple(torch.cat(p) for p in zip(*parts))


def _replay_vectorised(feats, text, m, cfg, chunk):
    f, clip, ent, probs = _queries(feats, text, cfg)
    if not m.cache:
        return clip, clip, ent
    C = text.shape[0]
    q = _shift_all(f, cfg, chunk) if m.mean_shift else f
    labels = clip.argmax(-1).cpu().numpy()
    h = ent.cpu().numpy().astype(np.float64)

    end = _intervals(labels, h, cfg.capacity, C, "entropy")
    weights = lambda qq, kk, bias: Fn.cache_weights(qq, kk, bias, cfg.beta, cfg.kernel, cfg.cache_alpha)
    pos = _interval_logits(q, end, labels, C, weights, Fn.log_weight(cfg.cache_alpha, cfg.beta), None, chunk)
    neg = None
    if m.negative:
        gate = np.array([entropy_gate(v, C, cfg.neg_entropy_lower, cfg.neg_entropy_upper) for v in h])
        nend = _intervals(labels, h, cfg.neg_capacity, C, m.neg_policy, gate)
        values = Fn.negative_mask(probs, cfg.neg_mask_lower, cfg.neg_mask_upper)
        nweights = lambda qq, kk, bias: Fn.cache_weights(qq, kk, bias, cfg.neg_beta, "exp", cfg.neg_alpha)
        neg = _interval_logits(q, nend, labels, C, nweights, Fn.log_weight(cfg.neg_alpha, cfg.neg_beta), values, chunk)
    return Fn.final_logits(clip, pos, neg, cfg.lam), clip, ent


def _shift_all(f: torch.Tensor, cfg: EngineConfig, chunk: int) -> torch.Tensor:
    """Mean shift of every sample toward its k nearest *earlier* raw features, Eq. (9)-(11), by the
    engine's own `mean_shift_step` over a bank stored as the engine stores it (unit rows in
    `bank_dtype`, norms). Row i sees columns [i - bank_size, i) (all earlier ones when the bank is
    unbounded); columns are in stream order, so a tie goes to the earlier sample. Only the
    chunk's own diagonal block (and, bounded, its first columns) needs a mask."""
    n = f.shape[0]
    norms = f.norm(dim=-1)
    bank = Fn.normalize(f).to(getattr(torch, cfg.bank_dtype))
    z = f.clone()
    for a in range(1, n, chunk):
        b = min(n, a + chunk)
        lo = 0 if cfg.bank_size is None else max(0, a - cfg.bank_size)
        bias = torch.zeros(b - a, b - 1 - lo, device=f.device)
        rows = torch.arange(a, b, device=f.device).unsqueeze(1)
        diag = torch.arange(a, b - 1, device=f.device).unsqueeze(0)   # the chunk's own columns
        bias[:, a - lo:].masked_fill_(diag >= rows, float("-inf"))
        if cfg.bank_size is not None and lo < b - 1 - cfg.bank_size:   # columns that left the bank
            old = torch.arange(lo, b - 1 - cfg.bank_size, device=f.device).unsqueeze(0)
            bias[:, :old.shape[1]].masked_fill_(old < rows - cfg.bank_size, float("-inf"))
        q = f[a:b]
        for _ in range(cfg.ms_steps):
            q = Fn.mean_shift_step(q, bank[lo:b - 1], norms[lo:b - 1], None, cfg.k, cfg.alpha, bias, host_ties=True)
        z[a:b] = q
    return z


def _intervals(labels: np.ndarray, h: np.ndarray, capacity: int, num_classes: int, policy: str,
               gate: np.ndarray | None = None) -> np.ndarray:
    """Scan the stream with the engine's slot rules; sample s is cached over [s, end[s])
    (end = -1: never cached; N: still cached at the end)."""
    n = len(labels)
    ent = np.full((num_classes, capacity), np.inf)
    when = np.full((num_classes, capacity), EMPTY_TIME, dtype=np.int64)
    owner = np.full((num_classes, capacity), -1, dtype=np.int64)
    end = np.full(n, -1, dtype=np.int64)
    for t in range(n):
        if gate is not None and not gate[t]:
            continue
        c = labels[t]
        j = fifo_slot(when[c]) if policy == "fifo" else entropy_slot(ent[c], when[c], h[t])
        if j < 0:
            continue
        if owner[c, j] >= 0:
            end[owner[c, j]] = t
        owner[c, j], ent[c, j], when[c, j] = t, h[t], t
        end[t] = n
    return end


def _interval_logits(q: torch.Tensor, end: np.ndarray, labels: np.ndarray, num_classes: int,
                     weights, log_w: float, values: torch.Tensor | None, chunk: int) -> torch.Tensor:
    """Cache logits of every sample with the engine's fused kernel: sum over entries s alive at t
    (s <= t < end[s]) of weight(q_t, q_s) times the entry's value (one-hot of its label, or
    `values[s]`); an entry not alive gets bias -inf, as an empty slot does online. Entries alive
    over the whole chunk share one bias row; only the others get a per-sample mask. [N, C]."""
    n = q.shape[0]
    out = torch.zeros(n, num_classes, device=q.device)
    cached = np.nonzero(end >= 0)[0]
    ends = end[cached]
    lab = torch.as_tensor(labels, device=q.device)
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        live = (cached < b) & (ends > a)
        whole = live & (cached < a) & (ends >= b)
        for s, bias in ((cached[whole], None), (cached[live & ~whole], True)):
            if s.size == 0:
                continue
            idx = torch.as_tensor(s, device=q.device)
            if bias is None:
                bias = torch.full((len(s),), log_w, device=q.device)
            else:
                e = torch.as_tensor(end[s], device=q.device)
                t = torch.arange(a, b, device=q.device).unsqueeze(1)
                bias = torch.where((idx <= t) & (t < e), log_w, float("-inf"))
            w = weights(q[a:b], q[idx], bias)
            if values is None:
                out[a:b].index_add_(1, lab[idx], w)
            else:
                out[a:b] += w @ values[idx]
    return out
