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
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator, Sequence

import numpy as np
import torch

from ._version import __version__
from .atomic import atomic_open, hidden_name, output_lock, sweep_stale
from .checks import check_int
from .config import MAX_VIEWS
from .data import FOLDER_PREFIX, TestSplit, check_listing, load_split
from .devices import resolve_device
from .errors import UserError
from .extract_views import ViewSource, collate, on_device, resolve_views_on
from .features import read_meta, save_features
from .models import DEFAULT_MODEL, ClipModel, build_text_classifier, default_precision, load_clip, pretrained_id
from .templates import check_templates, template_hash
from .tensor_views import TensorViewMaker
from .views import AUGMENTS, ViewMaker, split_preprocess, to_pixels

log = logging.getLogger(__name__)

SHARD_IMAGES = 4096  # default shard size, in encoded images (samples x views)
MAX_SKIPPED_LISTED = 20  # unreadable image paths recorded in `meta`
MAX_BATCH = 65536  # --batch-size: images per encoder forward (docs/limits.md)
MAX_SHARD = 1 << 20  # --shard-size: samples per shard, held in memory until written
MAX_WORKERS = 256  # --workers: data-loader processes
MAX_LIMIT = 2**31 - 1  # --limit: samples


@dataclass(frozen=True)
class ExtractSettings:
    """Everything that determines a feature file's content; equal settings -> the same file."""

    dataset: str
    model: str
    pretrained: str
    weights: str  # pretrained_id: tag, checkpoint path+size+mtime, or seeded random init
    precision: str
    views: int
    augment: str
    seed: int
    template_hash: str
    limit: int | None
    stream_hash: str  # hash of the ordered (relative path, label) stream
    listing: str = "full"  # full | peer (`mstta.data.load_split`)

    def diff(self, meta: dict) -> list[str]:
        """'key: old -> new' for every setting that differs from a file's meta (files written before
        `listing` existed hold the full listing)."""
        old = {"listing": "full", **meta}
        return [f"{k}: {old.get(k)!r} -> {v!r}" for k, v in asdict(self).items() if old.get(k) != v]


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
    """`{dataset}_{model}_{pretrained}_v{views}_s{seed}[_n{limit}].npz` (names made file-safe)."""
    dataset = (
        f"imagefolder-{Path(s.dataset[len(FOLDER_PREFIX) :]).name}"
        if s.dataset.startswith(FOLDER_PREFIX)
        else s.dataset
    )
    pretrained = Path(s.pretrained).stem if os.sep in s.pretrained else s.pretrained
    limit = f"_n{s.limit}" if s.limit else ""
    listing = f"_{s.listing}" if s.listing != "full" else ""
    return f"{_safe(dataset)}_{_safe(s.model)}_{_safe(pretrained)}_v{s.views}_s{s.seed}{limit}{listing}.npz"


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


# --- distributed -------------------------------------------------------------------------------


@dataclass
class _Dist:
    rank: int = 0
    world: int = 1
    owned: bool = False  # we initialised the process group (and destroy it)

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


def _settings_key(s: ExtractSettings) -> str:
    """The settings as the work folder's marker holds them (and, hashed, every shard)."""
    return json.dumps(asdict(s), sort_keys=True)


def _shard_stamp(s: ExtractSettings, k: int) -> str:
    """What shard `k` of a run with settings `s` carries: another run's shard (or another index) differs."""
    return f"{hashlib.sha256(_settings_key(s).encode()).hexdigest()[:32]}:{k}"


def _prepare_work(work: Path, s: ExtractSettings) -> None:
    """Create the work folder for these settings; a stale one (other settings) is discarded."""
    marker = work / "settings.json"
    want = _settings_key(s)
    if work.is_dir() and not work.is_symlink():
        try:
            same = marker.read_text(encoding="utf-8") == want
        except (OSError, UnicodeDecodeError):
            same = False
        if same:
            done = len(list(work.glob("shard-*.npz")))
            if done:
                log.warning("resuming: %d completed shard(s) in %s", done, work)
            return
        log.warning("discarding partial work for other settings in %s", work)
        shutil.rmtree(work)
    elif work.exists() or work.is_symlink():
        log.warning("discarding %s: not a work folder", work)
        work.unlink()
    work.mkdir(parents=True)
    with atomic_open(marker, "w") as fh:
        fh.write(want)


