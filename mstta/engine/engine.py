"""The online adaptation engine: all state of one stream in one resettable object.

The engine holds tensors and its config only (never the CLIP model), so it is cheap to copy into
a UI session or a test snapshot. Device comes from the text classifier; math runs in float32
(the bank in `bank_dtype`). It holds the runner of its method's family (`make_runner`: the cache family's
`cache_runner.Streams`, whose state lives on the device and whose step never waits on the host, so
on CUDA the step of a bounded bank is captured once as a CUDA graph, `graphs`; any other family's
`family_runner.FamilyStreams`) for one stream, and reads its state through it.
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
from .protocol import warn_few_views
from .runner import Runner


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
    cut_tensor: torch.Tensor | None = None  # 0-d bool: the state was reset before this step (forget)

    @property
    def cut(self) -> bool:
        """Whether `forget` reset the state before this sample (a periodic reset or a detected cut)."""
        return self.cut_tensor is not None and bool(self.cut_tensor)

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


RUNNERS: dict[str, type[Runner]] = {CACHE: Streams}  # a family's runner; any other: FamilyStreams


def make_runner(
    text: torch.Tensor,
    method: str | Method,
    config: EngineConfig | None,
    device: str | torch.device | None,
    cuda_graph: bool | None,
    streams: int,
    stream_length: int | None,
    text_tower=None,
) -> Runner:
    """The runner of `method`'s family for S streams (its state allocated by the caller's `reset`);
    `text_tower` reaches the family runner (which checks that a family with `TOWER` has one), the
    cache family's ignores it."""
    m = get_method(method) if isinstance(method, str) else method
    runner = RUNNERS.get(m.family)
    if runner is not None:
        return runner(text, m, config, device, cuda_graph, streams, stream_length)
    return FamilyStreams(text, m, config, device, cuda_graph, streams, stream_length, text_tower)


class Front:
    """What `Engine` and `MultiEngine` share: the runner they hold, reset and saved through them;
    every other attribute (config, method, text, the state records) is the runner's, read through."""

    runner: Runner

    def __getattr__(self, name: str):
        if name == "runner" or name.startswith("__"):  # no runner yet (copying, unpickling); no protocol
            raise AttributeError(name)
        return getattr(self.runner, name)

    def reset(self, stream: int | None = None) -> None:
        """Forget everything adapted so far (of one stream: `stream`)."""
        self.runner.reset(stream)

    def state_dict(self) -> dict:
        """Everything needed to resume (copies)."""
        return self.runner.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Resume from `state_dict()`."""
        self.runner.load_state_dict(state)


class Engine(Front):
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
        self.runner = make_runner(text, method, config, device, cuda_graph, 1, stream_length, text_tower)
        self.reset()

    @property
    def n_seen(self) -> int:
        """Samples stepped since the last reset."""
        return int(self.runner.seen[0])

    @property
    def bank_len(self) -> int:
        """Raw features in the bank (known on the host: no device round trip)."""
        return self.runner._fill(0)

    def cache_fill(self) -> np.ndarray:
        """Entries per class in the positive cache, [C] ints."""
        return np.isfinite(self.cache_entropy()).sum(1)

    def cache_entropy(self) -> np.ndarray:
        """Entropy of every positive-cache slot, [C, Q] (+inf = empty slot); a host copy."""
        if self.runner.pos is None:
            return np.full((self.runner.num_classes, 0), np.inf)
        return self.runner.pos.ent[0].cpu().numpy().astype(np.float64)

    def cache_times(self) -> np.ndarray:
        """Insertion step of every positive-cache slot, [C, Q] ints (-1 = empty slot); a host copy.
        Steps count from the engine's reset (a `forget` reset empties slots, not the count)."""
        if self.pos is None:
            return np.full((self.num_classes, 0), -1, dtype=np.int64)
        return self.pos.time[0].cpu().numpy().astype(np.int64)

    @torch.inference_mode()
    def step(self, features: torch.Tensor | np.ndarray) -> StepResult:
        """Adapt to one sample and predict it. `[d]` or `[V, d]` -> StepResult (see class doc)."""
        r = self.runner
        x = torch.as_tensor(features)
        shape = tuple(x.shape)
        if x.dim() == 1:
            x = x.unsqueeze(0)
        if x.dim() != 2 or x.shape[1] != r.dim or x.shape[0] == 0:
            raise UserError(f"feature shape {shape} does not match the classifier: expected [{r.dim}] or [V, {r.dim}]")
        if x.shape[0] > 1 and x.shape[0] != getattr(self, "_views_checked", 1):
            self._views_checked = x.shape[0]  # once per view count: floor(ratio V) < 2 is a warning
            warn_few_views(r.method, r.config, x.shape[0])
        out = r.run(x.to(r.device, r.text.dtype).unsqueeze(0), None)
        cut = r.last_cut[0].clone() if r.config.forget.resets else None
        return StepResult(*(t[0] for t in out), cut_tensor=cut)
