"""Feature extraction: a dataset's test split -> one feature file in the replay format.

Stream order is a seeded shuffle of the sorted test split (`torch.randperm(n)` seeded with `seed`;
seed 1 is the default). No seed reproduces the peers' order: theirs is a DataLoader's second
random draw over an unsorted directory listing. The stream is cut into shards of `shard_size` samples; each completed
shard is written (atomically) into a hidden work folder next to the output, so an interrupted run
resumes from its last completed shard. Under `torchrun` each rank encodes the shards
`k % world_size == rank` into the same work folder (one machine, or a shared file system), and rank
0 merges them in stream order into the final file (temp + rename), then deletes the work folder.
An interrupted shard write leaves nothing (its temp file is removed on Ctrl-C/SIGTERM), and a dead
process's leftovers are swept (`mstta.atomic.sweep_stale`) before anything is written.
Batches never cross a shard, so single-process and multi-rank runs compute identical features.
Shard files, their checks and the merge are `mstta.features.shards`.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import torch

from .._version import __version__
from ..atomic import hidden_name, output_lock, sweep_stale
from ..checks import int_in
from ..data import FOLDER_PREFIX, TestSplit, check_listing, load_split
from ..data.templates import check_templates, template_hash
from ..errors import UserError
from .devices import resolve_device
from .extract_encode import Dist, run_shards, start_dist
from .extract_settings import ExtractSettings
from .extract_views import resolve_views_on
from .format import read_meta
from .models import (
    BUNDLED_TAG,
    DEFAULT_MODEL,
    ClipModel,
    build_text_classifier,
    checkpoint_sha256,
    default_precision,
    load_clip,
    pretrained_id,
    recorded_tag,
)
from .shards import check_shards, merge_shards, prepare_work, shard_path
from .views import AUGMENTS, MAX_VIEWS

log = logging.getLogger(__name__)

SHARD_IMAGES = 4096  # default shard size, in encoded images (samples x views)
MAX_BATCH = 65536  # --batch-size: images per encoder forward (docs/limits.md)
MAX_SHARD = 1 << 20  # --shard-size: samples per shard, held in memory until written
MAX_WORKERS = 256  # --workers: data-loader processes
MAX_LIMIT = 2**31 - 1  # --limit: samples


@dataclass
class ExtractResult:
    """What an extraction produced: the file, whether it was reused, counts, and encoded images
    (samples x views) per s."""

    path: Path
    reused: bool
    n: int
    skipped: int
    seconds: float
    images_per_s: float


def stream_order(n: int, seed: int) -> list[int]:
    """The seeded shuffle of a split of n items (the stream order)."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(int(seed))).tolist()


def _relative(path: Path, base: Path) -> str:
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)


def stream_hash(split: TestSplit, order: Sequence[int], base: Path) -> str:
    """Hash of the ordered (path relative to `base`, label) stream: changes when the data or order does."""
    h = hashlib.sha256()
    for i in order:
        path, label = split.items[i]
        h.update(f"{_relative(path, base)}\t{label}\n".encode("utf-8"))
    return h.hexdigest()[:16]


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in text).strip("-.") or "x"


def default_file_name(s: ExtractSettings) -> str:
    """`{dataset}_{model}_{pretrained}_v{views}[-{augment}]_s{seed}[_n{limit}].npz` (names made file-safe;
    the view kind with more than one view, so crop and AugMix files of the same V never collide)."""
    dataset = (
        f"imagefolder-{Path(s.dataset[len(FOLDER_PREFIX) :]).name}"
        if s.dataset.startswith(FOLDER_PREFIX)
        else s.dataset
    )
    pretrained = Path(s.pretrained).stem if os.sep in s.pretrained else s.pretrained
    limit = f"_n{s.limit}" if s.limit else ""
    listing = f"_{s.listing}" if s.listing != "full" else ""
    kind = f"-{s.augment}" if s.views > 1 else ""
    return f"{_safe(dataset)}_{_safe(s.model)}_{_safe(pretrained)}_v{s.views}{kind}_s{s.seed}{limit}{listing}.npz"


