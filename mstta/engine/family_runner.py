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
import math
from typing import Any, Callable

import numpy as np
import torch

from ..checks import int_in
from ..errors import UserError
from ..safety import check_memory, human_bytes
from ..threads import small_ops
from . import functional as Fn
from .cache import UNBOUNDED_START, FeatureBank
from .config import EngineConfig
from .drift import Drift, drift_step_host
from .families import get_family
from .families.base import TOWER_KEY, Method, StepOut
from .forget import ADAPTATION, periodic_reset
from .runner import Runner
from .slot_forget import RULE_KEY, SOONEST_KEY, ages, slot_rule


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


def check_forget_rule(method: Method, rule: str) -> None:
    """Refuse, in one line, a slot or decay rule its family does not define (docs/engine.md, Forgetting):
    the class statistics of BCA, OnZeta and DOTA are read at every step, so none goes idle."""
    family = get_family(method.family)
    defined = getattr(family, "FORGET", ())
    if rule not in ("timeliness", "idle") or method.episodic or rule in defined:
        return
    why = "its class statistics are read at every step, none goes unused; " if defined else ""
    use = [f"forget.rule={r}" for r in defined] + ["forget.rule=periodic", "forget.detect=true"]
    raise UserError(
        f"forget.rule={rule}: not defined for {method.title} ({why}docs/engine.md, Forgetting); "
        f"use {', '.join(use[:-1])} or {use[-1]}"
    )


def forget_marks(method: Method, fg) -> list[str]:
    """The mark an output carries where a family's own `timeliness` rule is the project's adaptation
    (its `decay`: DOTA, BCA, OnZeta, DPE's W_g; docs/engine.md, Forgetting)."""
    if fg.rule != "timeliness" or method.episodic or not hasattr(get_family(method.family), "decay"):
        return []
    return [f"forget.rule=timeliness: {ADAPTATION} ({method.title}'s statistics fade with the horizon)"]


def _identity(v: torch.Tensor) -> torch.Tensor:
    return v