_SHARD_ARRAYS = {"positions", "features", "skipped", "reasons", "stamp"}


def _read_shard(path: Path, k: int, s: ExtractSettings, shard_size: int, n: int) -> dict | None:
    """Shard `k`'s arrays when the file is one this run wrote (checked by content: a readable archive
    stamped with these settings and this index, its positions and skipped ones exactly the shard's
    stream positions, one feature row of `s.views` finite values per kept position); else None."""
    lo, hi = k * shard_size, min(n, (k + 1) * shard_size)
    try:
        with np.load(path, allow_pickle=False) as z:
            if set(z.files) != _SHARD_ARRAYS or str(z["stamp"]) != _shard_stamp(s, k):
                return None
            got = {name: z[name] for name in _SHARD_ARRAYS}
    except Exception:  # a torn or foreign file of any kind: np.load raises many types; the shard is redone
        return None
    pos, skipped, feats = got["positions"], got["skipped"], got["features"]
    if pos.dtype.kind != "i" or skipped.dtype.kind != "i" or pos.ndim != 1 or skipped.ndim != 1:
        return None
    if sorted(pos.tolist() + skipped.tolist()) != list(range(lo, hi)):
        return None
    if len(pos) and (
        feats.ndim != 3
        or feats.shape[:2] != (len(pos), s.views)
        or feats.dtype != np.float16
        or not np.isfinite(feats).all()
    ):
        return None
    return got


def check_shards(work: Path, s: ExtractSettings, shard_size: int, n: int) -> list[int]:
    """Discard every shard file of the work folder that this run did not write (torn by a kill, another
    run's, a stray file under a shard's name), with one warning each; the indices of the good ones."""
    good = []
    for path in sorted(work.glob("shard-*.npz")):
        try:
            k = int(path.name[len("shard-") : -len(".npz")])
        except ValueError:
            k = -1
        if (
            0 <= k < math.ceil(n / shard_size)
            and path.is_file()
            and not path.is_symlink()
            and _read_shard(path, k, s, shard_size, n) is not None
        ):
            good.append(k)
            continue
        log.warning("discarding %s: torn, or not a shard of this extraction; it is encoded again", path)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return good


def _write_shard(
    path: Path, positions: list[int], feats: list[np.ndarray], skipped: list[tuple[int, str]], stamp: str
) -> None:
    arrays = {
        "positions": np.asarray(positions, np.int64),
        "features": np.concatenate(feats) if feats else np.zeros((0, 0, 0), np.float16),
        "skipped": np.asarray([p for p, _ in skipped], np.int64),
        "reasons": np.asarray([r for _, r in skipped] or [""]),
        "stamp": np.asarray(stamp),
    }
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
    out = [
        clip.encode_images(to_pixels(flat[i : i + batch_size], mean, std, clip.device, clip.dtype))
        for i in range(0, b * v, batch_size)
    ]
    feats = torch.cat(out)
    if not bool(torch.isfinite(feats).all()):  # never written: a feature file holds finite rows only
        raise UserError(
            f"--pretrained {clip.pretrained}: --model {clip.name} gives non-finite image features (NaN "
            f"or inf) in {clip.precision}: its weights overflow there; pass --precision fp32 or a "
            "checkpoint with finite weights"
        )
    return feats.view(b, v, -1).half().cpu().numpy()


