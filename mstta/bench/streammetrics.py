"""The metrics of `mstta-bench streams` (docs/streams.md, "Metrics"), pure functions of per-step
correctness (bool [N]), segment starts and detected cuts; accuracies in percent. The protocol is
the project's (shared/reference/streams-and-tpt.md §1.5): windowed accuracy around a cut, recovery
against the oracle reset, post-cut regret, the stale share of the positive cache, the detector's
delay and false cuts."""

from __future__ import annotations

import numpy as np

NOT_RECOVERED = None  # recovery() when the arm never gets (and stays) within tolerance


def segment_accuracy(correct: np.ndarray, starts: tuple[int, ...]) -> list[float]:
    """Accuracy (%) of every segment [starts[i], starts[i+1])."""
    c = np.asarray(correct, dtype=np.float64)
    ends = (*starts[1:], len(c))
    return [float(100 * c[a:b].mean()) if b > a else float("nan") for a, b in zip(starts, ends)]


def windowed(correct: np.ndarray, start: int, end: int, window: int) -> np.ndarray:
    """Trailing windowed accuracy (%) at every step t of [start, end): the mean correctness of steps
    [max(start, t - window + 1), t] (the window never reaches back across `start`)."""
    c = np.asarray(correct[start:end], dtype=np.float64)
    csum = np.concatenate([[0.0], np.cumsum(c)])
    t = np.arange(len(c))
    lo = np.maximum(0, t - window + 1)
    return 100 * (csum[t + 1] - csum[lo]) / (t + 1 - lo)


def curve(correct: np.ndarray, cut: int, before: int, after: int, window: int, since: int = 0) -> np.ndarray:
    """The windowed accuracy (%) around a cut: the last `before` steps of the previous segment (which
    starts at `since`), then `after` steps from the cut; the window restarts at each segment start,
    so no point mixes two scenes."""
    lo = max(since, cut - before)
    pre = windowed(correct, since, cut, window)[lo - cut :] if cut > since else np.zeros(0)
    post = windowed(correct, cut, min(len(correct), cut + after), window)
    return np.concatenate([pre, post])


def recovery(arm: np.ndarray, oracle: np.ndarray, tol: float = 1.0, hold: int = 1) -> int | None:
    """Steps after a cut until the arm's windowed accuracy is within `tol` points of the oracle's
    and stays so for `hold` steps (or to the end): the first t with arm[t:t+hold] >= oracle[t:t+hold]
    - tol everywhere; None when no such t exists. arm, oracle: post-cut curves of equal length."""
    ok = np.asarray(arm) >= np.asarray(oracle) - tol
    n = len(ok)
    for t in range(n):
        if ok[t : min(n, t + hold)].all():
            return t
    return NOT_RECOVERED


def regret(arm: np.ndarray, oracle: np.ndarray, cut: int, steps: int, end: int | None = None) -> float:
    """Post-cut regret (points): the oracle's accuracy minus the arm's over the first `steps` steps
    from the cut (to `end` at most). arm, oracle: per-step correctness of the whole stream."""
    stop = min(cut + steps, len(arm) if end is None else end)
    a = np.asarray(arm[cut:stop], dtype=np.float64)
    o = np.asarray(oracle[cut:stop], dtype=np.float64)
    return float(100 * (o.mean() - a.mean())) if len(a) else float("nan")


def gain_recovered(arm: float, never: float, oracle: float) -> float | None:
    """The share (%) of the oracle reset's gain over never forgetting that an arm keeps:
    100 (arm - never) / (oracle - never); None when the oracle gains nothing (no gain to recover)."""
    gap = oracle - never
    return None if not np.isfinite(gap) or abs(gap) < 1e-9 else float(100 * (arm - never) / gap)


def stale_share(weights: np.ndarray, times: np.ndarray, last_cut: int) -> float:
    """The share of the positive cache's read-out weight for one query that comes from entries
    inserted before `last_cut` (insertion step < last_cut; empty slots (time -1) carry no weight).
    weights, times: [E] per slot; 0 when the cache gives no weight."""
    w = np.where(np.asarray(times) >= 0, np.asarray(weights, dtype=np.float64), 0.0)
    total = w.sum()
    if not total > 0:
        return 0.0
    return float(w[np.asarray(times) < last_cut].sum() / total)


def detections(detected: np.ndarray, cuts: tuple[int, ...], n: int, within: int) -> dict[str, object]:
    """Match detected cut steps to true cuts: a true cut is found by the first detection in
    [cut, cut + within) (and before the next true cut); its delay is that step minus the cut. Every
    other detection is false. Returns delays ([None] for a missed cut), false count, and false cuts
    per 10,000 steps of the stream."""
    det = sorted(int(d) for d in np.asarray(detected).ravel())
    used: set[int] = set()
    delays: list[int | None] = []
    bounds = (*cuts[1:], n)
    for cut, nxt in zip(cuts, bounds):
        hit = next((d for d in det if cut <= d < min(cut + within, nxt) and d not in used), None)
        delays.append(None if hit is None else hit - cut)
        if hit is not None:
            used.add(hit)
    false = len([d for d in det if d not in used])
    return {"delays": delays, "false": false, "false_per_10k": float(1e4 * false / n) if n else float("nan")}
