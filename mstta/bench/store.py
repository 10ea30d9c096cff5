"""The feature store: one feature file per (dataset, backbone, pretrained, precision, views,
augment, seed), extracted once and replayed by every method, sweep value and plot.

    <store>/<backbone>-<pretrained>-<precision>/<dataset>/views<V>-<augment>-seed<S>[-n<N>][-peer][-gpuviews|-tensorviews].npz

(no suffix: views made by PIL; `-gpuviews`: on CUDA by `mstta.features.tensor_views`; `-tensorviews`: on CPU
tensors, the fast path; `--views-on`).

`ensure_features` is the one place the benchmark calls the extraction library; `Models` loads
each backbone at most once per command, and only when some file has to be extracted.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError, one_line
from ..features.models import DEFAULT_MODEL, DEFAULT_TAG

log = logging.getLogger(__name__)

VIEW_SUFFIX = {"gpu": "-gpuviews", "cpu-tensors": "-tensorviews"}  # the pixel paths other than PIL's
DEFAULT_PRETRAINED = {DEFAULT_MODEL: DEFAULT_TAG, "RN50": "openai", "mstta-tiny": "none", "mstta-digits": "bundled"}
BACKBONE_ALIASES = {
    "vit-b/16": "ViT-B-16",
    "vit_b16": "ViT-B-16",
    "vit-b-16": "ViT-B-16",
    "vitb16": "ViT-B-16",
    "rn50": "RN50",
    "resnet50": "RN50",
    "resnet-50": "RN50",
}


def slug(text: str) -> str:
    """A file-name-safe form of a key; long or path-like keys get a short hash suffix."""
    s = re.sub(r"[^A-Za-z0-9._=+-]+", "_", str(text)).strip("_.") or "x"
    if s != str(text) or len(s) > 60:
        s = f"{s[:48]}-{hashlib.sha256(str(text).encode()).hexdigest()[:8]}"
    return s


@dataclass(frozen=True)
class Backbone:
    """An open_clip model as the benchmark names it: architecture + pretrained tag (or path/none)."""

    name: str
    pretrained: str

    @property
    def label(self) -> str:
        """`ViT-B-16`, or `ViT-B-16 (laion2b_s34b_b79k)` when the weights are not the default ones."""
        default = DEFAULT_PRETRAINED.get(self.name)
        return self.name if self.pretrained == default else f"{self.name} ({self.pretrained})"


def resolve_backbone(name: str, pretrained: str | None = None) -> Backbone:
    """`ViT-B-16`/`RN50` (OpenAI weights by default), `mstta-tiny` (random weights by default) or
    any open_clip architecture with `--pretrained TAG|PATH|none`; unknown names are a UserError."""
    from ..features.models import list_models

    raw = name.strip()
    arch = BACKBONE_ALIASES.get(raw.lower(), raw)
    known = list_models()
    if arch not in known:
        close = [m for m in known if m.lower() == arch.lower()]
        if close:
            arch = close[0]
        else:
            raise UserError(
                f"--backbone {name}: unknown architecture; use ViT-B-16, RN50 or any open_clip model "
                "(python -c 'import open_clip; print(open_clip.list_models())'), or mstta-tiny"
            )
    tag = pretrained if pretrained not in (None, "") else DEFAULT_PRETRAINED.get(arch)
    if tag is None:
        import open_clip

        tags = open_clip.list_pretrained_tags_by_model(arch)
        if "openai" in tags:
            tag = "openai"
        else:
            raise UserError(
                f"--backbone {arch}: no default weights; pass --pretrained TAG "
                f"(known: {', '.join(tags) or 'none'}), a checkpoint path, or none"
            )
    return Backbone(arch, str(tag))


def weights_status(backbone: Backbone) -> str:
    """Where the weights would come from: 'random', 'cached', 'file', 'download', or 'missing: why'."""
    import open_clip

    from ..features.weights import weights_cached

    tag = backbone.pretrained
    if tag in ("none", ""):
        return "random"
    if tag == "bundled":  # a model this project trains and ships (mstta-digits)
        from ..features.models import bundled_checkpoint

        ckpt = bundled_checkpoint(backbone.name)
        if ckpt is not None:
            return "file" if ckpt.is_file() else f"missing: {ckpt} (python assets/make_digits.py)"
    if open_clip.is_pretrained_cfg(backbone.name, tag):
        return "cached" if weights_cached(backbone.name, tag) else "download (not in the local cache)"
    path = Path(tag).expanduser()
    if path.is_file():
        return "file"
    if any(c in tag for c in "/\\~") or path.suffix:
        return f"missing: checkpoint file not found: {tag}"
    return f"missing: '{tag}' is not a known pretrained tag for {backbone.name}"


@dataclass(frozen=True)
class FeatureKey:
    """What decides a feature file's content."""

    dataset: str
    backbone: Backbone
    precision: str
    views: int
    augment: str
    seed: int
    limit: int | None = None  # only the first `limit` samples of the stream (quick runs)
    listing: str = "full"  # full | peer (the peers' file lists, `mstta.data.load_split`)
    views_made: str = "pil"  # pil | gpu | cpu-tensors (`mstta.features.extract_views.view_path`; many views only)

    def path(self, store: Path) -> Path:
        model = slug(f"{self.backbone.name}-{self.backbone.pretrained}-{self.precision}")
        tail = f"views{self.views}-{self.augment}-seed{self.seed}" if self.views > 1 else f"views1-seed{self.seed}"
        if self.limit:
            tail += f"-n{self.limit}"
        if self.listing != "full":
            tail += f"-{self.listing}"
        if self.views > 1 and self.views_made != "pil":
            tail += VIEW_SUFFIX[self.views_made]
        return Path(store) / model / slug(self.dataset) / f"{tail}.npz"


