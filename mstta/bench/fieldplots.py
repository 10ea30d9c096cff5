"""The field table's figures: accuracy against ECE (a point per row and text set, one figure per
backbone x dataset) and running accuracy over the stream (the stored order of seed's first run)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .context import row_title
from .paper import dataset_name
from .plots import running_accuracy, save_png
from .results import load_predictions, predictions_path
from .store import slug


def _label(r: dict[str, Any]) -> str:
    return f"{row_title(r['method'])} [{r['text']}]" + (" †" if r.get("label_tuned") else "")


def _pred_name(r: dict[str, Any]) -> str:
    return f"{r['method']}-{r['text']}{'-tuned' if r.get('label_tuned') else ''}"


def field_plots(out: Path, runs: Sequence[dict[str, Any]]) -> list[Path]:
    """Both figures per (backbone, dataset) -> the written paths under <out>/plots/."""
    from matplotlib.figure import Figure

    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        groups[(r["backbone"], r["pretrained"], r["dataset"])].append(r)
    written = []
    for (bb, pre, ds), rs in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        folder = out / "plots" / slug(f"{bb}-{pre}")
        title = f"{dataset_name(ds)} · {bb} ({pre})"
        fig = Figure(figsize=(7, 5))
        ax = fig.add_subplot()
        pts = [r for r in rs if r.get("accuracy") is not None and r.get("ece") is not None]
        for r in pts:
            ax.scatter(r["ece"], r["accuracy"], s=18)
            ax.annotate(_label(r), (r["ece"], r["accuracy"]), fontsize=6, xytext=(3, 2), textcoords="offset points")
        ax.set_xlabel("ECE (%)")
        ax.set_ylabel("top-1 accuracy (%)")
        ax.set_title(f"accuracy vs calibration · {title}")
        ax.grid(alpha=0.3)
        if pts:
            written.append(save_png(fig, folder / f"{slug(dataset_name(ds))}-acc-vs-ece.png"))
        fig = Figure(figsize=(7, 4))
        ax = fig.add_subplot()
        seed = min(r["seed"] for r in rs)
        drawn = 0
        for r in (r for r in rs if r["seed"] == seed):
            pred = load_predictions(predictions_path(out, {**r, "method": _pred_name(r)}))
            if pred is None:
                continue
            curve = running_accuracy(pred["predictions"], pred["labels"])
            ax.plot(np.arange(1, curve.size + 1), curve, lw=1.0, label=f"{_label(r)} ({r['accuracy']:.2f})")
            drawn += 1
        if drawn:
            ax.set_xlabel("test samples seen (stream order)")
            ax.set_ylabel("running top-1 accuracy (%)")
            ax.set_title(f"accuracy over the stream · {title} · seed {seed}")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6, loc="lower right")
            written.append(save_png(fig, folder / f"{slug(dataset_name(ds))}-seed{seed}-stream.png"))
    return written
