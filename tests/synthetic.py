"""Generated feature streams for tests (no CLIP needed).

Mimics CLIP's geometry: image features share a common "modality gap" direction plus their
class prototype plus noise; the text classifier is a noisy copy of the prototypes. So
image-text cosines are small, zero-shot accuracy is imperfect, and neighbouring test samples
carry information a cache (and the mean shift) can use.
"""

from __future__ import annotations

import numpy as np
import torch


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def make_stream(
    n: int = 1000,
    classes: int = 10,
    dim: int = 64,
    views: int = 1,
    seed: int = 0,
    gap: float = 3.0,
    noise: float = 1.0,
    text_noise: float = 1.0,
    view_noise: float = 0.5,
) -> dict[str, np.ndarray]:
    """A labelled stream in the feature-file layout: features [N, d] (or [N, V, d] with view 0
    the clean one), text [C, d], labels [N]; all rows unit-norm."""
    g = np.random.default_rng(seed)
    protos = _unit(g.standard_normal((classes, dim)))
    gap_dir = _unit(g.standard_normal(dim))
    text = _unit(protos + text_noise * _unit(g.standard_normal((classes, dim))))
    labels = g.integers(0, classes, size=n)
    base = gap * gap_dir + protos[labels] + noise * _unit(g.standard_normal((n, dim)))
    if views > 1:
        jitter = view_noise * _unit(g.standard_normal((n, views, dim)))
        jitter[:, 0] = 0.0
        feats = _unit(base[:, None, :] + jitter)
    else:
        feats = _unit(base)
    return {"features": feats.astype(np.float32), "text": text.astype(np.float32), "labels": labels.astype(np.int64)}


def as_tensors(stream: dict[str, np.ndarray]) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """(features, text) as float32 tensors and labels as numpy."""
    return torch.from_numpy(stream["features"]), torch.from_numpy(stream["text"]), stream["labels"]
