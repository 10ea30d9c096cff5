"""What every method family shares: the registry row (`Method`), one step's output (`StepOut`)
and the interface of a family module (`Family`, checked by `check_family`).

A family is a module; every one declares

    NAME                                     its key (`Method.family` of its rows)
    METHODS                                  its registry rows, `Method(family=NAME, ...)`; a row's
                                             fixed settings of the family's own (which parts it runs)
                                             are `Method(settings=...)`, a frozen `RowSettings`
                                             subclass of the family's, read by its runner alone;
                                             callers ask `Method.stateful`, `keeps_cache`,
                                             `boosting_views`, which those settings answer
    Params                                   its hyperparameters: a dataclass, `EngineConfig.<NAME>`
                                             (the cache family's: EngineConfig's top-level keys),
                                             every value checked in `__post_init__` (mstta.checks);
                                             `EngineConfig.family_params(NAME)` gives them
    state_bytes(C, d, p) -> int              one stream's state bytes, checked before anything is allocated

and, run by the family runner (`mstta.engine.family_runner`), pure functions over an explicit state
(a dict of tensors, one stream's), each given the family's own `Params` p and CLIP's `logit_scale`,
never the whole config (the cache family brings its own vectorised runner instead,
`mstta.engine.cache_runner.Streams`, which likewise reads its `Params` and its rows' settings, and
only the runner's own settings of `EngineConfig`: views, bank, mean shift, logit scale, forget):

    init(text, p, logit_scale, length) -> state
                                             one stream's state on text's device and dtype;
                                             `length` = the stream's length when known (replay), else None
    step(state, x, text, p, logit_scale, shift) -> StepOut
                                             one sample: x [V, d] unit rows (view 0 = the original
                                             image), text [C, d] unit rows; updates `state` in place.
                                             `shift(v [n, d]) -> [n, d]` is the mean shift toward the
                                             earlier samples' raw features (the identity for a method
                                             without MS, and at alpha = 0): a family passes through it
                                             every feature it writes to or reads from its state, never
                                             the zero-shot logits' feature (docs/engine.md, "+MS")

Optional:

    replay(x, text, p, logit_scale) -> StepOut
                                             a whole stream [N, V, d] at once (outputs [N, ...]),
                                             equal to stepping it; used for rows without MS.
                                             A READS_LENGTH family's: replay(x, text, p, logit_scale,
                                             length), `length` its init's (None: N), so a piece of a
                                             stream between resets replays with the whole stream's
    replay_tower(x, text, p, logit_scale, tower) -> StepOut
                                             a TOWER family's `replay`, with the text tower
    aggregate(x, text, logit_scale, p) -> (f [N, d], clip [N, C])
                                             its view combination, offered to the cache methods as
                                             a `view_mode` named after the family
    DATASET_PARAMS                           {dataset: {key: value}}: its authors' per-dataset values
                                             (configs/<dataset>.yaml holds them under `engine: NAME:`)
    TOWER = True                             it tunes through the model's text tower
                                             (`mstta.features.text_tower`, `Engine(..., text_tower=)`):
                                             the runner refuses a run without one and puts it in each
                                             stream's state as `state[TOWER_KEY]` (never saved by
                                             `state_dict`); its step reads it from there
    FORGET                                   the `forget.rule`s it defines beside the runner's resets
                                             (`timeliness`, `idle`; others refuse them in one line)
    decay(state, gamma, text, p)             `timeliness` on accumulated statistics: the runner calls
                                             it before each step, gamma = exp(-1 / horizon) (text:
                                             the classifier, the statistics' starting point)
    SLOTS                                    a memory of slots: the state key of its [C, Q] slot
                                             entropies; under a slot rule the runner adds the slot
                                             clocks (`mstta.engine.slot_forget.ages`) and the rule as
                                             `state[slot_forget.RULE_KEY]` (never saved); its step applies it
    READS_LENGTH = True                      its `init` reads the stream's length (OnZeta's schedule), so
                                             a piece of a stream is not the same run as the whole
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, NamedTuple, Protocol

import torch

TOWER_KEY = "tower"  # a TOWER family's state entry: the model's text tower, put there by the runner
CACHE = "cache"  # the family of the positive/negative cache methods (baseline, TDA, BoostAdapter, MS-TTA)


@dataclass(frozen=True)
class RowSettings:
    """A family's fixed settings of one registry row (`Method.settings`), read by its runner alone. A
    family with some subclasses this (a frozen dataclass: the cache family's `families.cache.Switches`)
    and overrides the answers below, which callers read through `Method`'s properties of the same
    names: they never read a family's settings themselves."""

    @property
    def stateful(self) -> bool:
        """The row carries state from one sample to the next (unless it is episodic)."""
        return True

    @property
    def keeps_cache(self) -> bool:
        """The row keeps the positive cache that `Engine.cache_fill` reads (the cache family's records)."""
        return False

    @property
    def boosting_views(self) -> bool:
        """The row reads BoostAdapter's boosting views (crops on every dataset)."""
        return False


@dataclass(frozen=True)
class Method:
    """A registry row: what a method is and which family runs it. Callers never branch on it:
    `Engine(text, method)` picks the family's runner."""

    name: str  # the key used on command lines and in result files
    title: str  # human title, as the reports and the demo print it
    summary: str  # one line: what the method is
    family: str = CACHE  # the module under mstta.engine.families that runs it (cache: mstta.engine.cache_runner)
    settings: RowSettings = RowSettings()  # its family's fixed settings of this row, read by that family's
    # runner alone (the cache family's: which of its parts the row runs, `families.cache.Switches`)
    mean_shift: bool = False  # kNN mean shift toward the earlier samples' raw features (§4.1; the +ms rows)
    training_free: bool = True  # False: the method takes an optimiser step (DPE), marked in every output
    provenance: str = "authors' code"  # where its semantics come from, printed beside its rows
    episodic: bool = False  # no state carried from one sample to the next (ZERO, MTA)
    augment: str | None = None  # not None: its authors' code reads views of its own on every dataset
    # (never view 0 alone), of this kind ("crop": random resized crops + flips; "augmix") where `views`
    # names no other kind (DMN: AugMix, but crops on the ImageNet family); None = the dataset's protocol
    # (`bench.augment`, and view 0 alone where the dataset's `view_mode` is "original")
    views: str | None = None  # its view policy: which views (kind and count) its authors' code reads on
    # the ImageNet family and on the other sets, a key of `mstta.bench.viewpolicy.VIEW_POLICIES`;
    # None = `augment` (else the dataset's `bench.augment`) with the dataset's `bench.views`

    cost: str | None = None  # a slow method's cost per sample, as the demo's method list shows it

    @property
    def stateful(self) -> bool:
        """Whether it carries state from one sample to the next (not episodic, not zero-shot)."""
        return not self.episodic and self.settings.stateful

    @property
    def keeps_cache(self) -> bool:
        """Whether it keeps the positive cache that `Engine.cache_fill`/`cache_times` show ([C, capacity])."""
        return self.settings.keeps_cache

    @property
    def boosting_views(self) -> bool:
        """Whether it reads BoostAdapter's boosting views: crops on every dataset, its `view_ratio` most
        confident of them boosting a throw-away cache (replayed online, never a CUDA graph)."""
        return self.settings.boosting_views

    @property
    def marks(self) -> list[str]:
        """The notes every output that shows this method carries (empty for most)."""
        out = []
        if not self.training_free:
            out.append("not training-free")
        if self.provenance != "authors' code":
            out.append(self.provenance)
        return out


class StepOut(NamedTuple):
    """One step of a family (or a replayed stream, with a leading [N] dimension)."""

    scores: torch.Tensor  # [C] the prediction is their argmax (StepResult.logits)
    clip: torch.Tensor  # [C] zero-shot CLIP logits of the method's prediction path
    entropy: torch.Tensor  # 0-d: the CLIP entropy (nats) of that path
    feature: torch.Tensor  # [d] the sample's raw feature: the row the mean-shift bank keeps
    probs: torch.Tensor  # [C] the method's probabilities (docs/engine.md says what they are per family)


class Family(Protocol):
    """A family module's declared interface (the module docstring says what each member means)."""

    NAME: str
    METHODS: tuple[Method, ...]
    Params: type

    def state_bytes(self, C: int, d: int, p: Any) -> int: ...

    def init(self, text: torch.Tensor, p: Any, logit_scale: float, length: int | None) -> dict: ...

    def step(
        self, state: dict, x: torch.Tensor, text: torch.Tensor, p: Any, logit_scale: float, shift: Callable
    ) -> StepOut: ...


# The members of the interface as (name, parameters); a family with its own runner (the cache
# family) declares no init/step. Optional members are checked when present.
REQUIRED = {"state_bytes": ("C", "d", "p")}
STEPPED = {"init": ("text", "p", "logit_scale", "length"), "step": ("state", "x", "text", "p", "logit_scale", "shift")}
OPTIONAL = {
    "replay": ("x", "text", "p", "logit_scale"),
    "replay_tower": ("x", "text", "p", "logit_scale", "tower"),  # a TOWER family's replay
    "aggregate": ("x", "text", "logit_scale", "p"),
}


def check_family(module: ModuleType | Any, own_runner: bool = False) -> list[str]:
    """What `module` lacks of the `Family` interface, one line each (empty: it conforms). Functions are
    checked by their parameters' names; `own_runner`: the family brings its runner (no init/step)."""
    problems = []
    if not isinstance(getattr(module, "NAME", None), str):
        problems.append("NAME: a string is missing")
    name = getattr(module, "NAME", None)
    rows = getattr(module, "METHODS", None)
    if not isinstance(rows, tuple) or not all(isinstance(r, Method) for r in rows):
        problems.append("METHODS: a tuple of Method rows is missing")
    else:
        problems += [
            f"METHODS: row {r.name!r} names family {r.family!r}, not {name!r}" for r in rows if r.family != name
        ]
        problems += [
            f"METHODS: row {r.name!r} has settings {type(r.settings).__name__}, not a RowSettings"
            for r in rows
            if not isinstance(r.settings, RowSettings)
        ]
    params = getattr(module, "Params", None)
    if not (isinstance(params, type) and dataclasses.is_dataclass(params)):
        problems.append("Params: a dataclass is missing")
    wanted = {**REQUIRED, **({} if own_runner else STEPPED)}
    wanted.update({k: v for k, v in OPTIONAL.items() if hasattr(module, k)})
    if getattr(module, "READS_LENGTH", False) and "replay" in wanted:
        wanted["replay"] += ("length",)
    for fn, args in wanted.items():
        f = getattr(module, fn, None)
        if not callable(f):
            problems.append(f"{fn}: a function is missing")
        elif tuple(inspect.signature(f).parameters) != args:
            problems.append(f"{fn}{tuple(inspect.signature(f).parameters)}: expected {fn}({', '.join(args)})")
    table = getattr(module, "DATASET_PARAMS", {})
    if isinstance(params, type) and dataclasses.is_dataclass(params):
        keys = {f.name for f in dataclasses.fields(params)}
        problems += [
            f"DATASET_PARAMS[{ds!r}]: unknown keys {sorted(set(v) - keys)}" for ds, v in table.items() if set(v) - keys
        ]
    return problems