def _run_shards(
    clip: ClipModel,
    split: TestSplit,
    order: list[int],
    shards: list[int],
    work: Path,
    s: ExtractSettings,
    shard_size: int,
    batch_size: int,
    workers: int,
    progress: bool,
    views_on: str = "cpu",
) -> None:
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
        num_workers=workers,
        collate_fn=collate,
        pin_memory=clip.device.type == "cuda",
    )
    total = sum(min(n, (k + 1) * shard_size) - k * shard_size for k in shards)
    from tqdm import tqdm

    bar = tqdm(
        total=total, unit="img", desc=f"extract {s.dataset}", disable=None if progress else True, dynamic_ncols=True
    )  # None: shown on a terminal only
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
                _write_shard(_shard_path(work, k), pos, feats, skipped, _shard_stamp(s, k))
                del buf[k]
    finally:
        bar.close()


def _merge(
    work: Path,
    out: Path,
    s: ExtractSettings,
    shard_size: int,
    split: TestSplit,
    order: list[int],
    text: torch.Tensor,
    meta: dict,
) -> tuple[int, int]:
    """Concatenate the shards in stream order into the final feature file; (kept, skipped)."""
    positions, feats, skipped, reasons = [], [], [], []
    for k in range(math.ceil(len(order) / shard_size)):
        path = _shard_path(work, k)
        z = _read_shard(path, k, s, shard_size, len(order)) if path.is_file() else None
        if z is None:
            raise UserError(
                f"shard {path} is missing or torn after every rank finished; rerun the same command to encode it again"
            )
        if len(z["positions"]):
            positions.append(z["positions"])
            feats.append(z["features"])
        skipped.extend(z["skipped"].tolist())
        reasons.extend(z["reasons"].tolist()[: len(z["skipped"])])
    if not positions:
        raise UserError(
            f"dataset {split.key}: none of the {len(order)} images could be read "
            f"(first: {reasons[0] if reasons else '?'}); check the image files"
        )
    pos = np.concatenate(positions)
    features = np.concatenate(feats)
    if features.shape[1] == 1:
        features = features[:, 0]
    labels = np.asarray([split.items[order[p]][1] for p in pos.tolist()], np.int64)
    meta = {
        **meta,
        "n": int(len(pos)),
        "skipped": len(skipped),
        "skipped_paths": reasons[:MAX_SKIPPED_LISTED],
        "classes": split.num_classes,
        "dim": int(features.shape[-1]),
    }
    save_features(out, features, text.cpu(), labels=labels, classnames=split.classnames, meta=meta)
    if skipped:
        log.warning("skipped %d unreadable image(s) of %d (first: %s)", len(skipped), len(order), reasons[0])
    return len(pos), len(skipped)


