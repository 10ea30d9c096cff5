"""The online adaptation engine: all state of one stream in one resettable object.

The engine holds tensors and its config only (never the CLIP model), so it is cheap to copy into
a UI session or a test snapshot. Device comes from the text classifier; math runs in float32
(the bank in `bank_dtype`). It is the one-stream case of `mstta.engine.cache_runner.Streams`, whose state
lives on the device and whose step never waits on the host, so on CUDA the step of a bounded
bank can be captured once as a CUDA graph and replayed (`mstta.engine.graphs`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import UserError
from .cache_runner import Streams
from .config import EngineConfig
from .families.base import CACHE
from .family_runner import FamilyStreams
from .methods import Method, get_method


@dataclass
class StepResult:
    """What one step produced, as device tensors: final and CLIP logits [C], the CLIP entropy
    (nats, a 0-d tensor), the query [d], and the method's probabilities [C] where they are not the
    softmax of its logits (ZERO's vote shares, DMN's fused memory, BCA's posterior, ...; None =
    softmax). Python numbers are made only when a caller asks."""

    logits: torch.Tensor
    clip_logits: torch.Tensor
    entropy_tensor: torch.Tensor
    feature: torch.Tensor
    probs: torch.Tensor | None = None

    @property
    def entropy(self) -> float:
        return float(self.entropy_tensor)

    @property
    def prediction(self) -> int:
        return int(self.logits.argmax())

    @property
    def clip_prediction(self) -> int:
        return int(self.clip_logits.argmax())

    def topk(self, k: int = 3, clip: bool = False) -> list[tuple[int, float]]:
        """Top-k (class index, probability) of the final (or CLIP) prediction: the method's own
        probabilities, else the softmax of its logits."""
        if not clip and self.probs is not None:
            probs = self.probs.float()
        else:
            probs = torch.softmax((self.clip_logits if clip else self.logits).float(), dim=-1)
        vals, idx = probs.topk(min(k, probs.numel()))
        return list(zip(idx.tolist(), vals.tolist()))


class Engine(Streams):
    """Online test-time adaptation over CLIP features, one sample per `step()`.

    `step(features)` takes a feature `[d]` or a multi-view sample `[V, d]` (view 0 = the original
    image) and applies, in the paper's order (Algorithm 1):
      1. CLIP logits, entropy and pseudo-label (views aggregated per `view_mode`);
      2. mean shift toward the k nearest earlier raw features (MS methods; the bank gets the
         current feature afterwards);
      3. cache updates (positive; TDA's negative) before any cache logits are read;
      4. final logits = CLIP + lam * (positive - negative cache logits), Eq. (14), with
         BoostAdapter's boosting views added to a throw-away copy of the positive cache.

    `cuda_graph`: None = capture the step as a CUDA graph when it can be (a CUDA device, a bounded
    bank, a method without BoostAdapter's boosting; a failed capture logs a warning and runs
    eagerly); True = require it (an error otherwise); False = always run eagerly.
    `text_tower`: a `mstta.features.text_tower.TextTower` over the classifier's classes, which the
    prompt-tuning methods (tpt, c-tpt) need and every other method ignores.
    """

    def __new__(cls, *args, **kwargs):
        return super().__new__(_family_class(cls, Engine, _FamilyEngine, *args, **kwargs))

    def __init__(
        self,
        text: torch.Tensor,
        method: str | Method = "ms-tta",
        config: EngineConfig | None = None,
        device: str | torch.device | None = None,
        cuda_graph: bool | None = None,
        stream_length: int | None = None,
        text_tower=None,
    ):
        self.text_tower = text_tower  # the model's text tower (`mstta.features.text_tower`): the prompt-tuning family's
        super().__init__(
            text,
            get_method(method) if isinstance(method, str) else method,
            config,
            device,
            cuda_graph,
            streams=1,
            stream_length=stream_length,
        )

    @property
    def n_seen(self) -> int:
        """Samples stepped since the last reset."""
        return int(self.seen[0])

    @property
    def bank_len(self) -> int:
        """Raw features in the bank (known on the host: no device round trip)."""
        return self._fill(0)

    def cache_fill(self) -> np.ndarray:
        """Entries per class in the positive cache, [C] ints."""
        return np.isfinite(self.cache_entropy()).sum(1)

    def cache_entropy(self) -> np.ndarray:
        """Entropy of every positive-cache slot, [C, Q] (+inf = empty slot); a host copy."""
        if self.pos is None:
            return np.full((self.num_classes, 0), np.inf)
        return self.pos.ent[0].cpu().numpy().astype(np.float64)

    @torch.inference_mode()
    def step(self, features: torch.Tensor | np.ndarray) -> StepResult:
        """Adapt to one sample and predict it. `[d]` or `[V, d]` -> StepResult (see class doc)."""
        x = torch.as_tensor(features)
        shape = tuple(x.shape)
        if x.dim() == 1:
            x = x.unsqueeze(0)
        if x.dim() != 2 or x.shape[1] != self.dim or x.shape[0] == 0:
            raise UserError(
                f"feature shape {shape} does not match the classifier: expected [{self.dim}] or [V, {self.dim}]"
            )
        out = self._run(x.to(self.device, self.text.dtype).unsqueeze(0), None)
        return StepResult(*(t[0] for t in out))


def _family_class(cls: type, base: type, family_cls: type, *args, **kwargs) -> type:
    """The class an `Engine(text, method, ...)`/`MultiEngine` call builds: the cache family's
    (`Streams`) or, for a method of another family, the runner's (`FamilyStreams`)."""
    if cls is not base:
        return cls
    method = kwargs.get("method", args[1] if len(args) > 1 else "ms-tta")
    m = get_method(method) if isinstance(method, str) else method
    return cls if m.family == CACHE else family_cls


class _FamilyEngine(Engine, FamilyStreams):
    """An `Engine` whose method belongs to a family of `mstta.engine.families` (its runner holds the state)."""
