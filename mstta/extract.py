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
"""
from __future__ import annotations

import datetime
import hashlib
import json
import logging
import math
import os
import shutil
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch

from ._version import __version__
from .atomic import atomic_open, hidden_name, sweep_stale
from .config import MAX_VIEWS
from .data import FOLDER_PREFIX, TestSplit, check_listing, load_split
from .devices import resolve_device
from .errors import UserError
from .extract_views import ViewSource, collate, on_device, resolve_views_on
from .features import save_features
from .models import ClipModel, build_text_classifier, default_precision, load_clip, pretrained_id
from .templates import check_templates, template_hash
from .tensor_views import TensorViewMaker
from .views import AUGMENTS, ViewMaker, split_preprocess, to_pixels

log = logging.getLogger(__name__)

SHARD_IMAGES = 4096            # default shard size, in encoded images (samples x views)
MAX_SKIPPED_LISTED = 20        # unreadable image paths recorded in `meta`


@dataclass(frozen=True)
class ExtractSettings:
    """Everything that determines a feature file's content; equal settings -> the same file."""

    dataset: str
    model: str
    pretrained: str
    weights: str               # pretrained_id: tag, checkpoint path+size+mtime, or seeded random init
    precision: str
    views: int
    augment: str
    seed: int
    template_hash: str
    limit: int | None
    stream_hash: str           # hash of the ordered (relative path, label) stream
    listing: str = "full"      # full | peer (`mstta.data.load_split`)

    def diff(self, meta: dict) -> list[str]:
        """'key: old -> new' for every setting that differs from a file's meta (files written before
        `listing` existed hold the full listing)."""
        old = {"listing": "full", **meta}
        return [f"{k}: {old.get(k)!r} -> {v!r}" for k, v in asdict(self).items() if old.get(k) != v]


@dataclass
class ExtractResult:
    """What an extraction produced: the file, whether it was reused, counts, and encoded images (samples x views) per s."""

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
    """`{dataset}_{model}_{pretrained}_v{views}_s{seed}[_n{limit}].npz` (names made file-safe)."""
    dataset = (f"imagefolder-{Path(s.dataset[len(FOLDER_PREFIX):]).name}" if s.dataset.startswith(FOLDER_PREFIX)
               else s.dataset)
    pretrained = Path(s.pretrained).stem if os.sep in s.pretrained else s.pretrained
    limit = f"_n{s.limit}" if s.limit else ""
    listing = f"_{s.listing}" if s.listing != "full" else ""
    return f"{_safe(dataset)}_{_safe(s.model)}_{_safe(pretrained)}_v{s.views}_s{s.seed}{limit}{listing}.npz"


def resolve_out(out: str | Path, s: ExtractSettings) -> Path:
    """--out FILE.npz is used as is; anything else is a folder that gets `default_file_name`."""
    p = Path(out).expanduser()
    if p.suffix == ".npz":
        return p
    if p.is_file():
        raise UserError(f"--out {p}: exists and is a file; pass a folder or a path ending in .npz")
    return p / default_file_name(s)


def read_meta(path: Path) -> dict | None:
    """The `meta` object of an existing feature file; None when the file is not a readable one."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            return json.loads(str(npz["meta"])) if "meta" in npz.files else {}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError, json.JSONDecodeError):
        return None


def check_existing(out: Path, s: ExtractSettings) -> bool:
    """True when `out` already holds these settings (reuse it); an error when it holds anything else."""
    if not out.exists():
        return False
    meta = read_meta(out) if out.is_file() else None
    if meta is None:
        raise UserError(f"--out {out}: exists but is not a feature file; delete it or pass a different --out")
    diff = s.diff(meta)
    if diff:
        raise UserError(f"--out {out}: exists with different settings ({'; '.join(diff[:4])}); "
                        "pass a different --out or delete the file")
    return True


# --- distributed -------------------------------------------------------------------------------


@dataclass
class _Dist:
    rank: int = 0
    world: int = 1
    owned: bool = False        # we initialised the process group (and destroy it)

    def barrier(self) -> None:
        if self.world > 1:
            torch.distributed.barrier()

    def close(self) -> None:
        if self.owned and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def _start_dist(device: str | torch.device) -> tuple[_Dist, torch.device]:
    """Join torchrun's process group (gloo on CPU, nccl on CUDA) and pick this rank's device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return _Dist(), resolve_device(device)
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = resolve_device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", local % torch.cuda.device_count())
    owned = not dist.is_initialized()
    if owned:
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", timeout=datetime.timedelta(hours=12))
    return _Dist(dist.get_rank(), dist.get_world_size(), owned), dev