def _check_out(out: Path, split: TestSplit, data_root: str | Path | None, flag: str = "--out") -> None:
    """--out is a regular-file path that is none of the split's images, and not inside the dataset
    folder (`mstta.safety.check_outputs`)."""
    from .safety import check_outputs

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
    check_int(SimpleNamespace(**{"--views": views}), "--views", 1, MAX_VIEWS, " (1 = the original image only)")
    if limit is not None:
        check_int(SimpleNamespace(**{"--limit": limit}), "--limit", 1, MAX_LIMIT)
    if augment not in AUGMENTS:
        raise UserError(f"--augment {augment}: choose one of {', '.join(AUGMENTS)}")
    check_listing(listing)
    split = load_split(dataset, data_root, listing)
    if split.num_classes < 2:
        raise UserError(
            f"--dataset {dataset}: has {split.num_classes} class ({', '.join(split.classnames)}); "
            "a feature file needs at least 2 classes (replay ranks classes); add class folders"
        )
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
    `views_on`: auto | cpu | device (`mstta.extract_views`); in the file's meta, not its settings.
    `flag`: the option that named `out`, for messages. The output file (symlinks and `..` resolved,
    whether `out` named it or its folder) has one writer: a second extraction into it is refused
    (`mstta.atomic.output_lock`) before it writes anything.
    """
    for name, value, low, high in (
        ("--batch-size", batch_size, 1, MAX_BATCH),
        ("--shard-size", shard_size, 1, MAX_SHARD),
        ("--workers", workers, 0, MAX_WORKERS),
    ):
        if value is not None:
            check_int(SimpleNamespace(**{name: value}), name, low, high)
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
    if clip is not None and (clip.name, clip.pretrained, clip.precision) != (model, str(pretrained), s.precision):
        raise UserError(
            f"the loaded model is {clip.name} {clip.pretrained} {clip.precision}, but the extraction asks "
            f"for {model} {pretrained} {s.precision}; pass the matching model"
        )
    where = resolve_views_on(views_on, resolve_device(device)) if views > 1 else "cpu"  # 1 view: CLIP's own, PIL
    out_path = resolve_out(out, s, flag)
    _check_out(out_path, split, data_root, flag)
    real = Path(os.path.realpath(out_path))  # one writer, one work folder, however `out` is spelled
    with output_lock(real, flag):
        if check_existing(out_path, s, flag):
            log.info("reusing %s: it already holds these settings", out_path)
            return ExtractResult(out_path, True, len(order), 0, 0.0, 0.0)
        kept, skipped, encoded, seconds = _extract(
            split,
            tmpl,
            order,
            s,
            real,
            data_root,
            device=device,
            batch_size=batch_size,
            workers=workers,
            cache_dir=cache_dir,
            shard_size=shard_size or max(1, SHARD_IMAGES // views),
            progress=progress,
            clip=clip,
            where=where,
            weights=(model, pretrained),
        )
    return ExtractResult(out_path, False, kept, skipped, seconds, encoded * views / max(seconds, 1e-9))


def _extract(
    split: TestSplit,
    tmpl: list[str],
    order: list[int],
    s: ExtractSettings,
    out_path: Path,
    data_root: str | Path | None,
    *,
    device: str,
    batch_size: int,
    workers: int | None,
    cache_dir: str | Path | None,
    shard_size: int,
    progress: bool,
    clip: ClipModel | None,
    where: str,
    weights: tuple[str, str],
) -> tuple[int, int, int, float]:
    """Encode the missing shards and merge them into `out_path` (its writer holds its lock):
    (kept, skipped, encoded samples, seconds)."""
    dist, dev = _start_dist(device)
    try:
        clip = clip if clip is not None else load_clip(*weights, dev, s.precision)  # before any write
        text = build_text_classifier(clip, split.classnames, tmpl, cache_dir) if dist.rank == 0 else None
        t0 = time.perf_counter()  # images/s: encoding and merging only
        n_shards = math.ceil(len(order) / shard_size)
        work = out_path.parent / hidden_name(out_path.name, ".work")
        if dist.rank == 0:
            sweep_stale(out_path.parent)
            _prepare_work(work, s)
            sweep_stale(work)
            check_shards(work, s, shard_size, len(order))
        dist.barrier()
        mine = [k for k in range(n_shards) if k % dist.world == dist.rank and not _shard_path(work, k).is_file()]
        encoded = sum(min(len(order), (k + 1) * shard_size) - k * shard_size for k in mine) * dist.world
        if mine:
            try:
                _run_shards(
                    clip,
                    split,
                    order,
                    mine,
                    work,
                    s,
                    shard_size,
                    batch_size,
                    default_workers(dist.world) if workers is None else workers,
                    progress and dist.rank == 0,
                    where,
                )
            except UserError:  # a refusal (not an interrupt): a rerun refuses again, keep nothing
                if dist.world == 1:
                    shutil.rmtree(work, ignore_errors=True)
                raise
        dist.barrier()
        kept, skipped = len(order), 0
        if dist.rank == 0:
            meta = {
                **asdict(s),
                "templates": len(tmpl),
                "version": __version__,
                "stream": f"torch.randperm(n, seed={s.seed})",
                "data_root": str(data_root or ""),
                "views_on": where,
            }
            kept, skipped = _merge(work, out_path, s, shard_size, split, order, text, meta)
            shutil.rmtree(work, ignore_errors=True)
    finally:
        dist.close()
    return kept, skipped, encoded, time.perf_counter() - t0


def extract_features(dataset: str, out: str | Path, data_root: str | Path | None = None, **kwargs) -> Path:
    """Extract `dataset`'s test split into a feature file (keyword options as `run_extraction`); its path."""
    return run_extraction(dataset, out, data_root, **kwargs).path
