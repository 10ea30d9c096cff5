"""Forgetting on streams: the `forget` config section, the rules' math as pure functions (each on
host rows and as device tensor ops, as `cache_rules` does), and the resets over a stored stream
(`stream_cuts`; the scene-cut detector itself is `drift.py`).

Rules (docs/engine.md, "Forgetting"):
- `timeliness`: RoTTA's memory score (BIT-DA/RoTTA `core/utils/memory.py:104-105`), applied to
  each class row of a cache: a slot's score `weight * sigma(age / horizon) + H / ln C`, the
  newcomer's `weight * 0.5 + h / ln C`; the highest-scoring slot (empty slots first) is replaced
  only when its score is strictly higher (`memory.py:71-92`). weight = 0 is today's entropy rule.
- `idle`: DynaPrompt's least-recently-used reset (zzzx1224/DynaPrompt `dynap_classification.py:
  137-140, 394-400`), adapted to cache slots (the project's adaptation): a slot is *used* at a
  step when it holds the largest kernel weight of its cache for that step's query; a slot not used
  (nor inserted) for `idle` steps is emptied.
- `periodic`: RDumb's reset (oripress/CCC `models/rdumb.py:50-54`): everything adapted is
  forgotten before every sample whose index is a multiple of `every`.
- `detect`: a reset at a detected scene cut; the detector (`drift.drift_step_t`) is the project's
  design, not a published rule.
A reset empties the caches *and* the mean-shift bank: the stream starts over as after `reset()`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..checks import check, check_int, check_num
from ..errors import UserError
from ..threads import small_ops
from .cache_rules import EMPTY_TIME
from .drift_scan import detect_rows, segment_cut

RULES = ("none", "timeliness", "idle", "periodic")
# The timeliness horizon N (steps) used when `forget.horizon` is unset: chosen by `make streams` on
# the digits (docs/streams.md, "Recommended settings"; 3 seeds): of N in {20, 50, 200}, 50 keeps the most
# of the oracle reset's gain after a cut (MS-TTA 119%, TDA 204%), costs nothing on i.i.d. streams
# (+0.18 / +0.25 points) and is no worse on the return to A; it costs up to 2.8 points on label-correlated orders.
RECOMMENDED_HORIZON = 50
MAX_STEPS = 10_000_000  # horizon, idle, every, warmup: far beyond any stream a run replays
MAX_FORGET_WEIGHT = 1e6  # lambda_t (RoTTA: 1); keeps every score finite in float64
MAX_DETECT_THRESHOLD = 1e6
ADAPTATION = "forgetting rule adapted by this project"  # the mark of a non-published rule


@dataclass
class ForgetConfig:
    """The `forget` section of EngineConfig (`--set forget.rule=timeliness`, YAML `engine: forget:`)."""

    rule: str = "none"  # none (today's semantics), timeliness, idle, periodic
    horizon: int | None = None  # N, steps, of the timeliness score; None = RECOMMENDED_HORIZON
    weight: float = 1.0  # lambda_t of the timeliness score (RoTTA configs/adapter/rotta.yaml: 1)
    idle: int = 1000  # idle rule: steps a slot may go unused before it is emptied
    every: int = 1000  # periodic rule: reset before each sample whose index is a multiple (RDumb: 1000)
    detect: bool = False  # also reset at each detected scene cut (the project's detector)
    # The detector's settings, chosen on the digits streams (docs/streams.md, "detector"):
    detect_rate: float = 0.1  # the EMA rate a of the current scene's mean feature
    detect_threshold: float = 5.0  # a cut: the CUSUM of (z - 1 - slack) above this
    detect_slack: float = 1.0  # the CUSUM's allowance k per step (z ~ 1 on an i.i.d. stream)
    detect_warmup: int = 150  # the reference: the first samples after a reset (none may be a cut)
    detect_ridge: float = 0.01  # r: the reference covariance C + r/d I (unit features: tr C <= 1)

    def __post_init__(self) -> None:
        check(self.rule in RULES, "forget.rule", self.rule, f"one of {', '.join(RULES)}")
        if self.horizon is not None:
            _int(self, "horizon", 1, MAX_STEPS, " or none (the recommended horizon)")
        _num(self, "weight", 0.0, MAX_FORGET_WEIGHT)
        _int(self, "idle", 1, MAX_STEPS)
        _int(self, "every", 1, MAX_STEPS)
        check(isinstance(self.detect, bool), "forget.detect", self.detect, "true or false")
        _num(self, "detect_rate", 0.0, 1.0, low_open=True)
        _num(self, "detect_threshold", 0.0, MAX_DETECT_THRESHOLD, low_open=True)
        _num(self, "detect_slack", 0.0, MAX_DETECT_THRESHOLD)
        _int(self, "detect_warmup", 2, MAX_STEPS)
        _num(self, "detect_ridge", 0.0, 1.0, low_open=True)

    @property
    def steps(self) -> int:
        """The timeliness horizon N in steps (the recommended one when unset)."""
        return self.horizon if self.horizon is not None else RECOMMENDED_HORIZON

    @property
    def active(self) -> bool:
        """Whether anything differs from today's semantics."""
        return self.rule != "none" or self.detect

    @property
    def resets(self) -> bool:
        """Whether whole-state resets can happen (periodic or detected)."""
        return self.rule == "periodic" or self.detect

    @property
    def marks(self) -> list[str]:
        """The notes an output of this setting carries: which parts are the project's adaptation."""
        out = []
        if self.rule == "idle":
            out.append(f"forget.rule=idle: {ADAPTATION} (DynaPrompt's LRU on cache slots)")
        if self.detect:
            out.append(f"forget.detect: {ADAPTATION} (the project's scene-cut detector)")
        return out


