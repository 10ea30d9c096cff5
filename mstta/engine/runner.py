"""What both runners share: S streams of one method over one text classifier, stepped together.

A runner holds every stream's state and steps them (`run`); `Engine` (one stream) and `MultiEngine`
(S streams) hold one and add their own API. The cache family's runner is `cache_runner.Streams`
(vectorised, a CUDA graph on GPU), every other family's `family_runner.FamilyStreams` (the
family's pure functions); `make_runner` picks by the method's family.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..errors import UserError
from . import functional as Fn
from . import fused
from .config import EngineConfig
from .families.base import Method


class Runner:
    """The shared part: the method, its config, the unit-norm text classifier [C, d] and S."""

    def __init__(
        self,
        text: torch.Tensor,
        method: Method,
        config: EngineConfig | None,
        device: str | torch.device | None,
        streams: int,
        dtype: torch.dtype = torch.float32,
    ):
        self.method = method
        self.config = config if config is not None else EngineConfig()
        text = torch.as_tensor(text)
        if text.dim() != 2 or text.shape[0] < 2:
            raise UserError(f"text classifier must be [C, d] with C >= 2 classes, got shape {tuple(text.shape)}")
        self.text = Fn.normalize(text.to(device=device or text.device, dtype=dtype))
        self.streams = streams
        fused.wanted(self.device)  # a bad MSTTA_KERNELS is refused here, not at the first step

    @property
    def num_classes(self) -> int:
        return self.text.shape[0]

    @property
    def dim(self) -> int:
        return self.text.shape[1]

    @property
    def device(self) -> torch.device:
        return self.text.device

    def reset(self, stream: int | None = None) -> None:
        """Forget everything adapted so far, of every stream (state allocated) or of one."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def load_state_dict(self, state: dict[str, Any]) -> None:
        raise NotImplementedError

    def run(self, x: torch.Tensor, active: np.ndarray | None) -> tuple[torch.Tensor, ...]:
        """One step of every stepping stream: x [S, V, d] on the device, active [S] bool on the host
        (None = all) -> (logits, clip, H, feature[, probs]), [S, ...]."""
        raise NotImplementedError

    def _fill(self, s: int) -> int:
        """Raw features in stream s's mean-shift bank (known on the host)."""
        raise NotImplementedError
