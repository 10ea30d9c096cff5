"""How `mstta-bench streams` runs one arm of one method on one stream (docs/streams.md, "Time"), with
the predictions of stepping the engine sample by sample and less work:

- a reset splits a stream into independent pieces (the state starts over as after `reset()`), so
  the oracle replays each true segment and a resetting arm (periodic, detect) each piece between
  the resets the engine makes (`forget.stream_cuts`, the engine's own ops), with the rest of the
  arm's rule: the cache family's vectorised replay where the rule allows;
- those resets are computed once per stream and setting (`Shared.cuts`), not once per method;
- every run from an empty state (a whole stream, a segment, a piece between resets) is made once
  per method, config and sample order (`Shared.piece`): the oracle on a one-segment stream is
  never forgetting's run, the oracle's scenes are shared by the cut, return and chain streams of a
  seed, a resetting arm's first piece is never forgetting's;
- a step depends only on the samples before it, so where a run steps online, a run over the first
  steps of one made before (the cut A -> B of a seed and its return A -> B -> A: the same shuffles;
  the oracle's lead-in and never forgetting's) is read from it instead of stepped again (the orders
  compared, not assumed).
A family whose state reads the stream's length (OnZeta's schedule, `families/onzeta.py`, `init`)
is neither split at its resets nor read from a longer run: its resetting arms step the whole
stream, as the engine does.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch

from ..engine import functional as Fn
from ..engine.config import EngineConfig
from ..engine.engine import Engine
from ..engine.families import get_family
from ..engine.families.base import CACHE
from ..engine.forget import stream_cuts
from ..engine.methods import Method, get_method
from ..engine.replay import replay, steps_online
from . import streammetrics as SM
from .streamorders import Stream

ORACLE = "oracle"


@dataclass
class Outcome:
    """One arm on one stream: per-step correctness, the stale share after each step (NaN where not
    measured) and the steps where the engine detected a cut."""

    correct: np.ndarray
    stale: np.ndarray
    detected: np.ndarray

    def head(self, n: int) -> Outcome:
        """The first n steps (a stream's prefix)."""
        return Outcome(self.correct[:n], self.stale[:n], self.detected[self.detected < n])


def without_resets(cfg: EngineConfig) -> EngineConfig:
    """The arm's config less its resets (periodic, detect): what each piece between resets runs."""
    fg = cfg.forget
    inner = dataclasses.replace(fg, rule="none" if fg.rule == "periodic" else fg.rule, detect=False)
    return dataclasses.replace(cfg, forget=inner)


def _pieces(edges: list[int], n: int) -> list[tuple[int, int]]:
    cuts = [0, *edges, n]
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


@dataclass
class Shared:
    """What every arm of one run share: the domains' features, their text classifier, per stream and
    setting the resets the engine makes (`cuts`, filled ahead by `streamjobs` or on first use), and
    per method and config the runs made so far (`piece`)."""

    features: torch.Tensor
    labels: np.ndarray
    text: torch.Tensor
    memo: dict = field(default_factory=dict)
    runs: dict = field(default_factory=dict)

    def inputs(self, stream: Stream) -> tuple[torch.Tensor, np.ndarray]:
        return self.features[torch.as_tensor(stream.order)], self.labels[stream.order]

    def cuts(self, key, stream: Stream, cfg: EngineConfig) -> np.ndarray:
        """The steps where the engine resets the state over a stream (`stream_cuts`), once per stream
        `key` and setting (`reset_setting`)."""
        got = self.memo.get((key, reset_setting(cfg)))
        if got is None:
            got = self.memo[(key, reset_setting(cfg))] = cuts_of(self.features, stream, cfg)
        return got

    def replayed(self, x, m: Method, cfg: EngineConfig, labels: np.ndarray) -> Outcome:
        """One piece from an empty state, by replay (vectorised where it can be)."""
        r = replay(x, self.text, m, cfg, device="cpu")
        cuts = getattr(r, "cuts", None)
        detected = np.flatnonzero(np.asarray(cuts)) if cuts is not None else np.zeros(0, np.int64)
        return Outcome(r.predictions == labels, np.full(len(labels), np.nan), detected)

    def piece(self, order: np.ndarray, m: Method, cfg: EngineConfig) -> Outcome:
        """A run from an empty state over the pooled samples `order`: made once per method, config and
        order; where it steps online (`derivable`), read from the first steps of a longer run made
        before whose order starts with this one."""
        runs = self.runs.setdefault((m.name, repr(cfg)), {})
        key = np.ascontiguousarray(order, dtype=np.int64).tobytes()
        got = runs.get(key)
        if got is None and derivable(m, cfg):
            got = next((o.head(len(order)) for k, o in runs.items() if len(k) > len(key) and k.startswith(key)), None)
        if got is None:
            got = self.replayed(self.features[torch.as_tensor(order)], m, cfg, self.labels[order])
        runs[key] = got
        return got

    def run_arm(self, key, stream: Stream, method: str, arm: str, cfg: EngineConfig, stale: bool = False) -> Outcome:
        """One arm of one method on one stream: the oracle and a resetting arm as independent pieces,
        `stale`: stepped online to read the positive cache's stale share (cache family, with cuts)."""
        m = get_method(method)
        n = len(stream.order)
        if arm == ORACLE:
            pieces, detected = stream.segments(), np.zeros(0, np.int64)
        elif stale and m.keeps_cache and len(stream.starts) > 1:
            x, labels = self.inputs(stream)
            return online_stale(x, self.text, m, cfg, stream, labels)
        elif cfg.forget.resets and not reads_length(m):
            detected = self.cuts(key, stream, cfg)
            pieces, cfg = _pieces(detected.tolist(), n), without_resets(cfg)
        else:
            return self.piece(stream.order, m, cfg)
        parts = [self.piece(stream.order[a:b], m, cfg) for a, b in pieces]
        stale_out = np.full(n, np.nan)
        if arm == ORACLE and m.keeps_cache and len(pieces) > 1:
            stale_out = np.zeros(n)
            stale_out[: pieces[0][1]] = np.nan
        return Outcome(np.concatenate([p.correct for p in parts]), stale_out, detected)


def reset_setting(cfg: EngineConfig) -> tuple:
    """What the engine's resets depend on: the periodic rule's `every` and the detector's settings."""
    fg = cfg.forget
    return (fg.rule == "periodic" and fg.every, *(getattr(fg, k) for k in vars(fg) if k.startswith("detect")))


def cuts_of(features: torch.Tensor, stream: Stream, cfg: EngineConfig) -> np.ndarray:
    """The steps where the engine resets its state over a stream (`forget.stream_cuts`, its own ops)."""
    return np.flatnonzero(stream_cuts(features[torch.as_tensor(stream.order)], cfg.forget).numpy())


def online_stale(x, text, m: Method, ecfg: EngineConfig, stream: Stream, labels: np.ndarray) -> Outcome:
    """Step the engine sample by sample, reading after each step after the first cut the positive
    cache's stale share: each live slot's read-out weight for the step's query
    (`functional.cache_weights`, Eq. 3), split by insertion step (`Engine.cache_times`)."""
    eng = Engine(text, m, ecfg, device="cpu")
    n = len(stream.order)
    correct, stale, detected = np.zeros(n, bool), np.full(n, np.nan), []
    starts = np.asarray(stream.starts)
    for t in range(n):
        r = eng.step(x[t])
        correct[t] = r.prediction == labels[t]
        if bool(getattr(r, "cut", False)):
            detected.append(t)
        last = int(starts[starts <= t][-1])
        if last == 0 or eng.pos is None:
            continue
        w = Fn.cache_weights(
            r.feature[None], eng.pos.keys[0], eng.pos.bias[0], ecfg.beta, ecfg.kernel, ecfg.cache_alpha
        )
        stale[t] = SM.stale_share(w[0].cpu().numpy(), eng.cache_times().reshape(-1), last)
    return Outcome(correct, stale, np.asarray(detected, dtype=np.int64))


def derivable(m: Method, cfg: EngineConfig) -> bool:
    """Whether a run (no resets: a piece) over a prefix of an order is the longer run's first steps and
    worth reading from it: it steps online (the vectorised paths are cheap, and only the per-sample
    step is a function of the past alone by construction) and its family does not read the stream's length."""
    return steps_online(m, cfg) and not reads_length(m)


def reads_length(m: Method) -> bool:
    """Its family's `init` reads the stream's length (`READS_LENGTH`, OnZeta's schedule): a piece of the
    stream, or its prefix, is not the same run."""
    return m.family != CACHE and getattr(get_family(m.family), "READS_LENGTH", False)