@dataclass
class Models:
    """Loaded CLIP models by backbone: each loads on first use and stays for the command."""

    device: Any = "auto"
    precision: str | None = None
    _loaded: dict = field(default_factory=dict)
    _failed: dict = field(default_factory=dict)
    _towers: dict = field(default_factory=dict)

    def get(self, backbone: Backbone):
        """The loaded model (a `mstta.features.models.ClipModel`); a load failure is raised once and remembered."""
        from ..features.models import load_clip

        if backbone in self._failed:
            raise UserError(self._failed[backbone])
        if backbone not in self._loaded:
            try:
                log.info("loading %s (%s)", backbone.name, backbone.pretrained)
                self._loaded[backbone] = load_clip(backbone.name, backbone.pretrained, self.device, self.precision)
            except UserError as exc:
                self._failed[backbone] = str(exc)
                raise
        return self._loaded[backbone]

    def tower(self, backbone: Backbone, method: str, classnames) -> Any:
        """The text tower of a prompt-tuning method (tpt, c-tpt) over a stream's classes, else None."""
        from ..engine.methods import needs_text_tower
        from ..features.text_tower import text_tower

        if not needs_text_tower(method):
            return None
        if not classnames:
            raise UserError(f"{method}: the feature file names no classes; the text tower needs them (re-extract it)")
        key = (backbone, tuple(classnames))
        if key not in self._towers:
            self._towers[key] = text_tower(self.get(backbone), classnames)
        return self._towers[key]


def resolved_precision(device: Any, precision: str | None) -> str:
    """The precision a model would load with (fp16 on GPU, fp32 on CPU unless given)."""
    import torch

    from ..features.devices import resolve_device
    from ..features.models import default_precision

    dev = device if isinstance(device, torch.device) else resolve_device(device)
    return precision or default_precision(dev)


def ensure_features(
    key: FeatureKey,
    store: str | Path,
    models: Models,
    data_root: str | Path | None,
    *,
    batch_size: int | None = None,
    workers: int | None = None,
    progress: bool = False,
) -> Path:
    """The feature file of `key` in the store, extracted first when absent (the store is a cache:
    an existing file is used as is once `check_stored` finds it the one its name promises; delete
    it to re-extract). The backbone's model is shared
    through `models`, so it loads once per backbone. Another run extracting the same file at the
    same time is refused (`output_lock`), naming its pid."""
    from ..atomic import output_lock
    from ..features import extract

    path = key.path(Path(store))
    if path.is_file():
        check_stored(path, key, data_root)
        _check_views_made(path, key)
        return path
    kwargs: dict[str, Any] = dict(
        model=key.backbone.name,
        pretrained=key.backbone.pretrained,
        precision=key.precision,
        device=str(models.device),
        views=key.views,
        views_on="cpu" if key.views_made == "pil" else "device",
        augment=key.augment,
        seed=key.seed,
        limit=key.limit,
        listing=key.listing,
        cache_dir=Path(store) / "text",
        progress=progress,
    )
    if batch_size is not None:
        kwargs["batch_size"] = batch_size
    if workers is not None:
        kwargs["workers"] = workers
    with output_lock(path, "--store"):
        log.info("extracting %s for %s into %s", key.dataset, key.backbone.label, path)
        return extract.run_extraction(key.dataset, path, data_root, clip=models.get(key.backbone), **kwargs).path


