"""Figures (PNG, matplotlib without pyplot): accuracy over the stream per method, and the
paper's t-SNE of CLIP vs mean-shifted embeddings.

The t-SNE draws `mstta.engine.replay.mean_shifted(features, text, config)`: the embeddings z that MS-TTA
caches (the engine's view aggregation and kNN mean shift toward earlier raw features).
"""

from __future__ import annotations

import io
import logging
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from ..atomic import atomic_open
from ..engine.config import EngineConfig
from ..engine.replay import mean_shifted
from ..errors import UserError
from . import paper
from .context import row_order, row_title
from .results import load_predictions, predictions_path
from .store import slug

log = logging.getLogger(__name__)


def save_png(fig, path: Path) -> Path:
    """Render a figure to PNG and write it atomically."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    with atomic_open(path, "wb") as fh:
        fh.write(buf.getvalue())
    return path


def running_accuracy(predictions: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Accuracy (%) of the first i labelled samples, for i = 1..n. [N] -> [n]."""
    known = labels >= 0
    correct = (predictions[known] == labels[known]).astype(np.float64)
    return 100 * np.cumsum(correct) / np.arange(1, correct.size + 1)


def accuracy_curves(out: Path, runs: Sequence[dict[str, Any]]) -> list[Path]:
    """One PNG per (backbone, dataset, seed): running accuracy vs sample index, a line per method.
    -> the written paths (`<out>/plots/<backbone>/<dataset>-seed<S>.png`)."""
    from matplotlib.figure import Figure

    groups: dict = defaultdict(list)
    for r in runs:
        groups[(r["backbone"], r["pretrained"], r["dataset"], r["seed"])].append(r)
    written = []
    for (bb, pre, ds, seed), cell_runs in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        fig = Figure(figsize=(7, 4))
        ax = fig.add_subplot()
        drawn = 0
        order = row_order(r["method"] for r in cell_runs)
        for r in sorted(cell_runs, key=lambda r: order.index(r["method"])):
            pred = load_predictions(predictions_path(out, r))
            if pred is None:
                continue
            curve = running_accuracy(pred["predictions"], pred["labels"])
            ax.plot(
                np.arange(1, curve.size + 1), curve, lw=1.2, label=f"{row_title(r['method'])} ({r['accuracy']:.2f})"
            )
            drawn += 1
        if not drawn:
            continue
        ax.set_xlabel("test samples seen (stream order)")
        ax.set_ylabel("running top-1 accuracy (%)")
        ax.set_title(f"{paper.dataset_label(ds)} · {bb} ({pre}) · seed {seed}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
        written.append(save_png(fig, out / "plots" / slug(f"{bb}-{pre}") / f"{slug(ds)}-seed{seed}.png"))
    return written


# ---------------------------------------------------------------------- t-SNE
def pick_classes(
    labels: np.ndarray, num_classes: int, count: int, class_ids: Sequence[int] | None, seed: int
) -> list[int]:
    """The classes to draw: `class_ids` as given, else `count` random classes present in the
    stream (seeded), or all classes for count 0."""
    present = sorted(set(int(c) for c in labels[labels >= 0]))
    if class_ids:
        bad = [c for c in class_ids if c not in present]
        if bad:
            raise UserError(f"--class-ids: class {bad[0]} has no labelled sample (classes 0..{num_classes - 1})")
        return list(dict.fromkeys(class_ids))
    if count <= 0 or count >= len(present):
        return present
    return sorted(np.random.default_rng(seed).choice(present, size=count, replace=False).tolist())


def _palette(n: int) -> np.ndarray:
    """n distinct RGBA colours (tab10 / tab20, else evenly spaced hues). -> [n, 4]."""
    import matplotlib

    if n <= 20:
        cmap = matplotlib.colormaps["tab10" if n <= 10 else "tab20"]
        return np.array([cmap(i) for i in range(n)])
    return matplotlib.colormaps["hsv"](np.linspace(0, 1, n, endpoint=False))


def tsne_2d(x: np.ndarray, seed: int) -> np.ndarray:
    from sklearn.manifold import TSNE

    n = x.shape[0]
    perplexity = float(min(30.0, max(1.0, (n - 1) / 3)))
    return TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed).fit_transform(x)


def tsne_figure(
    features: torch.Tensor,
    text: torch.Tensor,
    labels: np.ndarray,
    out: str | Path,
    config: EngineConfig | None = None,
    classes: int = 10,
    class_ids: Sequence[int] | None = None,
    classnames: Sequence[str] | None = None,
    seed: int = 0,
    title: str = "",
) -> dict[str, Any]:
    """The paper's t-SNE figure: CLIP embeddings (left) vs mean-shifted embeddings z (right) of the
    samples of a subset of classes, coloured by class. Writes a PNG; returns what it drew."""
    from matplotlib.figure import Figure

    if labels is None or not (np.asarray(labels) >= 0).any():
        raise UserError("t-SNE needs labelled features (the feature file has no labels)")
    labels = np.asarray(labels)
    f, z = mean_shifted(features, text, config)
    chosen = pick_classes(labels, int(torch.as_tensor(text).shape[0]), classes, class_ids, seed)
    mask = np.isin(labels, chosen)
    if mask.sum() < 3:
        raise UserError(f"t-SNE needs at least 3 samples; the chosen classes have {int(mask.sum())}; pick more classes")
    lab = labels[mask]
    palette = _palette(len(chosen))
    colours = palette[np.searchsorted(chosen, lab)]
    fig = Figure(figsize=(11, 5))
    panels = (("CLIP embeddings", f), ("mean-shifted embeddings (MS-TTA)", z))
    for i, (name, emb) in enumerate(panels):
        x = torch.nn.functional.normalize(emb[torch.from_numpy(mask)], dim=-1).numpy()
        xy = tsne_2d(x, seed)
        ax = fig.add_subplot(1, 2, i + 1)
        ax.scatter(xy[:, 0], xy[:, 1], c=colours, s=10)
        ax.set_title(f"({'ab'[i]}) {name}")
        ax.set_xticks([])
        ax.set_yticks([])
    if len(chosen) <= 20:
        from matplotlib.lines import Line2D

        names = [classnames[c] if classnames else str(c) for c in chosen]
        handles = [Line2D([], [], marker="o", ls="", color=palette[j]) for j in range(len(chosen))]
        fig.legend(
            handles,
            names,
            loc="lower center",
            ncol=min(len(chosen), 5),
            fontsize=8,
            frameon=False,
            bbox_to_anchor=(0.5, -0.1),
        )
    if title:
        fig.suptitle(title)
    path = save_png(fig, Path(out))
    return {"out": str(path), "classes": chosen, "samples": int(mask.sum())}
