"""report.md's efficiency table: each method's measured speed and memory (`efficiency.py`) and its
OOD / cross-dataset averages, beside the paper's efficiency table (ViT-B/16, RTX 3090).
"""

from __future__ import annotations

import statistics
from typing import Any

from . import paper
from .context import row_order
from .reportfmt import DASH, backbone_label, fmt, method_label, stats, table

EFFICIENCY_HEADER = (
    "Method",
    "Backbone",
    "Timed on",
    "FPS",
    "Memory (GB)",
    "OOD Avg",
    "Cross Avg",
    "paper FPS",
    "paper Memory (GB)",
    "paper OOD",
    "paper Cross",
)


def benchmark_averages(by_ds: dict[str, dict[str, list[float]]], method: str) -> list[float | None]:
    """A method's OOD and cross-dataset averages (None where a dataset of the table did not run)."""
    avgs = []
    for cols in (paper.OOD, paper.CROSS):
        s = [stats(by_ds.get(d, {}).get(method, [])) for d in cols]
        avgs.append(statistics.fmean(x[0] for x in s) if all(s) else None)
    return avgs


def efficiency_row(e: dict[str, Any], groups: dict) -> list[str]:
    """One measured method's row: how it was timed, its fps, memory and averages, the paper's."""
    bb, pre, m = e["backbone"], e["pretrained"], e["method"]
    avgs = benchmark_averages(groups.get((bb, pre), {}), m)
    ref = paper.efficiency_row(m) if paper.backbone_key(bb, pre) == "vit_b16" else None
    mem = e.get("peak_memory_mb")
    return [
        method_label(m),
        backbone_label(bb, pre),
        f"{e['dataset']} ({e['views']} view{'s' if e['views'] != 1 else ''}, {e['samples']} samples)",
        fmt(e.get("fps")),
        fmt(mem / 1024 if mem is not None else None),
        fmt(avgs[0]),
        fmt(avgs[1]),
        fmt(ref["fps"]) if ref else DASH,
        fmt(ref["memory_gb"]) if ref else DASH,
        fmt(ref["ood_avg"]) if ref else DASH,
        fmt(ref["cross_avg"]) if ref else DASH,
    ]


def efficiency_notes(measured: list[dict[str, Any]]) -> list[str]:
    """The lines under the table: how FPS and memory were measured and where the views were made."""
    kinds = sorted({f"{e['device']}: {e['memory_kind']}" for e in measured})
    ways = sorted({e["views_made"] for e in measured if e.get("views_made")})
    made = [f"Views made: {'; '.join(ways)} (as `mstta-bench extract` makes them)."] if ways else []
    return [
        "",
        f"FPS: end to end, batch 1 (views + encoder + adaptation step), each method on its own views; one "
        "warm-up pass over every method first, then three rounds timing every method over the same samples "
        "(order rotating); FPS = 1 / the median over samples of each sample's best time. "
        f"Memory: {'; '.join(kinds)}. The paper's numbers are from an RTX 3090 with ViT-B/16.",
    ] + made


def efficiency_table(data: dict[str, Any], groups: dict) -> list[str]:
    """Speed and memory per method (ours) beside the paper's efficiency table (ViT-B/16, RTX 3090)."""
    measured = data.get("efficiency", [])
    order = row_order(e["method"] for e in measured)
    ordered = sorted(measured, key=lambda e: (e["backbone"], e["pretrained"], order.index(e["method"])))
    rows = [efficiency_row(e, groups) for e in ordered]
    if not rows:
        return []
    return table(list(EFFICIENCY_HEADER), rows) + efficiency_notes(measured)
