"""`Context`: what every session of the UI shares (the model, the controls' defaults, the model
slots, the session registry), and `fresh_or_kept`, the one rule for a new source's stream. Below
`handlers` and `video`, which both take it."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, ContextManager, Iterator, Mapping

from mstta.engine.config import EngineConfig

from ..frames import MAX_PIXELS
from ..session import StreamSession
from .models import SharedModels
from .state import ModelSlots, Sessions, Settings, UISession

WEBCAM_END_S = 5.0  # without Stop, the webcam run has ended when no frame came for this long


@dataclasses.dataclass
class Context:
    """What every session shares: the model, the defaults of the controls, the slots, the registry."""

    clip: Any
    base: EngineConfig
    slots: ModelSlots
    sessions: Sessions
    views: int = 1
    views_on: str = "auto"
    topk: int = 3
    max_frames: int | None = None
    max_pixels: int = MAX_PIXELS
    update_interval: float = 0.15  # a run refreshes the frame, bars and plots at most this often (s)
    demo_clip: tuple[str, str, str | None] | None = None  # (video, labels text, truth CSV)
    webcam_end: float = WEBCAM_END_S  # a webcam run without a Stop ends this long after its last frame
    models: SharedModels | None = None  # the loaded models all sessions share (default: `clip` first)
    own_scale: bool = True  # the engine's logit scale follows each model's checkpoint (no --set logit_scale)

    def __post_init__(self) -> None:
        if self.models is None:
            self.models = SharedModels(
                getattr(self.clip, "device", "auto"), getattr(self.clip, "precision", None), first=self.clip
            )

    def new_stream(self, s: Settings) -> StreamSession:
        clip = self.models.get(s.model) if s.model is not None else self.clip
        stream = StreamSession(
            clip,
            list(s.labels),
            template=s.template,
            methods=s.methods,
            config=s.config,
            views=s.views if s.views is not None else self.views,
            views_on=self.views_on,
            topk=self.topk,
        )
        stream.model_key = s.model
        return stream

    def settings(self, form: Mapping[str, Any]) -> Settings:
        """The form, validated; the chosen model is loaded here (shared, offline only), so a refused
        model changes nothing, and the engine takes that model's own logit scale."""
        s = Settings.from_controls(form, self.base, self.models.default, self.views)
        if self.own_scale and s.model is not None and s.model != self.models.default:
            clip = self.models.get(s.model)
            s = dataclasses.replace(s, config=dataclasses.replace(s.config, logit_scale=float(clip.logit_scale)))
        return s

    def model_and(self, ui: UISession) -> Callable[[], ContextManager[None]]:
        """A model slot, then the session's lock (always in this order: no deadlock)."""

        @contextlib.contextmanager
        def both() -> Iterator[None]:
            with self.slots(), ui.lock:
                yield

        return both


def fresh_or_kept(ui: UISession, keep: bool) -> str:
    """A new video or source: empty cache and bank unless `keep`; says which happened."""
    s = ui.stream
    if s is None or ui.source is None:
        return ""
    if keep:
        cached = ui.history.last.cache_size if ui.history.last else 0
        return f"Kept adapting across sources: the cache ({cached} entries) and bank carry over. "
    s.reset()
    return "Fresh stream: empty cache and bank. "
