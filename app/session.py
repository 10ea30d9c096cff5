"""One stream's state: class names -> text classifier, the frame encoder and the adaptation engine.

    session = StreamSession(clip, ["cat", "dog"], method="ms-tta", config=EngineConfig(bank_size=4096))
    session = StreamSession(clip, labels, methods=["ms-tta", "ms-tta@recommended"])  # forgetting raced too
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
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from mstta.checks import int_in
from mstta.engine.config import DEFAULT_BANK_SIZE, EngineConfig
from mstta.engine.engine import Engine
from mstta.engine.methods import needs_text_tower
from mstta.errors import UserError
from mstta.features.text_tower import text_tower

from .encoder import FrameEncoder
from .forgetting import Racer, parse_racer, racer_title
from .labels import prompt_templates

__all__ = [
    "DEFAULT_BANK_SIZE",
    "MAX_METHODS",
    "FrameResult",
    "MethodResult",
    "Scored",
    "StreamSession",
    "build_classifier",
    "check_methods",
    "method_title",
]

MAX_METHODS = 4  # methods raced on one stream: one encoder pass per frame, one engine step per method


def method_title(method: str) -> str:
    """Display name of a raced entry, the library's `Method.title` (+ its own forgetting): 'ms-tta' ->
    'MS-TTA', 'ms-tta@recommended' -> 'MS-TTA + forgetting'."""
    return racer_title(method)


@dataclass(frozen=True)
class Scored:
    """One class of a top-k list: name, index in the labels, softmax probability."""

    label: str
    index: int
    prob: float


def check_methods(methods: Sequence[str] | str, flag: str = "--methods") -> list[str]:
    """The entries raced on one stream (1..MAX_METHODS, no repeats), in order: registry names, or
    NAME@CHOICE with its own forgetting (`app.forgetting`); a comma-separated string is split.
    One-line UserError naming `flag` otherwise."""
    names = [m.strip() for m in methods.split(",")] if isinstance(methods, str) else [str(m).strip() for m in methods]
    if not any(names):
        raise UserError(f"{flag}: name at least one method (e.g. ms-tta,tda)")
    if not all(names):  # never dropped silently: "ms-tta,,tda" would race two where three were meant
        shown = ",".join(names)[:80]
        raise UserError(f"{flag} {shown}: an empty method name (two commas in a row, or one at an end); remove it")
    if len(names) > MAX_METHODS:
        raise UserError(f"{flag}: {len(names)} methods; at most {MAX_METHODS} race on one stream")
    names = [parse_racer(name, flag).name for name in names]
    repeated = sorted({m for m in names if names.count(m) > 1})
    if repeated:
        raise UserError(f"{flag}: {', '.join(repeated)} named twice; name each method once")
    return names


@dataclass(frozen=True)
class MethodResult:
    """One raced method's output for a frame: its entry name, top-k (best first), step time, and
    whether its forgetting reset its state at this frame (a detected scene cut)."""

    method: str
    topk: list[Scored]
    ms: float  # this method's engine step (ms); the encoder pass is shared
    _: KW_ONLY  # by name: a title and a cut flag are never mistaken for each other
    title: str = ""  # its display name (`Racer.title`), carried so that no frame looks it up again
    cut: bool = False  # `StepResult.cut`: the state was reset before this frame (forget.detect)

    def __post_init__(self) -> None:
        if not self.title:  # made by hand (tests, replays): the entry's title, once
            object.__setattr__(self, "title", method_title(self.method))

    @property
    def label(self) -> str:
        return self.topk[0].label

    @property
    def index(self) -> int:
        return self.topk[0].index


@dataclass
class FrameResult:
    """What `StreamSession.process` returns for one frame."""

    clip_topk: list[Scored]  # zero-shot CLIP, best first
    tta_topk: list[Scored]  # the adapted method (MS-TTA by default), best first
    entropy: float  # CLIP's prediction entropy (nats)
    cache_size: int  # entries in the positive cache, all classes
    cache_capacity: int  # classes x capacity
    bank_rows: int  # features in the mean-shift bank now (at most EngineConfig.bank_size)
    latency_ms: float  # encode + adapt time for this frame
    method: str = "ms-tta"
    cache_per_class: list[int] = field(default_factory=list)
    methods: list[MethodResult] = field(default_factory=list)  # every raced method, the first = tta_topk
    encode_ms: float = 0.0  # the shared encoder pass (ms)
    title: str = ""  # the first entry's display name (`Racer.title`), carried: no frame looks it up again

    def __post_init__(self) -> None:
        if not self.title:  # made by hand (tests, replays): the registry's title, once
            object.__setattr__(self, "title", method_title(self.method))

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


def build_classifier(
    clip: Any, labels: Sequence[str], template: str | None = None, cache_dir: str | Path | None = None
) -> torch.Tensor:
    """Zero-shot text classifier [C, d] for `labels` with `template` (or the default ensemble)."""
    from mstta.features.models import build_text_classifier

    return build_text_classifier(clip, list(labels), prompt_templates(template), cache_dir=cache_dir)


class StreamSession:
    """Classifier + encoder + engine for one stream; `process(rgb)` adapts and predicts one frame."""

    def __init__(
        self,
        clip: Any,
        labels: Sequence[str],
        *,
        template: str | None = None,
        method: str = "ms-tta",
        config: EngineConfig | None = None,
        views: int = 1,
        views_on: str = "auto",
        topk: int = 3,
        seed: int = 0,
        cache_dir: str | Path | None = None,
        methods: Sequence[str] | None = None,
    ):
        int_in(topk, "--topk", 1)
        self.clip = clip
        self.topk = topk
        self.seed = seed
        self.cache_dir = cache_dir
        self.encoder = FrameEncoder(clip, views=views, seed=seed, views_on=views_on)
        # the raced methods (registry rows), the first one shown as "the adapted method"
        self.methods = [parse_racer(m) for m in check_methods(methods if methods is not None else [method])]
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
        self.tower = None  # the prompt-tuning methods' text tower over these labels, built when one is raced
        self._new_engine()

    @property
    def method(self) -> Racer:
        """The first raced entry (the one the banner, the frame and "tta" show)."""
        return self.methods[0]

    @property
    def method_names(self) -> list[str]:
        return [m.name for m in self.methods]

    def configure(
        self, method: str | None = None, config: EngineConfig | None = None, methods: Sequence[str] | None = None
    ) -> None:
        """Switch method(s) and/or hyperparameters; every engine starts afresh."""
        if methods is not None or method is not None:
            self.methods = [parse_racer(m) for m in check_methods(methods if methods is not None else [method])]
        if config is not None:
            self.config = config
        self._new_engine()

    def _new_engine(self) -> None:
        tuned = [m for m in self.methods if needs_text_tower(m.method)]
        if tuned and self.encoder.views < 2:
            raise UserError(
                f"--views {self.encoder.views}: {tuned[0].title} picks its most confident views; "
                "give it at least 2 (its authors use 64)"
            )
        if tuned and self.tower is None:
            self.tower = text_tower(self.clip, self.labels)
        self.engines = [
            Engine(
                self.text,
                method=m.method.name,
                config=m.config(self.config),
                device=self.clip.device,
                text_tower=self.tower if needs_text_tower(m.method) else None,
            )
            for m in self.methods
        ]
        self.encoder.reset(self.seed)

    @property
    def engine(self) -> Engine:
        """The first method's engine (its cache and bank are the ones shown)."""
        return self.engines[0]

    def reset(self) -> None:
        """Forget everything adapted so far (empty bank and cache); the classifier stays."""
        for engine in self.engines:
            engine.reset()
        self.encoder.reset(self.seed)

    # ------------------------------------------------------------------ per frame
    def process(self, image: np.ndarray) -> FrameResult:
        """Encode one RGB uint8 frame [H, W, 3] once, step every raced method's engine on the same
        features, and return CLIP's and every method's predictions."""
        start = time.perf_counter()
        features = self.encoder.encode_one(image)
        encoded = time.perf_counter()
        raced, first = [], None
        for method, engine in zip(self.methods, self.engines):
            t0 = time.perf_counter()
            step = engine.step(features)
            topk = self._scored(step.topk(self.topk))
            ms = (time.perf_counter() - t0) * 1000.0
            raced.append(MethodResult(method.name, topk, ms, title=method.title, cut=step.cut))
            first = step if first is None else first
        latency = (time.perf_counter() - start) * 1000.0
        fill = self.engine.cache_fill()
        return FrameResult(
            clip_topk=self._scored(first.topk(self.topk, clip=True)),
            tta_topk=raced[0].topk,
            entropy=float(first.entropy),
            cache_size=int(fill.sum()),
            cache_capacity=int(fill.shape[0] * self.config.capacity) if self.method.keeps_cache else 0,
            bank_rows=int(self.engine.bank_len),
            latency_ms=latency,
            method=self.method.name,
            title=self.method.title,
            cache_per_class=[int(v) for v in fill],
            methods=raced,
            encode_ms=(encoded - start) * 1000.0,
        )

    def _scored(self, pairs: list[tuple[int, float]]) -> list[Scored]:
        return [Scored(self.labels[i], int(i), float(p)) for i, p in pairs]
