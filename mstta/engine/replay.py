"""Replay: run a method over a whole stream of precomputed features.

Gives exactly the predictions of feeding the samples one by one to `Engine.step()`, but
vectorised where the semantics allow: everything a sample's cache decision depends on (its
CLIP pseudo-label, entropy, and mean-shifted feature, whose kNN bank holds only earlier raw
features) is known up front. So replay computes those in batches with the engine's own pieces
(`functional.form_queries`, `shift_by_sims`, `cache_weights`, `final_logits`), decides cache
membership with the engine's slot rules in one host-side scan (each cached entry lives over an
interval of the stream), and computes cache logits in chunks over the entries alive in each
chunk. Every batched phase is a list of independent row chunks (`mstta.threads.map_chunks`).
`forget`'s resets (periodic, detected cuts; `forget.stream_cuts`) cut the stream into segments that
replay independently; its timeliness rule is part of the scan; its idle rule, whose expiries read
each step's cache weights, replays chunk after chunk (`mstta.engine.idle_replay`). The boosting
methods' per-sample boosted caches do not decompose this way; they replay online, and so do the
other families without a vectorised `replay` of their own (`mstta.engine.families`), or under a
rule that changes their state step by step (timeliness, idle).
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from ..threads import beside, map_chunks
from . import functional as Fn
from . import fused
from .cache_rules import EMPTY_TIME, entropy_gate, entropy_slot, fifo_slot
from .config import EngineConfig
from .engine import Engine
from .families import get_family, view_aggregator
from .families.base import CACHE
from .families.cache import switches
from .family_runner import check_family_memory, check_forget_rule, check_text_tower
from .forget import stream_cuts, timeliness_slot
from .idle_replay import IdleCache, replay_idle
from .methods import Method, get_method
from .protocol import warn_few_views

SIMS_BYTES = (
    64 * 2**20
)  # similarities of one mean-shift chunk at most (255 rows x the default bank's 65,536 + 254 columns)


@dataclass
class ReplayResult:
    """Per-sample outputs of a replay, all [N] numpy arrays."""

    predictions: np.ndarray  # final prediction
    clip_predictions: np.ndarray  # zero-shot CLIP prediction
    confidence: np.ndarray  # softmax probability of the final prediction
    clip_confidence: np.ndarray  # softmax probability of CLIP's prediction
    entropy: np.ndarray  # CLIP entropy (nats) used by the caches
    seconds: float  # adaptation time, loading excluded
    probs: np.ndarray | None = None  # [N, C] float32, the method's probabilities (`keep_probs=True`)
    cuts: np.ndarray | None = None  # [N] bool: `forget` reset the state before the sample (None: no resets)

    @property
    def samples_per_s(self) -> float:
        return len(self.predictions) / self.seconds if self.seconds > 0 else float("inf")


def replay(
    features: torch.Tensor,
    text: torch.Tensor,
    method: str | Method = "ms-tta",
    config: EngineConfig | None = None,
    device: str | torch.device | None = None,
    online: bool = False,
    chunk: int = 256,
    keep_probs: bool = False,
    text_tower=None,
) -> ReplayResult:
    """Run `method` over `features` [N, d] or [N, V, d] in stream order. `online=True` forces the
    per-sample engine loop (the reference the vectorised path must match); `keep_probs` keeps
    every sample's probabilities ([N, C]: the softmax of the logits, or the family's own).
    `text_tower`: the model's text tower over the classes (`mstta.features.text_tower`; tpt, c-tpt only)."""
    m = get_method(method) if isinstance(method, str) else method
    cfg = config if config is not None else EngineConfig()
    dev = torch.device(device) if device is not None else torch.as_tensor(text).device
    fused.wanted(dev)  # a bad MSTTA_KERNELS is refused before any work, as the engine refuses it
    feats = _as_views(features)
    warn_few_views(m, cfg, feats.shape[1])
    if cfg.view_mode == "original" and not m.boosting_views and m.augment is None:
        feats = feats[:, :1]  # only view 0 is ever read: same predictions, V times less memory
    feats = feats.to(dev)  # kept in its stored dtype; converted to float32 per chunk
    if feats.shape[0] == 0:
        return _empty(m, cfg, torch.as_tensor(text).shape[0], keep_probs)
    t0 = time.perf_counter()
    cuts = None
    with torch.inference_mode():
        if m.family != CACHE:  # another family: its own replay, or its step sample by sample
            *res, cuts = _replay_family(feats, text, m, cfg, dev, online, text_tower)
            out = [_summarise(*res, keep_probs)]
        elif online or steps_online(m, cfg):  # the engine's step: small ops, one thread (mstta.threads)
            logits, clip, ent, cuts = _replay_online(feats, text, m, cfg, dev)
            out = [_summarise(logits, clip, ent, None, keep_probs)]
        else:  # independent row chunks on the pool's one-thread workers (mstta.threads)
            text32 = Fn.normalize(torch.as_tensor(text).to(dev, torch.float32))
            out, cuts = _replay_segments(feats, text32, m, cfg, chunk, keep_probs)
        pred, cpred, pf, pc, ent, *probs = (torch.cat(part).cpu().numpy() for part in zip(*out))
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    seconds = time.perf_counter() - t0
    probs = probs[0].astype(np.float32) if probs else None
    return ReplayResult(pred, cpred, pf, pc, ent, seconds, probs, None if cuts is None else cuts.cpu().numpy())