def _check_views_made(path: Path, key: FeatureKey) -> None:
    """A file written before view paths had their own names may hold tensor views under PIL's name:
    refuse it rather than mix pixel paths (its meta says where its views were made)."""
    from ..features.format import read_meta

    if key.views > 1 and key.views_made == "pil" and read_meta(path).get("views_on") == "device":
        raise UserError(
            f"--store: {path} holds views made on tensors (--views-on device), not by PIL as this run asks "
            f"(--views-on cpu, or auto without CUDA); move it to the same name ending in "
            f"{VIEW_SUFFIX['gpu']}.npz if it was made on a GPU ({VIEW_SUFFIX['cpu-tensors']}.npz on a CPU), "
            "or delete it to re-extract"
        )


def check_stored(path: Path, key: FeatureKey, data_root: str | Path | None) -> None:
    """A stored file is the one its name promises: a readable archive whose meta holds `key`'s
    settings and whose class names are the dataset's (when its split can be read here), so a file
    cut short or copied from another dataset is refused, naming it, never replayed."""
    from ..features.format import peek_features

    fix = "delete it to re-extract"
    try:
        peek = peek_features(path)
    except UserError as exc:
        raise UserError(f"--store: {one_line(exc)}; {fix}") from None
    want = stored_settings(key)
    diff = [f"{k} {peek.meta[k]!r} (asked: {v!r})" for k, v in want.items() if k in peek.meta and peek.meta[k] != v]
    if diff:
        raise UserError(f"--store: {path} holds other features than its name says: {'; '.join(diff[:3])}; {fix}")
    split = _split(key, data_root)
    if split is None:
        return
    names, got, classes = list(split.classnames), peek.classnames, peek.text[0]
    if classes != len(names) or (got is not None and got != names):
        shown = ", ".join((got or [])[:3]) or "no names"
        raise UserError(
            f"--store: {path} holds {classes} classes ({shown}), but {key.dataset} has {len(names)} "
            f"({', '.join(names[:3])}): another dataset's file; {fix}"
        )
    want_hash = _stream_hash(split, key, data_root) if "stream_hash" in peek.meta else None
    if want_hash is not None and peek.meta["stream_hash"] != want_hash:
        raise UserError(
            f"--store: {path} holds another stream of images than {key.dataset}'s (its stream_hash "
            f"{str(peek.meta['stream_hash'])[:16]!r}, the dataset's {want_hash!r}): the images changed or "
            f"it is another dataset's file; {fix}"
        )


def stored_settings(key: FeatureKey) -> dict[str, Any]:
    """What a stored file's meta must say for `key` (`mstta.features.extract_settings.ExtractSettings`' names)."""
    from ..data import resolve_key

    try:
        dataset = resolve_key(key.dataset)
    except UserError:
        dataset = key.dataset
    want: dict[str, Any] = {
        "dataset": dataset,
        "model": key.backbone.name,
        "pretrained": key.backbone.pretrained,
        "precision": key.precision,
        "views": key.views,
        "seed": key.seed,
        "limit": key.limit,
        "listing": key.listing,
    }
    if key.views > 1:  # one view: no augmentation (one file serves every augment)
        want["augment"] = key.augment
    return want


def _split(key: FeatureKey, data_root: str | Path | None):
    """The dataset's split when it can be read here (else None: a store serves without its data)."""
    from ..data import load_split

    try:
        return load_split(key.dataset, data_root, key.listing)
    except UserError:
        return None


def _stream_hash(split, key: FeatureKey, data_root: str | Path | None) -> str:
    """The `stream_hash` an extraction of `key` writes (`mstta.features.extract.plan`): ordered images, labels."""
    from ..data import FOLDER_PREFIX
    from ..features.extract import stream_hash, stream_order

    order = stream_order(len(split), key.seed)[: key.limit]
    folder = split.key.startswith(FOLDER_PREFIX)
    base = Path(split.key[len(FOLDER_PREFIX) :]) if folder else Path(data_root or ".")
    return stream_hash(split, order, base.expanduser())