def _int(obj: ForgetConfig, key: str, low: int, high: int, extra: str = "") -> None:
    _named(lambda: check_int(obj, key, low, high, extra), key)


def _num(obj: ForgetConfig, key: str, low: float, high: float, low_open: bool = False) -> None:
    _named(lambda: check_num(obj, key, low, high, low_open), key)


def _named(fn, key: str) -> None:
    """Run a check whose message names `key`, so that it names `forget.key` instead."""
    try:
        fn()
    except UserError as exc:
        raise UserError(str(exc).replace(f"'{key}'", f"'forget.{key}'", 1)) from None


# ---------------------------------------------------------------- timeliness (RoTTA's score)
def timeliness_slot(
    row_entropy: list[float],
    row_time: list[int],
    h: float,
    t: int,
    horizon: int,
    weight: float,
    ln_c: float,
    order=None,
) -> int:
    """RoTTA's replacement (`memory.py:71-92`, score `memory.py:104-105`, times ln C so that
    weight = 0 is `entropy_slot` exactly) on one class row at step t: of the highest-scoring slots
    (empty: +inf) the latest inserted (or the last by `order`, a family's own tie rule), if its
    score beats the newcomer's; -1 = not inserted."""
    if math.inf in row_entropy:  # an empty slot scores +inf: the first one (every empty slot has time -1)
        return row_entropy.index(math.inf)
    lt, rate = weight * ln_c, 1 / horizon
    score = [lt * (1 / (1 + math.exp((w - t) * rate))) + e for e, w in zip(row_entropy, row_time)]
    top = max(score)
    if not lt * 0.5 + h < top:  # the newcomer scores at least as high as every slot: not inserted
        return -1
    if score.count(top) == 1:
        return score.index(top)
    return max((i for i, s in enumerate(score) if s == top), key=(row_time if order is None else order).__getitem__)


def timeliness_slot_t(
    row_entropy: torch.Tensor,
    row_time: torch.Tensor,
    h: torch.Tensor,
    clock: torch.Tensor,
    horizon: int,
    weight: float,
    ln_c: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`timeliness_slot` as tensor ops (float64): rows [R, Q], times [R, Q], h [R], clock [R] ->
    (slot [R], inserted [R] bool)."""
    lt = weight * ln_c
    score = torch.sigmoid((clock.unsqueeze(-1) - row_time).double().mul_(1 / horizon)).mul_(lt).add_(row_entropy)
    top = score == score.amax(-1, keepdim=True)
    j = torch.where(top, row_time, EMPTY_TIME - 1).argmax(-1)
    return j, lt * 0.5 + h.double() < score.gather(-1, j.unsqueeze(-1)).squeeze(-1)


# ---------------------------------------------------------------- resets (RDumb; detected cuts)
def periodic_reset(t: int, every: int) -> bool:
    """RDumb's `if total_steps % reset_every == 0` (`models/rdumb.py:50-54`), before sample t (the
    stream's first sample excepted: nothing to forget)."""
    return t > 0 and t % every == 0


def periodic_reset_t(clock: torch.Tensor, every: int) -> torch.Tensor:
    """`periodic_reset` per stream: clock [S] long -> [S] bool."""
    return (clock > 0) & (clock % every == 0)


def stream_cuts(feats: torch.Tensor, cfg: ForgetConfig) -> torch.Tensor:
    """The resets the online engine makes over a whole stream feats [N, V, d] (RDumb's periodic ones,
    the detector's cuts) -> [N] bool (sample t starts a new segment). The replay's segments: everything
    adapted starts over at each. The detector's cuts are its own step's (`drift_scan.segment_cut`: per
    segment between resets, batched on one intra-op thread, stepped where the batched sum comes near
    the threshold)."""
    n = feats.shape[0]
    cut = torch.zeros(n, dtype=torch.bool)
    if cfg.rule == "periodic":
        cut[torch.arange(n) % cfg.every == 0] = True
        cut[0] = False
    if not cfg.detect or n == 0:
        return cut
    x = feats[:, 0].detach()  # the scan's constants are cached, built in any mode: nothing for autograd
    with small_ops(x.device):  # small float64 ops: one intra-op thread on the CPU (mstta.threads)
        u = detect_rows(x)
        edges = [*torch.nonzero(cut).flatten().tolist(), n]
        start = 0
        for end in edges:  # the detector starts over at each periodic reset
            while start < end:
                found, _ = segment_cut(x[start:end], u[start:end], cfg)
                if found is None:
                    break
                cut[start + found] = True
                start += found + 1
            start = end
    return cut
