"""Many streams in one step: S independent engines (several cameras on one GPU) whose states are
stacked and stepped by batched ops, each stream exactly as its own `Engine` would step it.

    engine = MultiEngine(text, "ms-tta", config, streams=8)
    out = engine.step(frames)            # [S, d] / [S, V, d], or a list with None = stream skips
    out.predictions                      # [S] ints (-1 where a stream skipped the step)
    engine.reset(stream=3)               # one stream starts over; the others keep adapting

Every part of the step is batched over streams except BoostAdapter's throw-away boosted caches
(`mstta.engine.boost`), which are built per stepping stream on the host, as for one engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ..checks import int_in
from ..errors import UserError
from .config import EngineConfig
from .engine import Front, StepResult, make_runner
from .methods import Method


@dataclass
class MultiStepResult:
    """One step of S streams, as device tensors with a leading stream dimension; `active` [S]
    marks the streams that stepped (the others' rows are meaningless)."""

    logits: torch.Tensor  # [S, C]
    clip_logits: torch.Tensor  # [S, C]
    entropy_tensor: torch.Tensor  # [S]
    feature: torch.Tensor  # [S, d]
    active: np.ndarray  # [S] bool
    probs: torch.Tensor | None = None  # [S, C] the method's probabilities (None = softmax of logits)
    cut_tensor: torch.Tensor | None = None  # [S] bool: the stream's state was reset before this step (forget)

    @property
    def cuts(self) -> np.ndarray:
        """Per stream, whether `forget` reset its state before this step (False where it skipped)."""
        if self.cut_tensor is None:
            return np.zeros(len(self.active), dtype=bool)
        return self.cut_tensor.cpu().numpy() & self.active

    @property
    def predictions(self) -> np.ndarray:
        """Final prediction per stream, -1 where the stream skipped the step."""
        return np.where(self.active, self.logits.argmax(-1).cpu().numpy(), -1)

    def __getitem__(self, s: int) -> StepResult | None:
        """Stream s's result as one engine's `StepResult`, or None when it skipped the step."""
        if not self.active[s]:
            return None
        return StepResult(
            self.logits[s],
            self.clip_logits[s],
            self.entropy_tensor[s],
            self.feature[s],
            None if self.probs is None else self.probs[s],
            None if self.cut_tensor is None else self.cut_tensor[s],
        )


class MultiEngine(Front):
    """`streams` independent engines of one method, config and text classifier, stepped together.

    `step(features, active=None)`: features `[S, d]` or `[S, V, d]` (one sample per stream, the
    same number of views for all), or a sequence of S samples `[d]`/`[V, d]` where None marks a
    stream that skips this step; `active` ([S] bools) skips streams of a stacked input. A skipped
    stream's state and sample count do not move. `reset(stream=s)` empties one stream.
    """

    def __init__(
        self,
        text: torch.Tensor,
        method: str | Method = "ms-tta",
        config: EngineConfig | None = None,
        streams: int = 2,
        device: str | torch.device | None = None,
        cuda_graph: bool | None = None,
        stream_length: int | None = None,
        text_tower=None,
    ):
        int_in(streams, "streams", 1)
        self.runner = make_runner(text, method, config, device, cuda_graph, streams, stream_length, text_tower)
        self.reset()

    @property
    def n_seen(self) -> np.ndarray:
        """Samples stepped by each stream since its last reset, [S]."""
        return self.runner.seen.copy()

    def bank_len(self, stream: int) -> int:
        """Raw features in one stream's bank."""
        return self.runner._fill(stream)

    @torch.inference_mode()
    def step(self, features, active: Sequence[bool] | np.ndarray | None = None) -> MultiStepResult:
        """Adapt every stepping stream to its sample and predict it (see the class doc)."""
        x, act = self._stack(features, active)
        logits, clip, h, q, *probs = self.runner.run(x, None if act.all() else act)
        cut = self.runner.last_cut.clone() if self.runner.config.forget.resets else None
        return MultiStepResult(logits, clip, h, q, act, *(probs or [None]), cut_tensor=cut)

    def _stack(self, features, active) -> tuple[torch.Tensor, np.ndarray]:
        S, d = self.runner.streams, self.runner.dim
        if isinstance(features, (list, tuple)):
            if len(features) != S:
                raise UserError(f"got {len(features)} samples for {S} streams")
            given = [torch.as_tensor(f) for f in features if f is not None]
            if not given:
                raise UserError("every stream skips this step: pass at least one sample")
            like = given[0].reshape(-1, d) if given[0].numel() % d == 0 else given[0]
            act = np.array([f is not None for f in features])
            features = torch.stack(
                [torch.as_tensor(f).reshape(like.shape) if f is not None else torch.zeros(like.shape) for f in features]
            )
        else:
            act = np.ones(S, dtype=bool)
        x = torch.as_tensor(features)
        shape = tuple(x.shape)
        if x.dim() == 2:
            x = x.unsqueeze(1)
        if x.dim() != 3 or x.shape[0] != S or x.shape[2] != d or x.shape[1] == 0:
            raise UserError(
                f"feature shape {shape} does not match {S} streams and the classifier: "
                f"expected [{S}, {d}] or [{S}, V, {d}]"
            )
        if active is not None:
            act = act & np.asarray(active, dtype=bool).reshape(S)
        if not act.any():
            raise UserError("every stream skips this step: pass at least one active stream")
        return x.to(self.runner.device, self.runner.text.dtype), act
