"""The runner of every family but the cache one: S streams of a family's pure functions behind the
`Engine`/`MultiEngine` contract (`step`, `reset`, `state_dict`, `load_state_dict`).

A row without views of its own (`Method.augment` None) follows the dataset's protocol: where
`view_mode` is "original" it reads view 0 alone, as the cache family does (DOTA, DPE, OnZeta and BCA
run one view on the cross-domain sets in their authors' code). Each stream keeps its family state
(a dict of tensors from `family.init`) and, for the `+ms` rows, its own bank of earlier raw
features: `shift` moves a family's features toward their k nearest bank rows (the engine's
Eq. (9)-(11), `functional.shift_by_sims`, ties to the older row) before the sample's own raw
feature enters the bank. Streams step one after another (the families' state
is small and sequential); math runs in the text classifier's dtype (float64 for a float64
classifier: the exact path the independent references are checked on, else float32).
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import numpy as np
import torch

from ..checks import int_in
from ..errors import UserError
from ..safety import check_memory, human_bytes
from ..threads import small_ops
from . import functional as Fn
from .cache import UNBOUNDED_START, FeatureBank
from .cache_runner import Streams
from .config import EngineConfig
from .families import get_family
from .families.base import Method, StepOut


def check_text_tower(method: Method, tower, classes: int):
    """The text tower a family with `TOWER` needs (None for the others), over the classifier's classes."""
    if not getattr(get_family(method.family), "TOWER", False):
        return None
    if tower is None:
        raise UserError(
            f"{method.title} tunes a prompt through the model's text tower: pass "
            "text_tower=mstta.features.text_tower.TextTower(model, tokenizer, classnames)"
        )
    if tower.num_classes != classes:
        raise UserError(
            f"text_tower has {tower.num_classes} classes, the text classifier {classes}; build both from one list"
        )
    return tower


def _identity(v: torch.Tensor) -> torch.Tensor:
    return v


class FamilyStreams(Streams):
    """S streams of one family method (the `Engine`/`MultiEngine` of a non-cache method)."""

    def __init__(
        self,
        text: torch.Tensor,
        method: Method,
        config: EngineConfig | None,
        device: str | torch.device | None,
        cuda_graph: bool | None,
        streams: int,
        stream_length: int | None = None,
    ):
        self.method = method
        self.config = config if config is not None else EngineConfig()
        text = torch.as_tensor(text)
        if text.dim() != 2 or text.shape[0] < 2:
            raise UserError(f"text classifier must be [C, d] with C >= 2 classes, got shape {tuple(text.shape)}")
        dtype = torch.float64 if text.dtype == torch.float64 else torch.float32
        self.text = Fn.normalize(text.to(device=device or text.device, dtype=dtype))
        self.streams = streams
        self.text_tower = check_text_tower(method, getattr(self, "text_tower", None), self.text.shape[0])
        if cuda_graph:
            raise UserError(
                f"cuda_graph=True: {method.title} runs eagerly (only the cache family's step is "
                "captured as a CUDA graph); pass cuda_graph=None"
            )
        self.cuda_graph = False
        self._graph_required = False
        if stream_length is not None:
            int_in(stream_length, "stream_length", 1, extra=" or None")
        self.stream_length = stream_length
        self.reset()

    @property
    def family(self):
        """The family's module (looked up, not held: the engine stays deep-copyable)."""
        return get_family(self.method.family)

    # ------------------------------------------------------------------ state
    def reset(self, stream: int | None = None) -> None:
        """Forget everything adapted so far, of every stream (memory checked first) or of one."""
        if stream is not None:
            self.states[stream] = self.family.init(self.text, self.config, self.stream_length)
            self.banks[stream] = self._bank()
            self.seen[stream] = 0
            return
        self._check_family_memory()
        self.graphs: dict[int, Any] = {}
        self.bank = self.pos = self.neg = None  # the cache family's records: none here
        self.seen = np.zeros(self.streams, dtype=np.int64)
        self.states = [self.family.init(self.text, self.config, self.stream_length) for _ in range(self.streams)]
        self.banks = [self._bank() for _ in range(self.streams)]

    def _bank(self) -> FeatureBank | None:
        if not self.method.mean_shift:
            return None
        rows = self.config.bank_size if self.config.bank_size is not None else UNBOUNDED_START
        return FeatureBank(rows, self.dim, self.text.dtype, self.device)

    def _check_family_memory(self) -> None:
        cfg, C, d, S = self.config, self.num_classes, self.dim, self.streams
        item = self.text.element_size()
        state = S * self.family.state_bytes(C, d, cfg) * item // 4
        rows = (cfg.bank_size if cfg.bank_size is not None else UNBOUNDED_START) if self.method.mean_shift else 0
        bank = S * rows * (d + 2) * item
        per = f" per stream, {S} streams" if S > 1 else ""
        what = f"{self.method.title}'s state ({human_bytes(state)} for C = {C}, d = {d}{per}"
        what += f"; bank {rows} x {d} dims (bank_size))" if bank else ")"
        check_memory(state + bank, what)
        if self.device.type == "cuda":
            have = torch.cuda.get_device_properties(self.device).total_memory
            if state + bank > 0.8 * have:
                raise UserError(f"{what} needs {human_bytes(state + bank)}; this GPU has {human_bytes(have)}; lower it")

    def _fill(self, s: int) -> int:
        b = self.banks[s]
        return 0 if b is None else b.fill(self.config.bank_size is not None)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume the streams (copies)."""
        return copy.deepcopy({"states": self.states, "banks": self.banks, "seen": self.seen})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from `state_dict()`."""
        state = copy.deepcopy(state)
        if set(state) != {"states", "banks", "seen"} or len(state["states"]) != self.streams:
            raise UserError(f"state_dict does not match {self.streams} stream(s) of {self.method.title}")
        self.states, self.banks = state["states"], state["banks"]
        self.seen = np.array(state["seen"], dtype=np.int64)

    # ------------------------------------------------------------------ step
    def _shifter(self, s: int) -> Callable[[torch.Tensor], torch.Tensor]:
        bank = self.banks[s]
        if bank is None:
            return _identity
        cfg = self.config
        return lambda v: bank.shift(v, cfg.k, cfg.alpha, cfg.ms_steps, cfg.bank_size is not None)

    def _run(self, x: torch.Tensor, active: np.ndarray | None):
        """One step of every stepping stream: x [S, V, d] on the device -> (scores, clip, H,
        feature, probs), [S, ...] (a skipped stream's rows are zeros)."""
        outs: list[StepOut | None] = []
        with small_ops(self.device):
            for s in range(self.streams):
                if active is not None and not active[s]:
                    outs.append(None)
                    continue
                xs = x[s] if self.method.augment is not None or self.config.view_mode != "original" else x[s][:1]
                extra = {"tower": self.text_tower} if self.text_tower is not None else {}
                out = self.family.step(
                    self.states[s], Fn.normalize(xs), self.text, self.config, self._shifter(s), **extra
                )
                if self.banks[s] is not None:
                    self.banks[s].append(out.feature, self.config.bank_size is not None)
                outs.append(out)
        self.seen += 1 if active is None else active
        like = next(o for o in outs if o is not None)
        return tuple(
            torch.stack([o[i] if o is not None else torch.zeros_like(like[i]) for o in outs])
            for i in range(len(StepOut._fields))
        )