# --- shards --------------------------------------------------------------------------------------


def _shard_path(work: Path, k: int) -> Path:
    return work / f"shard-{k:06d}.npz"


def _prepare_work(work: Path, s: ExtractSettings) -> None:
    """Create the work folder for these settings; a stale one (other settings) is discarded."""
    marker = work / "settings.json"
    want = json.dumps(asdict(s), sort_keys=True)
    if work.is_dir():
        try:
            same = marker.read_text(encoding="utf-8") == want
        except OSError:
            same = False
        if same:
            done = len(list(work.glob("shard-*.npz")))
            if done:
                log.warning("resuming: %d completed shard(s) in %s", done, work)
            return
        log.warning("discarding partial work for other settings in %s", work)
        shutil.rmtree(work)
    work.mkdir(parents=True)
    with atomic_open(marker, "w") as fh:
        fh.write(want)


def _write_shard(path: Path, positions: list[int], feats: list[np.ndarray], skipped: list[tuple[int, str]]) -> None:
    arrays = {"positions": np.asarray(positions, np.int64),
              "features": np.concatenate(feats) if feats else np.zeros((0, 0, 0), np.float16),
              "skipped": np.asarray([p for p, _ in skipped], np.int64),
              "reasons": np.asarray([r for _, r in skipped] or [""])}
    with atomic_open(path, "wb") as fh:
        np.savez(fh, **arrays)


def _batches(shards: list[int], shard_size: int, n: int, per_batch: int) -> Iterator[list[int]]:
    """Stream positions in batches that never cross a shard boundary."""
    for k in shards:
        lo, hi = k * shard_size, min(n, (k + 1) * shard_size)
        for b in range(lo, hi, per_batch):
            yield list(range(b, min(hi, b + per_batch)))


def _encode(clip: ClipModel, views: torch.Tensor, mean, std, batch_size: int) -> np.ndarray:
    """uint8 [B, V, 3, S, S] -> fp16 features [B, V, d], at most `batch_size` images per forward."""
    b, v = views.shape[:2]
    flat = views.reshape(b * v, *views.shape[2:])
    out = [clip.encode_images(to_pixels(flat[i:i + batch_size], mean, std, clip.device, clip.dtype))
           for i in range(0, b * v, batch_size)]
    return torch.cat(out).view(b, v, -1).half().cpu().numpy()