def _empty(m: Method, cfg: EngineConfig, classes: int, keep_probs: bool) -> ReplayResult:
    """The replay of an empty stream: no row (the rule a family does not define is still refused)."""
    if m.family != CACHE:
        check_forget_rule(m, cfg.forget.rule)
    none = np.zeros(0, dtype=np.int64)
    probs = np.zeros((0, classes), dtype=np.float32) if keep_probs else None
    cuts = np.zeros(0, dtype=bool) if cfg.forget.resets else None
    return ReplayResult(none, none.copy(), *(np.zeros(0, dtype=np.float32) for _ in range(3)), 0.0, probs, cuts)


def _replay_segments(feats, text, m, cfg, chunk, keep_probs):
    """The cache family's row over the stream -> (per chunk, `_summarise`'s tensors; the resets or None).
    The queries do not depend on the state: they are made once over the whole stream. The state starts
    over at each reset `forget` makes (`stream_cuts`), so each segment between them replays
    independently (`_segment_jobs`), and every segment's chunks go to the pool at once. The detector's
    scan, serial host-driven work, runs beside the queries (`mstta.threads.beside`)."""
    find = functools.partial(_segments, feats, cfg.forget)
    segmented = beside(find, feats.device) if cfg.forget.detect else find
    spans, parts = _queries(feats, text, cfg, chunk)
    cuts, segments = segmented()
    jobs = [
        job for a, b in segments for job in _segment_jobs(*_within(spans, parts, a, b), text, m, cfg, chunk, keep_probs)
    ]
    return map_chunks(_call, jobs, feats.device), cuts


def _call(job):
    return job()


def _within(spans: list[tuple[int, int]], parts: list[tuple], a: int, b: int) -> tuple[list, list]:
    """The chunks of `_queries` cut to the segment [a, b): its spans from its start, each part's rows (views)."""
    out_spans, out_parts = [], []
    for (lo, hi), p in zip(spans, parts):
        x, y = max(lo, a), min(hi, b)
        if x < y:
            out_spans.append((x - a, y - a))
            out_parts.append(tuple(t[x - lo : y - lo] for t in p))
    return out_spans, out_parts


