"""The summary rows of `mstta-bench streams` (docs/streams.md, "Report"): per method and arm, the
records of `streamrun` averaged over seeds and streams. Pure functions of the records and curves."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from . import streammetrics as SM

GOALS = {"gain_recovered": 90.0, "iid_cost": 0.2, "delay": 30, "false_per_10k": 1.0}  # issue 29's goals


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None and np.isfinite(x)]
    return float(np.mean(xs)) if xs else None


def by(records: list[dict], *keys: str) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        out[tuple(r[k] for k in keys)].append(r)
    return out


def mean_curve(curves: dict[str, dict], key: str) -> tuple[np.ndarray, int] | None:
    """The seed-mean windowed curve of a key and its steps before the cut (`streamrun` stores both)."""
    got = curves.get(key)
    if not got or not got["seeds"]:
        return None
    n = min(len(c) for c in got["seeds"])
    return np.mean([c[:n] for c in got["seeds"]], axis=0), int(got["pre"])


def recovery_steps(curves, kind: str, stream: str, method: str, arm: str, cut: int, hold: int):
    """Recovery (steps) of one cut on the seed-mean curves: the arm's post-cut curve against the oracle's."""
    a = mean_curve(curves, "|".join((kind, stream, method, arm, str(cut))))
    o = mean_curve(curves, "|".join((kind, stream, method, "oracle", str(cut))))
    if a is None or o is None:
        return None
    (ca, pre), (co, _) = a, o
    n = min(len(ca), len(co))
    return SM.recovery(ca[pre:n], co[pre:n], 1.0, hold)


def scene_rows(records: list[dict], curves: dict, kind: str, hold: int) -> list[dict[str, Any]]:
    """Per method and arm on one scene kind: accuracy per segment, the gain over never forgetting on
    the segments after a cut, the share of the oracle's gain kept, regret, recovery, stale share."""
    recs = [r for r in records if r["kind"] == kind]
    zs = {(r["stream"], r["seed"]): r for r in recs if r["arm"] == "zero-shot"}
    rows = []
    for (method, arm), group in by(recs, "method", "arm").items():
        if arm == "zero-shot":
            continue
        never = {(r["stream"], r["seed"]): r for r in recs if r["method"] == method and r["arm"] == "never"}
        oracle = {(r["stream"], r["seed"]): r for r in recs if r["method"] == method and r["arm"] == "oracle"}
        segs = np.array([r["segments"] for r in group], dtype=float)
        after = [_mean(r["segments"][1:]) for r in group]
        after_never = [_mean(never[(r["stream"], r["seed"])]["segments"][1:]) for r in group]
        after_oracle = [_mean(oracle[(r["stream"], r["seed"])]["segments"][1:]) for r in group]
        after_zs = [
            _mean(zs[(r["stream"], r["seed"])]["segments"][1:]) for r in group if (r["stream"], r["seed"]) in zs
        ]
        streams = sorted({r["stream"] for r in group})
        n_cuts = len(group[0]["starts"]) - 1
        rec = [recovery_steps(curves, kind, s, method, arm, i, hold) for s in streams for i in range(n_cuts)]
        rows.append(
            {
                "kind": kind,
                "method": method,
                "arm": arm,
                "segments": [float(x) for x in np.nanmean(segs, axis=0)],
                "after": _mean(after),
                "gain_over_clip": None if not after_zs else _mean(after) - _mean(after_zs),
                "vs_never": _mean(after) - _mean(after_never),
                "gain_recovered": SM.gain_recovered(_mean(after), _mean(after_never), _mean(after_oracle)),
                "regret": _mean([x for r in group for x in r["regret"]]),
                "recovery": _mean([x if x is not None else np.nan for x in rec]),
                "not_recovered": sum(x is None for x in rec),
                "stale": _mean([x for r in group for x in r["stale"]]),
                "seeds": len({r["seed"] for r in group}),
                "streams": len(streams),
            }
        )
    return rows


def order_rows(records: list[dict]) -> list[dict[str, Any]]:
    """Per method and arm on the streams without a cut: accuracy per kind (mean over domains and
    seeds), the i.i.d. cost against never forgetting, false cuts per 10,000 steps."""
    recs = [r for r in records if len(r["starts"]) == 1]
    rows = []
    for (method, arm), group in by(recs, "method", "arm").items():
        acc = {k: _mean([r["accuracy"] for r in g]) for (k,), g in by(group, "kind").items()}
        never = [r["accuracy"] for r in recs if r["method"] == method and r["arm"] == "never" and r["kind"] == "iid"]
        steps = sum(r["n"] for r in group)
        false = sum(r["false_cuts"] for r in group)
        rows.append(
            {
                "method": method,
                "arm": arm,
                "accuracy": acc,
                "iid_cost": None if acc.get("iid") is None or not never else _mean(never) - acc["iid"],
                "false_cuts": false,
                "steps": steps,
                "false_per_10k": 1e4 * false / steps if steps else None,
            }
        )
    return rows


def detector_rows(records: list[dict]) -> list[dict[str, Any]]:
    """Per method and arm that detected anything: delay over the true cuts found, cuts missed, false
    cuts per 10,000 steps on scene streams, on i.i.d. streams and on label-correlated ones."""
    rows = []
    for (method, arm), group in by(records, "method", "arm").items():
        if arm in ("oracle", "zero-shot") or not any(r["detected"] for r in group):
            continue
        delays = [d for r in group for d in r["delays"]]
        rows.append(
            {
                "method": method,
                "arm": arm,
                "delay": _mean([d for d in delays if d is not None]),
                "found": sum(d is not None for d in delays),
                "cuts": len(delays),
                "false_per_10k_scenes": _rate([r for r in group if len(r["starts"]) > 1]),
                "false_per_10k_iid": _rate([r for r in group if r["kind"] == "iid"]),
                "false_per_10k_correlated": _rate([r for r in group if len(r["starts"]) == 1 and r["kind"] != "iid"]),
            }
        )
    return rows


def _rate(group: list[dict]) -> float | None:
    steps = sum(r["n"] for r in group)
    return 1e4 * sum(r["false_cuts"] for r in group) / steps if steps else None


def summarise(result: dict[str, Any], window: int) -> dict[str, Any]:
    """Every table of the report, from `run_streams`'s records and curves."""
    records, curves = result["records"], result["curves"]
    kinds = sorted({r["kind"] for r in records if len(r["starts"]) > 1})
    return {
        "scenes": {k: scene_rows(records, curves, k, window) for k in kinds},
        "orders": order_rows(records),
        "detector": detector_rows(records),
    }
