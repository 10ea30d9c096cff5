"""Which views each row reads (issue 9): a row's view policy (`Method.views`, a key of
`VIEW_POLICIES`) per dataset group, resolved by `view_spec`, the one place that does;
docs/benchmark.md ("Which views each row reads") tabulates the result."""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.methods import get_method
from .config import DatasetConfig
from .paper import OOD

IMAGENET_FAMILY = ("imagenet", *OOD)  # TPT's single-letter set ids (I, A, V, R, K): crops, not AugMix
GROUPS = ("imagenet", "other")  # a view policy's dataset groups: the ImageNet family, every other set


@dataclass(frozen=True)
class Views:
    """What a row reads on one dataset group: `kind` (augmix | crop; None: the dataset's
    `bench.augment`), the store's `store` views per sample (None: the dataset's `bench.views`) and
    the first `read` of them (None: all); `users`: the store's count also on a user's `imagefolder:`
    dataset (the digits table), where the others read one view unless --views says more."""

    kind: str | None = None
    store: int | None = None
    read: int | None = None
    users: bool = False


DATASETS = Views()  # the dataset's protocol (`bench.augment`, `bench.views`)
# Method.views -> per group (GROUPS) the views its authors' code reads (docs/benchmark.md tabulates them).
VIEW_POLICIES: dict[str, dict[str, Views]] = {
    # the original + 63 random resized crops + flips of it on every dataset (ZERO's MultiViewCropAndFlip;
    # MTA's AugMixAugmenter(n_views=63, augmix=False) without --tpt)
    "crop64": {"imagenet": Views("crop", 64), "other": Views("crop", 64)},
    # TPT's AugMixAugmenter(augmix=len(set_id) > 1): crops on the ImageNet family, AugMix on the other
    # sets; the original + 31 views (DMN's -b 32): the first 32 of a 64-view store (shared with the crops
    # ZERO and MTA read; the view order is the draw order, so the first 32 are 32 such draws)
    "tpt32": {"imagenet": Views("crop", 64, 32), "other": Views("augmix", 64, 32)},
    # 64 AugMix views on ImageNet and A/V2/R/S (DPE's get_preprocess), the dataset's on the other sets
    # (one view: view_mode original there)
    "augmix64-imagenet": {"imagenet": Views("augmix", 64), "other": DATASETS},
    # TPT's AugMixAugmenter(n_views=63, augmix=len(set_id) > 1): the original + 63 crops on the ImageNet
    # family, + 63 AugMix views on the other sets (tpt_classification.py:164-173)
    # (its selection needs the views: 64 on a user's imagefolder: too)
    "tpt64": {"imagenet": Views("crop", 64, users=True), "other": Views("augmix", 64, users=True)},
    # C-TPT's --I_augmix (scripts/test_tpt_ctpt_ds.sh): AugMix on every dataset, 64 views
    "augmix64": {"imagenet": Views("augmix", 64, users=True), "other": Views("augmix", 64, users=True)},
}


def dataset_group(dataset: str | None) -> str:
    """'imagenet' for the ImageNet family, else 'other' (the fine-grained sets, imagefolder:)."""
    return "imagenet" if dataset in IMAGENET_FAMILY else "other"


def view_spec(
    method: str, dcfg: DatasetConfig, forced: str | None = None, dataset: str | None = None, views_set: bool = False
) -> tuple[str, int, int]:
    """(kind, store views, views read) of a row on a dataset: the row's view policy (`Method.views`)
    on the dataset's group, else the views its authors' code reads everywhere (`Method.augment`),
    `crop` for every method with BoostAdapter's boosting (its code makes crops everywhere), else the
    dataset's `bench.augment`; counts: the policy's, else the dataset's `bench.views`. `forced`
    (--augment) replaces the kind. The dataset's count is the store's count (the views read capped
    at it) where the user chose it: `views_set` (--views / --set views=N given) and on a user's
    `imagefolder:` dataset (one view unless --views says more; the offline digits table stays one
    extraction)."""
    m = get_method(method)
    policy = VIEW_POLICIES[m.views][dataset_group(dataset)] if m.views is not None else DATASETS
    kind = forced or policy.kind or m.augment or ("crop" if m.boosting_views else dcfg.bench.augment)
    users = views_set or ((dataset or "").startswith("imagefolder:") and not policy.users)
    store = dcfg.bench.views if users or policy.store is None else policy.store
    read = store if policy.read is None else min(policy.read, store)
    return kind, store, read


def view_kind(method: str, dcfg: DatasetConfig, forced: str | None = None, dataset: str | None = None) -> str:
    """The augmentation of the views a method reads (`view_spec`'s kind)."""
    return view_spec(method, dcfg, forced, dataset)[0]
