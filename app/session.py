"""One stream's state: class names -> text classifier, the frame encoder and the adaptation engine.

    session = StreamSession(clip, ["cat", "dog"], method="ms-tta", config=EngineConfig(bank_size=4096))
    result = session.process(rgb)      # FrameResult: CLIP and adapted top-k, disagreement, entropy, cache...
    session.reset()                    # forget the adaptation (new scene, new video)
    session.set_labels(["cat", "dog", "bird"])   # rebuilds the classifier, starts the engine afresh

The CLIP model is shared (load it once, pass it to every session); a session holds only its
classifier, its encoder settings and one `mstta.Engine`, so a UI keeps one session per user.
Zero-shot CLIP and the adapted prediction come from the same features of the same frame.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from mstta.config import DEFAULT_BANK_SIZE, EngineConfig
from mstta.engine import Engine
from mstta.errors import UserError
from mstta.methods import get_method

from .encoder import FrameEncoder
from .labels import prompt_templates

__all__ = ["DEFAULT_BANK_SIZE", "FrameResult", "Scored", "StreamSession", "build_classifier", "method_title"]


def method_title(method: str) -> str:
    """Display name of a method, the library's `Method.title`: 'ms-tta' -> 'MS-TTA'."""
    try:
        found = get_method(method)
    except UserError:
        return method
    return found.title


@dataclass(frozen=True)
class Scored:
    """One class of a top-k list: name, index in the labels, softmax probability."""

    label: str
    index: int
    prob: float


@dataclass
class FrameResult:
    """What `StreamSession.process` returns for one frame."""

    clip_topk: list[Scored]          # zero-shot CLIP, best first
    tta_topk: list[Scored]           # the adapted method (MS-TTA by default), best first
    entropy: float                   # CLIP's prediction entropy (nats)
    cache_size: int                  # entries in the positive cache, all classes
    cache_capacity: int              # classes x capacity
    bank_rows: int                   # features in the mean-shift bank now (at most EngineConfig.bank_size)
    latency_ms: float                # encode + adapt time for this frame
    method: str = "ms-tta"
    cache_per_class: list[int] = field(default_factory=list)

    @property
    def clip_label(self) -> str:
        return self.clip_topk[0].label

    @property
    def tta_label(self) -> str:
        return self.tta_topk[0].label

    @property
    def disagree(self) -> bool:
        """True when zero-shot CLIP and the adapted method predict different classes."""
        return self.clip_topk[0].index != self.tta_topk[0].index

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"disagree": self.disagree}


def build_classifier(clip: Any, labels: Sequence[str], template: str | None = None,
                     cache_dir: str | Path | None = None) -> torch.Tensor:
    """Zero-shot text classifier [C, d] for `labels` with `template` (or the default ensemble)."""
    from mstta.models import build_text_classifier

    return build_text_classifier(clip, list(labels), prompt_templates(template), cache_dir=cache_dir)


class StreamSession:
    """Classifier + encoder + engine for one stream; `process(rgb)` adapts and predicts one frame."""

    def __init__(self, clip: Any, labels: Sequence[str], *, template: str | None = None,
                 method: str = "ms-tta", config: EngineConfig | None = None, views: int = 1,
                 views_on: str = "auto", topk: int = 3, seed: int = 0, cache_dir: str | Path | None = None):
        if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
            raise UserError(f"--topk {topk!r}: expected an integer >= 1")
        self.clip = clip
        self.topk = topk
        self.seed = seed
        self.cache_dir = cache_dir
        self.encoder = FrameEncoder(clip, views=views, seed=seed, views_on=views_on)
        self.method = get_method(method)      # the registry's `Method` (name, title, what it uses)
        self.config = config if config is not None else EngineConfig(bank_size=DEFAULT_BANK_SIZE)
        self.labels: list[str] = []
        self.template = template
        self.set_labels(labels, template)

    # ------------------------------------------------------------------ configuration
    def set_labels(self, labels: Sequence[str], template: str | None = None) -> None:
        """New class names (and template): rebuild the text classifier and restart the engine."""
        labels = list(labels)
        if len(labels) < 2:
            raise UserError(f"need at least 2 class names, got {len(labels)}")
        text = build_classifier(self.clip, labels, template, self.cache_dir)
        self.labels, self.template, self.text = labels, template, text
        self._new_engine()

    def configure(self, method: str | None = None, config: EngineConfig | None = None) -> None:
        """Switch method and/or hyperparameters; the engine starts afresh."""
        if method is not None:
            self.method = get_method(method)
        if config is not None:
            self.config = config
        self._new_engine()

    def _new_engine(self) -> None:
        self.engine = Engine(self.text, method=self.method.name, config=self.config, device=self.clip.device)
        self.encoder.reset(self.seed)

    def reset(self) -> None:
        """Forget everything adapted so far (empty bank and cache); the classifier stays."""
        self.engine.reset()
        self.encoder.reset(self.seed)

    # ------------------------------------------------------------------ per frame
    def process(self, image: np.ndarray) -> FrameResult:
        """Encode one RGB uint8 frame [H, W, 3], adapt, and return both predictions."""
        start = time.perf_counter()
        features = self.encoder.encode_one(image)
        step = self.engine.step(features)
        latency = (time.perf_counter() - start) * 1000.0
        fill = self.engine.cache_fill()
        return FrameResult(
            clip_topk=self._scored(step.topk(self.topk, clip=True)),
            tta_topk=self._scored(step.topk(self.topk)),
            entropy=float(step.entropy),
            cache_size=int(fill.sum()),
            cache_capacity=int(fill.shape[0] * self.config.capacity) if self.engine.method.cache else 0,
            bank_rows=int(self.engine.bank_len),
            latency_ms=latency,
            method=self.method.name,
            cache_per_class=[int(v) for v in fill],
        )

    def _scored(self, pairs: list[tuple[int, float]]) -> list[Scored]:
        return [Scored(self.labels[i], int(i), float(p)) for i, p in pairs]