def _segments(feats: torch.Tensor, fg) -> tuple[torch.Tensor | None, list[tuple[int, int]]]:
    """The resets `forget` makes over a stream (`stream_cuts`; None where it makes none) and the
    non-empty spans [a, b) between them, each replayed from a fresh state."""
    cuts = stream_cuts(feats, fg) if fg.resets else None
    edges = [0, *([] if cuts is None else torch.nonzero(cuts).flatten().tolist()), feats.shape[0]]
    return cuts, [(a, b) for a, b in zip(edges, edges[1:]) if b > a]


def _replay_family(feats, text, m, cfg, dev, online, tower=None):
    """(scores, clip, H, probs, cuts or None) [N, ...] of a family method: the family's vectorised `replay` where
    it has one, the row has no mean shift (its bank makes every step depend on the last) and `forget`
    only resets (`rule` none or periodic, with or without `detect`: each segment between the resets,
    `stream_cuts`, replays from a fresh state), else its step over the stream (`Engine`, told the
    stream's length)."""
    family = get_family(m.family)
    towered, vectorised = _family_replay(family)
    fg = cfg.forget
    if not online and not steps_online(m, cfg, tower):
        t = torch.as_tensor(text)
        dtype = torch.float64 if t.dtype == torch.float64 else torch.float32
        x, unit = Fn.normalize(feats.to(dtype)), Fn.normalize(t.to(dev, dtype))
        check_family_memory(m, cfg, unit, 1, torch.device(dev))  # the bound `Engine` checks: one for both paths
        extra = (check_text_tower(m, tower, unit.shape[0]),) if towered else ()
        p, n = cfg.family_params(m.family), feats.shape[0]
        length = {"length": n} if getattr(family, "READS_LENGTH", False) else {}  # each reset's init: the whole N
        cuts, spans = _segments(feats, fg)  # n > 0: `replay` answers an empty stream
        outs = [vectorised(x[a:b], unit, p, cfg.logit_scale, *extra, **length) for a, b in spans]
        out = [torch.cat(part) for part in zip(*outs)] if len(outs) > 1 else list(outs[0])
        return out[0], out[1], out[2], out[4], cuts
    engine = Engine(text, m, cfg, device=dev, stream_length=max(1, feats.shape[0]), text_tower=tower)
    rows = [engine.step(x) for x in feats]
    keys = ("logits", "clip_logits", "entropy_tensor", "probs") + (("cut_tensor",) if cfg.forget.resets else ())
    return (*(torch.stack([getattr(r, k) for r in rows]) for k in keys), *(() if cfg.forget.resets else (None,)))


def steps_online(m: Method, cfg: EngineConfig, tower=None) -> bool:
    """Whether `replay` runs `m` under `cfg` by the engine's step, sample by sample: a cache row that
    boosts its views; another family's row with mean shift (its bank makes every step depend on the
    last), without a vectorised `replay` (or a TOWER family's without the tower), or under a
    `forget.rule` that changes its state at every step (timeliness, idle: resets only split the
    stream into segments, each replayed from a fresh state; a READS_LENGTH family's replay takes
    the whole stream's length for each, families/base.py)."""
    if m.family == CACHE:
        return m.boosting_views
    towered, vectorised = _family_replay(get_family(m.family))
    return (
        m.mean_shift or vectorised is None or (towered and tower is None) or cfg.forget.rule not in ("none", "periodic")
    )


def _family_replay(family) -> tuple[bool, object]:
    """(whether the family tunes through the text tower, its vectorised replay or None): a TOWER
    family's is `replay_tower`, which also takes the tower."""
    towered = getattr(family, "TOWER", False)
    return towered, getattr(family, "replay_tower" if towered else "replay", None)


def mean_shifted(
    features: torch.Tensor, text: torch.Tensor, config: EngineConfig | None = None, chunk: int = 256
) -> tuple[torch.Tensor, torch.Tensor]:
    """(f, z) of a whole stream: each sample's query feature (views aggregated per `view_mode`,
    as the engine does) and its mean-shifted embedding, Eq. (9)-(11). [N, d] each."""
    cfg = config if config is not None else EngineConfig()
    feats = _as_views(features)
    t = Fn.normalize(torch.as_tensor(text).to(feats.device, torch.float32))
    with torch.inference_mode():
        f = torch.cat([p[0] for p in _queries(feats, t, cfg, chunk)[1]])
        return f, _shift_all(f, cfg, chunk)


