"""What every method family shares: the registry row (`Method`) and one step's output (`StepOut`).

A family is a module of pure functions over an explicit state (a dict of tensors, one stream's):

    METHODS                                  registry rows, `Method(family=NAME, ...)`
    Params                                   its hyperparameters: a dataclass, `EngineConfig.<NAME>`,
                                             every value checked in `__post_init__` (mstta.checks)
    state_bytes(C, d, cfg) -> int            the state's bytes, checked before anything is allocated
    init(text, cfg, length) -> state         one stream's state on text's device and dtype;
                                             `length` = the stream's length when known (replay), else None
    step(state, x, text, cfg, shift) -> StepOut
                                             one sample: x [V, d] unit rows (view 0 = the original
                                             image), text [C, d] unit rows; updates `state` in place.
                                             `shift(v [n, d]) -> [n, d]` is the mean shift toward the
                                             earlier samples' raw features (the identity for a method
                                             without MS, and at alpha = 0): a family passes through it
                                             every feature it writes to or reads from its state, never
                                             the zero-shot logits' feature (docs/engine.md, "+MS")
    replay(x, text, cfg) -> StepOut          optional: a whole stream [N, V, d] at once (outputs
                                             [N, ...]), equal to stepping it; used for rows without MS

The cache family (`mstta.engine.cache_runner.Streams`) predates this interface and keeps its own vectorised
state; `mstta.engine.family_runner` runs every other family behind the same `Engine`/`MultiEngine`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

CACHE = "cache"  # the family of the positive/negative cache methods (baseline, TDA, BoostAdapter, MS-TTA)


@dataclass(frozen=True)
class Method:
    """A registry row: what a method is and which family runs it. Callers never branch on it:
    `Engine(text, method)` picks the family's runner."""

    name: str  # the key used on command lines and in result files
    title: str  # human title, as the reports and the demo print it
    summary: str  # one line: what the method is
    family: str = CACHE  # the module under mstta.engine.families that runs it (cache: mstta.engine.cache_runner)
    cache: bool = False  # positive cache of low-entropy samples (§3.1)
    mean_shift: bool = False  # kNN mean shift toward the earlier samples' raw features (§4.1; the +ms rows)
    negative: bool = False  # TDA's negative cache
    boost: bool = False  # BoostAdapter's throw-away boosted cache from the lowest-entropy views
    neg_policy: str = "entropy"  # negative-cache replacement: "entropy" (TDA) or "fifo" (BoostAdapter)
    training_free: bool = True  # False: the method takes an optimiser step (DPE), marked in every output
    provenance: str = "authors' code"  # where its semantics come from, printed beside its rows
    episodic: bool = False  # no state carried from one sample to the next (ZERO, MTA)
    augment: str | None = None  # not None: its authors' code reads views of its own on every dataset
    # (never view 0 alone), of this kind ("crop": random resized crops + flips; "augmix") where `views`
    # names no other kind (DMN: AugMix, but crops on the ImageNet family); None = the dataset's protocol
    # (`bench.augment`, and view 0 alone where the dataset's `view_mode` is "original")
    views: str | None = None  # its view policy: which views (kind and count) its authors' code reads on
    # the ImageNet family and on the other sets, a key of `mstta.bench.context.VIEW_POLICIES`;
    # None = `augment` (else the dataset's `bench.augment`) with the dataset's `bench.views`

    cost: str | None = None  # a slow method's cost per sample, as the demo's method list shows it

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
