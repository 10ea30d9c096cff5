"""Generated feature streams for tests, benchmarks and the offline demo (no CLIP needed).

Class prototypes are random unit vectors; the text classifier is a noisy copy of them (the
"modality gap"), and each sample is its class prototype plus noise, so zero-shot accuracy is
imperfect and neighbouring samples carry information the cache can use.
"""
from __future__ import annotations

import numpy as np
import torch


def make_stream(n: int = 1000, classes: int = 10, dim: int = 64, views: int = 1, seed: int = 0,
                noise: float = 1.0, text_noise: float = 0.6) -> dict[str, np.ndarray]:
    """A labelled stream in the feature-file layout: features [N, d] (or [N, V, d]), text [C, d], labels [N]."""
    g = np.random.default_rng(seed)
    protos = _unit(g.standard_normal((classes, dim)))
    text = _unit(protos + text_noise * _unit(g.standard_normal((classes, dim))))
    labels = g.integers(0, classes, size=n)
    scale = noise / np.sqrt(dim)
    base = protos[labels] + scale * g.standard_normal((n, dim)) * np.sqrt(dim) / 4
    if views > 1:
        jitter = scale * g.standard_normal((n, views, dim)) * np.sqrt(dim) / 4
        jitter[:, 0] = 0.0
        feats = _unit(base[:, None, :] + jitter)
    else:
        feats = _unit(base)
    return {"features": feats.astype(np.float32), "text": text.astype(np.float32), "labels": labels.astype(np.int64)}


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def as_tensors(stream: dict[str, np.ndarray]) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    return torch.from_numpy(stream["features"]), torch.from_numpy(stream["text"]), stream["labels"]