def _as_views(features) -> torch.Tensor:
    feats = torch.as_tensor(features)
    return feats.unsqueeze(1) if feats.dim() == 2 else feats


def _summarise(
    logits: torch.Tensor,
    clip: torch.Tensor,
    ent: torch.Tensor,
    probs: torch.Tensor | None = None,
    keep_probs: bool = False,
):
    """(prediction, CLIP prediction, the probability of each, entropy[, probabilities]) of a run of
    samples: the prediction is the argmax of the logits, its probability from `probs` (the
    method's own) or the softmax of the logits."""
    p = torch.softmax(logits.float(), -1) if probs is None else probs.float()
    pred = logits.argmax(-1)
    pf = p.gather(-1, pred.unsqueeze(-1)).squeeze(-1)
    pc, cpred = torch.softmax(clip.float(), -1).max(-1)
    return (pred, cpred, pf, pc, ent.float(), p) if keep_probs else (pred, cpred, pf, pc, ent.float())


def _replay_online(feats, text, m, cfg, dev):
    engine = Engine(text, m, cfg, device=dev)
    logits, clip, ent, cut = [], [], [], []
    for x in feats:
        r = engine.step(x)
        logits.append(r.logits)
        clip.append(r.clip_logits)
        ent.append(r.entropy_tensor)
        cut.append(r.cut_tensor)
    cuts = torch.stack(cut) if cfg.forget.resets and cut else None
    return torch.stack(logits), torch.stack(clip), torch.stack(ent), cuts


def _spans(n: int, chunk: int, start: int = 0) -> list[tuple[int, int]]:
    return [(a, min(n, a + chunk)) for a in range(start, n, chunk)]