def resolve_out(out: str | Path, s: ExtractSettings, flag: str = "--out") -> Path:
    """--out FILE.npz is used as is; anything else is a folder that gets `default_file_name`."""
    p = Path(out).expanduser()
    if p.suffix == ".npz":
        return p
    if p.is_file():
        raise UserError(f"{flag} {p}: exists and is a file; pass a folder or a path ending in .npz")
    return p / default_file_name(s)


def check_existing(out: Path, s: ExtractSettings, flag: str = "--out") -> bool:
    """True when `out` already holds these settings (reuse it); an error when it holds anything else."""
    if not out.exists():
        return False
    try:
        meta = read_meta(out) if out.is_file() else None
    except UserError:
        meta = None
    if meta is None:
        raise UserError(f"{flag} {out}: exists but is not a feature file; delete it or pass a different {flag}")
    diff = s.diff(meta)
    if diff:
        raise UserError(
            f"{flag} {out}: exists with different settings ({'; '.join(diff[:4])}); "
            f"pass a different {flag} or delete the file"
        )
    return True


def _check_out(out: Path, split: TestSplit, data_root: str | Path | None, flag: str = "--out") -> None:
    """--out is a regular-file path that is none of the split's images, and not inside the dataset
    folder (`mstta.safety.check_outputs`)."""
    from ..safety import check_outputs

    check_outputs({flag: out})
    base = (
        Path(split.key[len(FOLDER_PREFIX) :])
        if split.key.startswith(FOLDER_PREFIX)
        else Path(data_root)
        if data_root
        else None
    )
    if base is not None:
        b, o = base.expanduser().resolve(), out.expanduser().resolve()
        if b == o or b in o.parents:
            raise UserError(f"{flag} {out}: is inside the dataset folder {base}; write features elsewhere")


