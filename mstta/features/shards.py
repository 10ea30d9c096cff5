"""An extraction's shards: the hidden work folder next to the output, each shard's file (written
atomically, stamped with the run's settings and its index, checked by content before it is trusted),
and the merge of every shard, in stream order, into the final feature file.

    prepare_work(work, settings)                   # create it; another run's work folder is discarded
    good = check_shards(work, settings, shard_size, n, dim)  # the indices of the shards this run wrote
    kept, skipped = merge_shards(work, out, settings, shard_size, split, order, text, meta)

Shard `k` holds stream positions [k * shard_size, min(n, (k + 1) * shard_size)).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from ..atomic import atomic_open
from ..data import TestSplit
from ..errors import UserError
from .extract_settings import ExtractSettings
from .format import save_features

log = logging.getLogger(__name__)

MAX_SKIPPED_LISTED = 20  # unreadable image paths recorded in `meta`


def shard_path(work: Path, k: int) -> Path:
    """The file of shard `k` in the work folder."""
    return work / f"shard-{k:06d}.npz"


def settings_key(s: ExtractSettings) -> str:
    """The settings as the work folder's marker holds them (and, hashed, every shard)."""
    return json.dumps(asdict(s), sort_keys=True)


def shard_stamp(s: ExtractSettings, k: int) -> str:
    """What shard `k` of a run with settings `s` carries: another run's shard (or another index) differs."""
    return f"{hashlib.sha256(settings_key(s).encode()).hexdigest()[:32]}:{k}"


def prepare_work(work: Path, s: ExtractSettings) -> None:
    """Create the work folder for these settings; a stale one (other settings) is discarded."""
    marker = work / "settings.json"
    want = settings_key(s)
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


SHARD_ARRAYS = {"positions", "features", "skipped", "reasons", "stamp"}


def read_shard(path: Path, k: int, s: ExtractSettings, shard_size: int, n: int, dim: int) -> dict | None:
    """Shard `k`'s arrays when the file is one this run wrote (checked by content: a readable archive
    stamped with these settings and this index, its positions and skipped ones exactly the shard's
    stream positions, one feature row of `s.views` x `dim` finite values per kept position); else None."""
    lo, hi = k * shard_size, min(n, (k + 1) * shard_size)
    try:
        with np.load(path, allow_pickle=False) as z:
            if set(z.files) != SHARD_ARRAYS or str(z["stamp"]) != shard_stamp(s, k):
                return None
            got = {name: z[name] for name in SHARD_ARRAYS}
    except Exception:  # a torn or foreign file of any kind: np.load raises many types; the shard is redone
        return None
    pos, skipped, feats = got["positions"], got["skipped"], got["features"]
    if pos.dtype.kind != "i" or skipped.dtype.kind != "i" or pos.ndim != 1 or skipped.ndim != 1:
        return None
    if sorted(pos.tolist() + skipped.tolist()) != list(range(lo, hi)):
        return None
    if len(pos) and (
        feats.ndim != 3
        or feats.shape != (len(pos), s.views, dim)
        or feats.dtype != np.float16
        or not np.isfinite(feats).all()
    ):
        return None
    return got


def check_shards(work: Path, s: ExtractSettings, shard_size: int, n: int, dim: int) -> list[int]:
    """Discard every shard file of the work folder that this run did not write (torn by a kill, another
    run's, a stray file under a shard's name, features of a width other than the model's `dim`), with
    one warning each; the indices of the good ones."""
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
            and read_shard(path, k, s, shard_size, n, dim) is not None
        ):
            good.append(k)
            continue
        log.warning("discarding %s: torn, or not a shard of this extraction; it is encoded again", path)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return good


def write_shard(
    path: Path, positions: list[int], feats: list[np.ndarray], skipped: list[tuple[int, str]], stamp: str
) -> None:
    """Write one completed shard (kept positions, their features, skipped positions and why) atomically."""
    arrays = {
        "positions": np.asarray(positions, np.int64),
        "features": np.concatenate(feats) if feats else np.zeros((0, 0, 0), np.float16),
        "skipped": np.asarray([p for p, _ in skipped], np.int64),
        "reasons": np.asarray([r for _, r in skipped] or [""]),
        "stamp": np.asarray(stamp),
    }
    with atomic_open(path, "wb") as fh:
        np.savez(fh, **arrays)


def shard_batches(shards: list[int], shard_size: int, n: int, per_batch: int) -> Iterator[list[int]]:
    """Stream positions in batches that never cross a shard boundary."""
    for k in shards:
        lo, hi = k * shard_size, min(n, (k + 1) * shard_size)
        for b in range(lo, hi, per_batch):
            yield list(range(b, min(hi, b + per_batch)))


def merge_shards(
    work: Path,
    out: Path,
    s: ExtractSettings,
    shard_size: int,
    split: TestSplit,
    order: list[int],
    text: torch.Tensor,
    meta: dict,
) -> tuple[int, int]:
    """Concatenate the shards in stream order into the final feature file, each checked first (the
    text's width included); (kept, skipped)."""
    positions, feats, skipped, reasons = [], [], [], []
    dim = int(text.shape[-1])
    for k in range(math.ceil(len(order) / shard_size)):
        path = shard_path(work, k)
        z = read_shard(path, k, s, shard_size, len(order), dim) if path.is_file() else None
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