class FamilyStreams(Runner):
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
        text_tower=None,
    ):
        wide = torch.as_tensor(text).dtype == torch.float64
        super().__init__(text, method, config, device, streams, torch.float64 if wide else torch.float32)
        self.text_tower = check_text_tower(method, text_tower, self.text.shape[0])
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
        check_forget_rule(method, self.config.forget.rule)

    @property
    def slot_rule(self):
        """The slot rule a slot family's step reads (`mstta.engine.slot_forget`), or None."""
        return slot_rule(self.config.forget) if hasattr(self.family, "SLOTS") else None

    @property
    def family(self):
        """The family's module (looked up, not held: the engine stays deep-copyable)."""
        return get_family(self.method.family)

    # ------------------------------------------------------------------ state
    def reset(self, stream: int | None = None) -> None:
        """Forget everything adapted so far, of every stream (memory checked first) or of one."""
        if stream is not None:
            self.states[stream] = self._init()
            self.banks[stream] = self._bank()
            self.seen[stream] = 0
            if self.drift is not None:
                self.drift.clear(stream)
            return
        self._check_family_memory()
        self.graphs: dict[int, Any] = {}
        self.bank = self.pos = self.neg = None  # the cache family's records: none here
        self.seen = np.zeros(self.streams, dtype=np.int64)
        self.states = [self._init() for _ in range(self.streams)]
        self.banks = [self._bank() for _ in range(self.streams)]
        self.drift = (
            Drift.empty(self.streams, self.dim, self.device, self.config.forget) if self.config.forget.detect else None
        )
        self.last_cut = torch.zeros(self.streams, dtype=torch.bool, device=self.device)

    @property
    def params(self):
        """The family's own hyperparameters (its section of the config)."""
        return self.config.family_params(self.method.family)

    def _init(self) -> dict[str, torch.Tensor]:
        state = self.family.init(self.text, self.params, self.config.logit_scale, self.stream_length)
        if self.text_tower is not None:  # a family with TOWER reads it from its state (never saved)
            state[TOWER_KEY] = self.text_tower
        if self.slot_rule is not None:  # a slot family's rule (never saved) and its slot clocks
            state.update(ages(state[self.family.SLOTS]), **{RULE_KEY: self.slot_rule})
        return state

    def _bank(self) -> FeatureBank | None:
        if not self.method.mean_shift:
            return None
        return FeatureBank.for_settings(self.config.shift_settings(), self.dim, self.text.dtype, self.device)

    def _check_family_memory(self) -> None:
        check_family_memory(self.method, self.config, self.text, self.streams, self.device)

    def _fill(self, s: int) -> int:
        b = self.banks[s]
        return 0 if b is None else b.fill(self.config.bank_size is not None)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume the streams (copies)."""
        states = [{k: v for k, v in st.items() if k not in (TOWER_KEY, RULE_KEY, SOONEST_KEY)} for st in self.states]
        return copy.deepcopy({"states": states, "banks": self.banks, "seen": self.seen, "drift": self.drift})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from `state_dict()`."""
        state = copy.deepcopy(state)
        if set(state) != {"states", "banks", "seen", "drift"} or len(state["states"]) != self.streams:
            raise UserError(f"state_dict does not match {self.streams} stream(s) of {self.method.title}")
        clocks = self.slot_rule is not None
        if any(("clock" in st) != clocks for st in state["states"]):
            raise UserError(f"state_dict was saved under another forget.rule than {self.config.forget.rule}")
        self.states, self.banks, self.drift = state["states"], state["banks"], state["drift"]
        for st in self.states:
            if self.text_tower is not None:
                st[TOWER_KEY] = self.text_tower
            if clocks:
                st[RULE_KEY] = self.slot_rule
        self.seen = np.array(state["seen"], dtype=np.int64)

    # ------------------------------------------------------------------ step
    def _shifter(self, s: int) -> Callable[[torch.Tensor], torch.Tensor]:
        bank = self.banks[s]
        if bank is None:
            return _identity
        settings = self.config.shift_settings()
        return lambda v: bank.shift(v, settings)

    def _forget(self, x: torch.Tensor, active: np.ndarray | None) -> None:
        """The forget section's resets before the step (`mstta.engine.forget`): RDumb's periodic reset and
        the detector's cuts restart a stream's family state and bank (`last_cut` [S] records them).
        Read on the host: a family's step is eager, stream after stream."""
        fg = self.config.forget
        ok = np.ones(self.streams, dtype=bool) if active is None else np.asarray(active, dtype=bool)
        cut = ok & np.array([fg.rule == "periodic" and periodic_reset(int(t), fg.every) for t in self.seen])
        if self.drift is not None:
            if cut.any():  # RDumb's reset: the detector starts over with the state
                self.drift.forget(torch.as_tensor(cut, device=self.device))
            okt = torch.as_tensor(ok, device=self.device)
            cut = cut | drift_step_host(self.drift, x[:, 0], fg, okt)
        for s in np.nonzero(cut)[0]:
            self.states[s] = self._init()
            self.banks[s] = self._bank()
        self.last_cut.copy_(torch.as_tensor(cut, device=self.device))

    def run(self, x: torch.Tensor, active: np.ndarray | None):
        """One step of every stepping stream: x [S, V, d] on the device -> (scores, clip, H,
        feature, probs), [S, ...] (a skipped stream's rows are zeros)."""
        outs: list[StepOut | None] = []
        params = self.params
        with small_ops(self.device):
            if self.config.forget.resets:
                self._forget(x, active)
            for s in range(self.streams):
                if active is not None and not active[s]:
                    outs.append(None)
                    continue
                if self.config.forget.rule == "timeliness" and hasattr(self.family, "decay"):
                    self.family.decay(self.states[s], math.exp(-1 / self.config.forget.steps), self.text, params)
                xs = x[s] if self.method.augment is not None or self.config.view_mode != "original" else x[s][:1]
                out = self.family.step(
                    self.states[s], Fn.normalize(xs), self.text, params, self.config.logit_scale, self._shifter(s)
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


def check_family_memory(method, cfg, text: torch.Tensor, streams: int, device: torch.device) -> None:
    """Refuse, before anything is allocated, a family's state (`state_bytes`, S streams, the `+ms`
    bank) above 80% of this machine's memory (and of the GPU's on CUDA): the one bound of its
    settings, whether the stream is stepped or replayed vectorised (`mstta.engine.replay`)."""
    family = get_family(method.family)
    (C, d), S, item = text.shape, streams, text.element_size()
    state = S * family.state_bytes(C, d, cfg.family_params(method.family)) * item // 4
    rows = (cfg.bank_size if cfg.bank_size is not None else UNBOUNDED_START) if method.mean_shift else 0
    bank = S * rows * (d + 2) * item
    per = f" per stream, {S} streams" if S > 1 else ""
    what = f"{method.title}'s state ({human_bytes(state)} for C = {C}, d = {d}{per}"
    what += f"; bank {rows} x {d} dims (bank_size))" if bank else ")"
    check_memory(state + bank, what)
    if device.type == "cuda":
        have = torch.cuda.get_device_properties(device).total_memory
        if state + bank > 0.8 * have:
            raise UserError(f"{what} needs {human_bytes(state + bank)}; this GPU has {human_bytes(have)}; lower it")