def default_workers(world: int = 1) -> int:
    """Data-loader workers per process: the CPU cores left over, at most 8."""
    return max(1, min(8, (os.cpu_count() or 2) // max(world, 1) - 1))


def plan(
    dataset: str,
    data_root: str | Path | None,
    *,
    model: str,
    pretrained: str,
    precision: str | None,
    device: str,
    views: int,
    augment: str,
    seed: int,
    limit: int | None,
    templates: Sequence[str] | None,
    listing: str = "full",
) -> tuple[TestSplit, list[str], list[int], ExtractSettings]:
    """Validate the options and read the split: (split, templates, stream order, settings)."""
    int_in(views, "--views", 1, MAX_VIEWS, " (1 = the original image only)")
    if limit is not None:
        int_in(limit, "--limit", 1, MAX_LIMIT)
    if augment not in AUGMENTS:
        raise UserError(f"--augment {augment}: choose one of {', '.join(AUGMENTS)}")
    check_listing(listing)
    split = load_split(dataset, data_root, listing)
    if split.num_classes < 2:
        raise UserError(
            f"--dataset {dataset}: has {split.num_classes} class ({', '.join(split.classnames)}); "
            "a feature file needs at least 2 classes (replay ranks classes); add class folders"
        )
    pretrained = recorded_tag(model, str(pretrained))  # `bundled`, not the CLIs' default `openai`
    tmpl = check_templates(templates) if templates else split.templates
    order = stream_order(len(split), seed)[:limit]
    base = Path(split.key[len(FOLDER_PREFIX) :]) if split.key.startswith(FOLDER_PREFIX) else Path(data_root or ".")
    s = ExtractSettings(
        split.key,
        model,
        str(pretrained),
        pretrained_id(model, pretrained),
        precision or default_precision(resolve_device(device)),
        views,
        augment if views > 1 else "none",
        int(seed),
        template_hash(tmpl),
        limit,
        stream_hash(split, order, base.expanduser()),
        listing,
    )
    return split, tmpl, order, s


def run_extraction(
    dataset: str,
    out: str | Path,
    data_root: str | Path | None = None,
    *,
    model: str = DEFAULT_MODEL,
    pretrained: str = "openai",
    precision: str | None = None,
    device: str = "auto",
    views: int = 1,
    augment: str = "augmix",
    seed: int = 1,
    batch_size: int = 256,
    workers: int | None = None,
    limit: int | None = None,
    templates: Sequence[str] | None = None,
    cache_dir: str | Path | None = None,
    shard_size: int | None = None,
    progress: bool = False,
    clip: ClipModel | None = None,
    listing: str = "full",
    views_on: str = "auto",
    flag: str = "--out",
) -> ExtractResult:
    """Extract a feature file (see module docstring); returns where it is and what was done.

    `clip`: an already loaded model for (model, pretrained, precision), used instead of loading one.
    `views_on`: auto | cpu | device (`mstta.features.extract_views`); in the file's meta, not its settings.
    `flag`: the option that named `out`, for messages. The output file (symlinks and `..` resolved,
    whether `out` named it or its folder) has one writer: a second extraction into it is refused
    (`mstta.atomic.output_lock`) before it writes anything.
    """
    _check_run_sizes(batch_size, shard_size, workers)
    split, tmpl, order, s = plan(
        dataset,
        data_root,
        model=model,
        pretrained=pretrained,
        precision=precision,
        device=device,
        views=views,
        augment=augment,
        seed=seed,
        limit=limit,
        templates=templates,
        listing=listing,
    )
    _check_loaded_model(clip, model, s.pretrained, s.precision)
    where = resolve_views_on(views_on, resolve_device(device)) if views > 1 else "cpu"  # 1 view: CLIP's own, PIL
    enc = _Encoding(
        device, batch_size, workers, cache_dir, shard_size or max(1, SHARD_IMAGES // views), progress, where
    )
    return _extract_once(
        resolve_out(out, s, flag), flag, split, tmpl, order, s, data_root, enc, clip, (model, pretrained)
    )


@dataclass(frozen=True)
class _Encoding:
    """How an extraction encodes (none of it changes the file's content): device, sizes, workers, caches."""

    device: str
    batch_size: int
    workers: int | None
    cache_dir: str | Path | None
    shard_size: int
    progress: bool
    where: str  # where views are made: cpu | device (`mstta.features.extract_views`)


def _extract_once(
    out_path: Path,
    flag: str,
    split: TestSplit,
    tmpl: list[str],
    order: list[int],
    s: ExtractSettings,
    data_root: str | Path | None,
    enc: _Encoding,
    clip: ClipModel | None,
    weights: tuple[str, str],
) -> ExtractResult:
    """Check the output path, then under its lock reuse a file with these settings or extract it."""
    _check_out(out_path, split, data_root, flag)
    real = Path(os.path.realpath(out_path))  # one writer, one work folder, however `out` is spelled
    with output_lock(real, flag):
        if check_existing(out_path, s, flag):
            log.info("reusing %s: it already holds these settings", out_path)
            return ExtractResult(out_path, True, len(order), 0, 0.0, 0.0)
        kept, skipped, encoded, seconds = _extract(split, tmpl, order, s, real, data_root, enc, clip, weights)
    return ExtractResult(out_path, False, kept, skipped, seconds, encoded * s.views / max(seconds, 1e-9))


def _check_run_sizes(batch_size: int, shard_size: int | None, workers: int | None) -> None:
    """Refuse a batch size, shard size or worker count outside its bounds (docs/limits.md)."""
    for name, value, low, high in (
        ("--batch-size", batch_size, 1, MAX_BATCH),
        ("--shard-size", shard_size, 1, MAX_SHARD),
        ("--workers", workers, 0, MAX_WORKERS),
    ):
        if value is not None:
            int_in(value, name, low, high)


def _check_loaded_model(clip: ClipModel | None, model: str, pretrained: str, precision: str) -> None:
    """Refuse a preloaded model other than the (model, pretrained, precision) the extraction asks for."""
    if clip is not None and (clip.name, clip.pretrained, clip.precision) != (model, str(pretrained), precision):
        raise UserError(
            f"the loaded model is {clip.name} {clip.pretrained} {clip.precision}, but the extraction asks "
            f"for {model} {pretrained} {precision}; pass the matching model"
        )


def _extract(
    split: TestSplit,
    tmpl: list[str],
    order: list[int],
    s: ExtractSettings,
    out_path: Path,
    data_root: str | Path | None,
    enc: _Encoding,
    clip: ClipModel | None,
    weights: tuple[str, str],
) -> tuple[int, int, int, float]:
    """Encode the missing shards and merge them into `out_path` (its writer holds its lock):
    (kept, skipped, encoded samples, seconds)."""
    dist, dev = start_dist(enc.device)
    try:
        clip = clip if clip is not None else load_clip(*weights, dev, s.precision)  # before any write
        text = build_text_classifier(clip, split.classnames, tmpl, enc.cache_dir) if dist.rank == 0 else None
        t0 = time.perf_counter()  # images/s: encoding and merging only
        work = out_path.parent / hidden_name(out_path.name, ".work")
        if dist.rank == 0:
            _prepare_shards(work, out_path, s, enc.shard_size, len(order), int(text.shape[-1]))
        dist.barrier()
        encoded = _encode_missing(clip, split, order, work, s, enc, dist)
        dist.barrier()
        kept, skipped = len(order), 0
        if dist.rank == 0:
            meta = _file_meta(s, tmpl, data_root, enc.where, clip)
            kept, skipped = merge_shards(work, out_path, s, enc.shard_size, split, order, text, meta)
            shutil.rmtree(work, ignore_errors=True)
    finally:
        dist.close()
    return kept, skipped, encoded, time.perf_counter() - t0


def _prepare_shards(work: Path, out_path: Path, s: ExtractSettings, shard_size: int, n: int, dim: int) -> None:
    """Rank 0, before any encoding: sweep dead writers' leftovers, ready the work folder, drop bad
    shards (of another width than the model's `dim` too)."""
    sweep_stale(out_path.parent)
    prepare_work(work, s)
    sweep_stale(work)
    check_shards(work, s, shard_size, n, dim)


def _encode_missing(
    clip: ClipModel, split: TestSplit, order: list[int], work: Path, s: ExtractSettings, enc: _Encoding, dist: Dist
) -> int:
    """Encode this rank's shards not yet on disk; the samples all ranks encode. A refusal (not an
    interrupt) of a single-process run deletes the work folder: a rerun would refuse again."""
    shard_size = enc.shard_size
    n_shards = math.ceil(len(order) / shard_size)
    mine = [k for k in range(n_shards) if k % dist.world == dist.rank and not shard_path(work, k).is_file()]
    encoded = sum(min(len(order), (k + 1) * shard_size) - k * shard_size for k in mine) * dist.world
    if mine:
        try:
            run_shards(
                clip,
                split,
                order,
                mine,
                work,
                s,
                shard_size,
                enc.batch_size,
                default_workers(dist.world) if enc.workers is None else enc.workers,
                enc.progress and dist.rank == 0,
                enc.where,
            )
        except UserError:  # a refusal (not an interrupt): a rerun refuses again, keep nothing
            if dist.world == 1:
                shutil.rmtree(work, ignore_errors=True)
            raise
    return encoded


def _file_meta(s: ExtractSettings, tmpl: list[str], data_root: str | Path | None, where: str, clip: ClipModel) -> dict:
    """The feature file's meta beyond its counts: the settings, how the file was made, the checkpoint's
    own logit scale (Eq. 1: what replay, run, field and sweep default to) and a bundled checkpoint's hash."""
    return {
        **asdict(s),
        "logit_scale": float(clip.logit_scale),
        **({"weights_sha256": checkpoint_sha256(s.model)} if s.pretrained == BUNDLED_TAG else {}),
        "templates": len(tmpl),
        "version": __version__,
        "stream": f"torch.randperm(n, seed={s.seed})",
        "data_root": str(data_root or ""),
        "views_on": where,
    }


def extract_features(dataset: str, out: str | Path, data_root: str | Path | None = None, **kwargs) -> Path:
    """Extract `dataset`'s test split into a feature file (keyword options as `run_extraction`); its path."""
    return run_extraction(dataset, out, data_root, **kwargs).path