def _run_shards(clip: ClipModel, split: TestSplit, order: list[int], shards: list[int], work: Path,
                s: ExtractSettings, shard_size: int, batch_size: int, workers: int, progress: bool,
                views_on: str = "cpu") -> None:
    """Encode the given shards of the stream, writing each one as soon as it is complete; views made
    where `views_on` says (`mstta.extract_views`)."""
    geometry, size, mean, std = split_preprocess(clip.preprocess)
    maker = ViewMaker(geometry, size, s.views, s.augment, s.seed)
    on_gpu = TensorViewMaker(maker) if views_on == "device" and clip.device.type == "cuda" else None
    per_batch = max(1, batch_size // s.views)
    n = len(order)
    loader = torch.utils.data.DataLoader(
        ViewSource([p for p, _ in split.items], order, maker, views_on, clip.device),
        batch_sampler=list(_batches(shards, shard_size, n, per_batch)),
        num_workers=workers, collate_fn=collate, pin_memory=clip.device.type == "cuda")
    total = sum(min(n, (k + 1) * shard_size) - k * shard_size for k in shards)
    from tqdm import tqdm

    bar = tqdm(total=total, unit="img", desc=f"extract {s.dataset}", disable=None if progress else True,
               dynamic_ncols=True)  # None: shown on a terminal only
    buf: dict[int, tuple[list, list, list]] = {}
    t0 = time.perf_counter()
    try:
        for positions, views, failed in loader:
            k = (positions or [p for p, _ in failed])[0] // shard_size
            if on_gpu is not None and views is not None:
                positions, views, more = on_device(positions, views, on_gpu, clip.device)
                failed = failed + more
            pos, feats, skipped = buf.setdefault(k, ([], [], []))
            if views is not None:
                feats.append(_encode(clip, views, mean, std, batch_size))
                pos.extend(positions)
            skipped.extend(failed)
            bar.update(len(positions) + len(failed))
            if s.views > 1:
                bar.set_postfix(views_s=f"{bar.n * s.views / max(time.perf_counter() - t0, 1e-9):.0f}")
            if len(pos) + len(skipped) == min(n, (k + 1) * shard_size) - k * shard_size:
                _write_shard(_shard_path(work, k), pos, feats, skipped)
                del buf[k]
    finally:
        bar.close()


def _merge(work: Path, out: Path, shards: int, split: TestSplit, order: list[int], text: torch.Tensor,
           meta: dict) -> tuple[int, int]:
    """Concatenate the shards in stream order into the final feature file; (kept, skipped)."""
    positions, feats, skipped, reasons = [], [], [], []
    for k in range(shards):
        path = _shard_path(work, k)
        if not path.is_file():
            raise UserError(f"shard {path} is missing after every rank finished; rerun the same command to resume")
        with np.load(path, allow_pickle=False) as z:
            if len(z["positions"]):
                positions.append(z["positions"])
                feats.append(z["features"])
            skipped.extend(z["skipped"].tolist())
            reasons.extend(z["reasons"].tolist()[:len(z["skipped"])])
    if not positions:
        raise UserError(f"dataset {split.key}: none of the {len(order)} images could be read "
                        f"(first: {reasons[0] if reasons else '?'}); check the image files")
    pos = np.concatenate(positions)
    features = np.concatenate(feats)
    if features.shape[1] == 1:
        features = features[:, 0]
    labels = np.asarray([split.items[order[p]][1] for p in pos.tolist()], np.int64)
    meta = {**meta, "n": int(len(pos)), "skipped": len(skipped), "skipped_paths": reasons[:MAX_SKIPPED_LISTED],
            "classes": split.num_classes, "dim": int(features.shape[-1])}
    save_features(out, features, text.cpu(), labels=labels, classnames=split.classnames, meta=meta)
    if skipped:
        log.warning("skipped %d unreadable image(s) of %d (first: %s)", len(skipped), len(order), reasons[0])
    return len(pos), len(skipped)


def _check_out(out: Path, split: TestSplit, data_root: str | Path | None) -> None:
    """--out is a regular-file path that is none of the split's images, and not inside the dataset
    folder (`mstta.safety.check_outputs`)."""
    from .safety import check_outputs

    check_outputs({"--out": out})
    base = (Path(split.key[len(FOLDER_PREFIX):]) if split.key.startswith(FOLDER_PREFIX)
            else Path(data_root) if data_root else None)
    if base is not None:
        b, o = base.expanduser().resolve(), out.expanduser().resolve()
        if b == o or b in o.parents:
            raise UserError(f"--out {out}: is inside the dataset folder {base}; write features elsewhere")


def default_workers(world: int = 1) -> int:
    """Data-loader workers per process: the CPU cores left over, at most 8."""
    return max(1, min(8, (os.cpu_count() or 2) // max(world, 1) - 1))


def plan(dataset: str, data_root: str | Path | None, *, model: str, pretrained: str, precision: str | None,
         device: str, views: int, augment: str, seed: int, limit: int | None,
         templates: Sequence[str] | None, listing: str = "full"
         ) -> tuple[TestSplit, list[str], list[int], ExtractSettings]:
    """Validate the options and read the split: (split, templates, stream order, settings)."""
    if isinstance(views, bool) or not isinstance(views, int) or not 1 <= views <= MAX_VIEWS:
        raise UserError(f"--views {views}: expected an integer from 1 to {MAX_VIEWS} (1 = the original image only)")
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise UserError(f"--limit {limit}: expected an integer >= 1")
    if augment not in AUGMENTS:
        raise UserError(f"--augment {augment}: choose one of {', '.join(AUGMENTS)}")
    check_listing(listing)
    split = load_split(dataset, data_root, listing)
    if split.num_classes < 2:
        raise UserError(f"--dataset {dataset}: has {split.num_classes} class ({', '.join(split.classnames)}); "
                        "a feature file needs at least 2 classes (replay ranks classes); add class folders")
    tmpl = check_templates(templates) if templates else split.templates
    order = stream_order(len(split), seed)[:limit]
    base = Path(split.key[len(FOLDER_PREFIX):]) if split.key.startswith(FOLDER_PREFIX) else Path(data_root or ".")
    s = ExtractSettings(split.key, model, str(pretrained), pretrained_id(model, pretrained),
                        precision or default_precision(resolve_device(device)), views,
                        augment if views > 1 else "none", int(seed), template_hash(tmpl), limit,
                        stream_hash(split, order, base.expanduser()), listing)
    return split, tmpl, order, s


def run_extraction(dataset: str, out: str | Path, data_root: str | Path | None = None, *, model: str = "ViT-B-16",
                   pretrained: str = "openai", precision: str | None = None, device: str = "auto", views: int = 1,
                   augment: str = "augmix", seed: int = 1, batch_size: int = 256, workers: int | None = None,
                   limit: int | None = None, templates: Sequence[str] | None = None,
                   cache_dir: str | Path | None = None, shard_size: int | None = None,
                   progress: bool = False, clip: ClipModel | None = None, listing: str = "full",
                   views_on: str = "auto") -> ExtractResult:
    """Extract a feature file (see module docstring); returns where it is and what was done.

    `clip`: an already loaded model for (model, pretrained, precision), used instead of loading one.
    `views_on`: auto | cpu | device (`mstta.extract_views`); in the file's meta, not its settings.
    """
    for flag, value, low in (("--batch-size", batch_size, 1), ("--shard-size", shard_size, 1), ("--workers", workers, 0)):
        if value is not None and (not isinstance(value, int) or value < low):
            raise UserError(f"{flag} {value}: expected an integer >= {low}")
    split, tmpl, order, s = plan(dataset, data_root, model=model, pretrained=pretrained, precision=precision,
                                 device=device, views=views, augment=augment, seed=seed, limit=limit,
                                 templates=templates, listing=listing)
    if clip is not None and (clip.name, clip.pretrained, clip.precision) != (model, str(pretrained), s.precision):
        raise UserError(f"the loaded model is {clip.name} {clip.pretrained} {clip.precision}, but the extraction asks "
                        f"for {model} {pretrained} {s.precision}; pass the matching model")
    where = resolve_views_on(views_on, resolve_device(device)) if views > 1 else "cpu"   # 1 view: CLIP's own, PIL
    out_path = resolve_out(out, s)
    _check_out(out_path, split, data_root)
    if check_existing(out_path, s):
        log.info("reusing %s: it already holds these settings", out_path)
        return ExtractResult(out_path, True, len(order), 0, 0.0, 0.0)
    dist, dev = _start_dist(device)
    try:
        clip = clip if clip is not None else load_clip(model, pretrained, dev, s.precision)  # before any write
        text = build_text_classifier(clip, split.classnames, tmpl, cache_dir) if dist.rank == 0 else None
        t0 = time.perf_counter()                                    # images/s: encoding and merging only
        shard_size = shard_size or max(1, SHARD_IMAGES // views)
        n_shards = math.ceil(len(order) / shard_size)
        work = out_path.parent / hidden_name(out_path.name, ".work")
        if dist.rank == 0:
            sweep_stale(out_path.parent)
            _prepare_work(work, s)
            sweep_stale(work)
        dist.barrier()
        mine = [k for k in range(n_shards) if k % dist.world == dist.rank and not _shard_path(work, k).is_file()]
        encoded = sum(min(len(order), (k + 1) * shard_size) - k * shard_size for k in mine) * dist.world
        if mine:
            _run_shards(clip, split, order, mine, work, s, shard_size, batch_size,
                        default_workers(dist.world) if workers is None else workers, progress and dist.rank == 0,
                        where)
        dist.barrier()
        kept, skipped = len(order), 0
        if dist.rank == 0:
            meta = {**asdict(s), "templates": len(tmpl), "version": __version__,
                    "stream": f"torch.randperm(n, seed={s.seed})", "data_root": str(data_root or ""),
                    "views_on": where}
            kept, skipped = _merge(work, out_path, n_shards, split, order, text, meta)
            shutil.rmtree(work, ignore_errors=True)
    finally:
        dist.close()
    seconds = time.perf_counter() - t0
    return ExtractResult(out_path, False, kept, skipped, seconds, encoded * views / max(seconds, 1e-9))


def extract_features(dataset: str, out: str | Path, data_root: str | Path | None = None, **kwargs) -> Path:
    """Extract `dataset`'s test split into a feature file (keyword options as `run_extraction`); its path."""
    return run_extraction(dataset, out, data_root, **kwargs).path