def _queries(feats: torch.Tensor, text: torch.Tensor, cfg: EngineConfig, chunk: int, rows: int = 16384):
    """The engine's own `form_queries` over chunks of at most `chunk` samples and `rows` views
    (converted to float32 per chunk), with each sample's pseudo-label: (spans, per chunk
    (f, clip, H, probs, label)). The [n, C] outputs stay per chunk (no copy of the whole)."""
    size = max(1, min(chunk, rows // feats.shape[1]))
    spans = _spans(feats.shape[0], size)

    aggregate = view_aggregator(cfg.view_mode, getattr(cfg, cfg.view_mode, None))

    def one(ab):
        out = Fn.form_queries(feats[ab[0] : ab[1]], text, cfg.logit_scale, cfg.view_mode, cfg.view_ratio, aggregate)
        return (*out, out[1].argmax(-1))

    return spans, map_chunks(one, spans, feats.device)


def _segment_jobs(spans, parts, text, m, cfg, chunk, keep_probs=False) -> list:
    """Per chunk of a segment whose state starts empty (its `_queries` spans and parts), a function of
    nothing giving `_summarise`'s tensors: the cache family's row `m` (its switches), with the family's
    `Params` and the runner's settings of `cfg`. The mean shift and the slot scan run now; under the
    idle rule the whole chain does (`replay_idle`)."""
    f, ent, lab = (torch.cat([p[i] for p in parts]) for i in (0, 2, 4))
    sw, cp = switches(m), cfg.family_params(CACHE)
    if not sw.cache:
        return [functools.partial(_summarise, p[1], p[1], p[2], None, keep_probs) for p in parts]
    C = text.shape[0]
    q = _shift_all(f, cfg, chunk) if m.mean_shift else f
    labels = lab.cpu().numpy()
    h = ent.cpu().numpy().astype(np.float64)

    fg = cfg.forget
    weights = lambda qq, kk, bias: Fn.cache_weights(qq, kk, bias, cp.beta, cp.kernel, cp.cache_alpha)
    caches = [(cp.capacity, "entropy", None, weights, Fn.log_weight(cp.cache_alpha, cp.beta), None)]
    if sw.negative:
        gate = [entropy_gate(v, C, cp.neg_entropy_lower, cp.neg_entropy_upper) for v in h.tolist()]
        values = torch.cat([Fn.negative_mask(p[3], cp.neg_mask_lower, cp.neg_mask_upper) for p in parts])
        nweights = lambda qq, kk, bias: Fn.cache_weights(qq, kk, bias, cp.neg_beta, "exp", cp.neg_alpha)
        caches.append(
            (cp.neg_capacity, sw.neg_policy, gate, nweights, Fn.log_weight(cp.neg_alpha, cp.neg_beta), values)
        )

    def final(i, pos_logits, neg_logits):
        (a, b), clip = spans[i], parts[i][1]
        return _summarise(Fn.final_logits(clip, pos_logits, neg_logits, cp.lam), clip, ent[a:b], None, keep_probs)

    if fg.rule == "idle":  # each chunk's entries depend on the last chunk's uses: chunks in turn
        idle = [IdleCache(labels, lab, h, Q, C, pol, g, fg.idle, w, lw, v) for Q, pol, g, w, lw, v in caches]
        done = replay_idle(idle, q, spans, lambda i, logits: final(i, *logits, *([None] * (2 - len(logits)))))
        return [lambda r=r: r for r in done]
    tl = (fg.steps, fg.weight) if fg.rule == "timeliness" else None
    entries = [_Entries(_intervals(labels, h, Q, C, pol, g, tl), lab, w, lw, v) for Q, pol, g, w, lw, v in caches]

    def run(i):
        a, b = spans[i]
        return final(i, *(e.logits(q, a, b, C) for e in entries), *([None] * (2 - len(entries))))

    return [functools.partial(run, i) for i in range(len(spans))]


def _shift_all(f: torch.Tensor, cfg: EngineConfig, chunk: int) -> torch.Tensor:
    """Mean shift of every sample toward its k nearest *earlier* raw features, Eq. (9)-(11), by the
    engine's own `shift_by_sims` over a bank stored as the engine stores it (unit rows in
    `bank_dtype`, norms), in chunks of rows whose similarities fit `SIMS_BYTES`. Row i sees
    columns [i - bank_size, i) (all earlier ones when the bank is unbounded); columns are in
    stream order, so a tie goes to the earlier sample. Only the chunk's own diagonal block (and,
    bounded, its first columns) is masked, in place."""
    n = f.shape[0]
    norms = f.norm(dim=-1)
    bank = Fn.normalize(f).to(getattr(torch, cfg.bank_dtype))

    def shift(ab):
        a, b = ab
        lo = 0 if cfg.bank_size is None else max(0, a - cfg.bank_size)
        rows = torch.arange(a, b, device=f.device).unsqueeze(1)
        diag = torch.arange(a, b - 1, device=f.device).unsqueeze(0)  # the chunk's own columns
        q = f[a:b]
        for _ in range(cfg.ms_steps):
            sims = Fn.similarities(q, bank[lo : b - 1])
            sims[:, a - lo :].masked_fill_(diag >= rows, float("-inf"))
            if cfg.bank_size is not None and lo < b - 1 - cfg.bank_size:  # columns that left the bank
                old = torch.arange(lo, b - 1 - cfg.bank_size, device=f.device).unsqueeze(0)
                sims[:, : old.shape[1]].masked_fill_(old < rows - cfg.bank_size, float("-inf"))
            q = Fn.shift_by_sims(q, sims, bank[lo : b - 1], norms[lo : b - 1], None, cfg.k, cfg.alpha, host_ties=True)
        return q

    cols = n - 1 if cfg.bank_size is None else min(n - 1, cfg.bank_size + chunk - 1)  # a chunk's most columns
    rows = max(1, min(chunk, SIMS_BYTES // (4 * max(1, cols))))  # so its sims stay within SIMS_BYTES
    spans = _spans(n, rows, start=1)[::-1]  # the last chunks see the most columns: first
    return torch.cat([f[:1], *map_chunks(shift, spans, f.device)[::-1]])


def _intervals(
    labels: np.ndarray,
    h: np.ndarray,
    capacity: int,
    num_classes: int,
    policy: str,
    gate: list[bool] | None = None,
    timeliness: tuple[int, float] | None = None,
) -> np.ndarray:
    """Scan the stream with the engine's slot rules (RoTTA's timeliness score where `timeliness` =
    (horizon, weight), `mstta.engine.forget`); sample s is cached over [s, end[s]) (end = -1: never
    cached; N: still cached at the end). Plain Python lists: Q slots per class."""
    ln_c = math.log(num_classes)
    n = len(labels)
    ent = [[math.inf] * capacity for _ in range(num_classes)]
    when = [[EMPTY_TIME] * capacity for _ in range(num_classes)]
    owner = [[-1] * capacity for _ in range(num_classes)]
    end = [-1] * n
    for t, (c, ht) in enumerate(zip(labels.tolist(), h.tolist())):
        if gate is not None and not gate[t]:
            continue
        row_ent, row_when, row_owner = ent[c], when[c], owner[c]
        if policy == "fifo":
            j = fifo_slot(row_when)
        elif timeliness is None and not ht < max(row_ent):  # `entropy_slot`'s refusal, its common case
            continue
        elif math.inf in row_ent:  # an empty slot: the first, by either rule (every empty slot has EMPTY_TIME)
            j = row_ent.index(math.inf)
        elif timeliness is not None:
            j = timeliness_slot(row_ent, row_when, ht, t, *timeliness, ln_c)
        else:
            j = entropy_slot(row_ent, row_when, ht)
        if j < 0:
            continue
        if row_owner[j] >= 0:
            end[row_owner[j]] = t
        row_owner[j], row_ent[j], row_when[j] = t, ht, t
        end[t] = n
    return np.asarray(end, dtype=np.int64)


class _Entries:
    """One cache over the whole stream: entry s (a cached sample) is alive over [s, end[s]) with
    the value one-hot(label[s]) or `values[s]`."""

    def __init__(self, end: np.ndarray, labels: torch.Tensor, weights, log_w: float, values: torch.Tensor | None):
        self.end, self.labels, self.weights, self.log_w, self.values = end, labels, weights, log_w, values
        self.cached = np.nonzero(end >= 0)[0]
        self.ends = end[self.cached]

    def logits(self, q: torch.Tensor, a: int, b: int, num_classes: int) -> torch.Tensor:
        """Cache logits of samples [a, b) with the engine's fused kernel: sum over entries s alive
        at t (s <= t < end[s]) of weight(q_t, q_s) times the entry's value; an entry not alive gets
        bias -inf, as an empty slot does online. Entries alive over the whole chunk share one bias
        row; only the others get a per-sample mask. [b - a, C]."""
        out = torch.zeros(b - a, num_classes, device=q.device)
        live = (self.cached < b) & (self.ends > a)
        whole = live & (self.cached < a) & (self.ends >= b)
        for s, bias in ((self.cached[whole], None), (self.cached[live & ~whole], True)):
            if s.size == 0:
                continue
            idx = torch.as_tensor(s, device=q.device)
            if bias is None:
                bias = torch.full((len(s),), self.log_w, device=q.device)
            else:
                e = torch.as_tensor(self.end[s], device=q.device)
                t = torch.arange(a, b, device=q.device).unsqueeze(1)
                bias = torch.where((idx <= t) & (t < e), self.log_w, float("-inf"))
            w = self.weights(q[a:b], q[idx], bias)
            if self.values is None:
                out.index_add_(1, self.labels[idx], w)
            else:
                out += w @ self.values[idx]
        return out
